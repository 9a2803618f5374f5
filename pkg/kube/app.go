// Package kube wires the scheduler to Kubernetes: Run builds the clients, the cache,
// the informers that feed it, the dispatch loop and the status reporters, and runs
// them; Options and Config are its settings. It is the only tree that holds a
// client: the core (model, placement, fairshare, preempt, scheduler, gang) never
// sees one.
//
// The parts, lowest first (docs/architecture.md draws the arrows):
//
//   - dra: ResourceClaims and the structured allocator;
//   - metrics: the Prometheus series, fed plain numbers;
//   - cache: nodes, pods, gangs and devices, the one demand function, Prepare and
//     Commit;
//   - informers: API events into the cache;
//   - dispatch: the cycle loop and its I/O (binds, evictions, pod status, Events);
//   - report: Queue and PodGroup status.
package kube

import (
	"context"
	"fmt"
	"io"
	"net"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/bootstrap"
	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/kube/dispatch"
	"github.com/gantry-dev/gantry/pkg/kube/informers"
	"github.com/gantry-dev/gantry/pkg/kube/metrics"
	"github.com/gantry-dev/gantry/pkg/kube/report"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// Options configure a scheduler process.
type Options struct {
	RestConfig     *rest.Config
	SchedulerNames []string
	Config         Config
	// Registry receives the metrics; nil registers nowhere.
	Registry prometheus.Registerer
	// Ready is called once the informers have synced and scheduling starts.
	Ready func()
	// Liveness, when set, is told of every completed cycle and of the pods that
	// wait, so that the health probe fails when the loop stalls (cmd/scheduler).
	Liveness *Liveness
	// CycleTrace, when set, gets one line per scheduling cycle (dispatch.Options.Trace).
	CycleTrace io.Writer
}

// Run schedules until ctx ends: informers, the cycle loop and the status reporter.
// cmd/scheduler calls it under leader election; tests and the sandbox call it
// directly.
func Run(ctx context.Context, o Options) error {
	if len(o.SchedulerNames) == 0 {
		o.SchedulerNames = []string{"gantry-scheduler"}
	}
	o.RestConfig = Uncompressed(o.RestConfig)
	client, err := kubernetes.NewForConfig(Protobuf(o.RestConfig))
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(o.RestConfig)
	if err != nil {
		return err
	}
	sched, err := scheduler.New(o.Config.Policy, scheduler.Config{
		Preemption:        o.Config.PreemptionEnabled(),
		MinRuntimeSeconds: int64(o.Config.MinRuntime.Seconds()),
	})
	if err != nil {
		return fmt.Errorf("config: %w", err)
	}
	reg := o.Registry
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	kinds := make([]string, len(scheduler.PendingKinds))
	for i, k := range scheduler.PendingKinds {
		kinds[i] = string(k)
	}
	m := metrics.New(reg, kinds)

	if err := ensureDefaultQueue(ctx, o, dyn); err != nil {
		return err
	}
	lookup := informers.NewObjectLookup()
	c := cache.New(o.SchedulerNames, lookup, o.Config.DefaultQueueName())
	c.SetTimeouts(cache.Timeouts{BelowMinimum: o.Config.GangBelowMinimumGrace.Duration, Incomplete: o.Config.IncompleteGangTimeout.Duration})
	inf, err := informers.New(client, dyn, c, lookup)
	if err != nil {
		return fmt.Errorf("informers: %w", err)
	}
	if err := inf.Start(ctx); err != nil {
		return err
	}
	recorder, scheduled, stopEvents, err := startEvents(ctx, o, lookup, m)
	if err != nil {
		return err
	}
	defer stopEvents()
	var cycled func(time.Time)
	if o.Liveness != nil {
		o.Liveness.started(time.Now(), inf.WaitingPods)
		cycled = o.Liveness.cycled
	}
	// The binds, evictions and status writes go on a connection of their own, so
	// that a Binding and its answer do not share one TCP connection, and the API
	// server's writes to it, with the pod watch's stream of events. Under steady
	// arrivals its effect was within the noise of the benchmarks (issue 21,
	// docs/benchmarks.md, session 12).
	writer, err := kubernetes.NewForConfig(OwnConnection(Protobuf(o.RestConfig)))
	if err != nil {
		return err
	}
	runner := dispatch.New(c, sched, writer, recorder, m, dispatch.Options{
		BindWorkers: o.Config.BindWorkers, EvictionQPS: o.Config.EvictionQPS, EvictionBurst: o.Config.EvictionBurst,
		Cycled: cycled,
		Events: scheduled,
		Trace:  o.CycleTrace,
	})
	status := report.New(c, sched, dyn, m, lookup.PodGroups, runner.Pending)
	go status.Run(ctx, 2*time.Second)
	klog.InfoS("Scheduling", "schedulerNames", o.SchedulerNames, "policy", sched.Placer.Policy())
	if o.Ready != nil {
		o.Ready()
	}
	runner.Run(ctx)
	return nil
}

// ensureDefaultQueue creates the default queue (pkg/bootstrap, the one path that
// creates it): the chart's spec in GANTRY_DEFAULT_QUEUE, else the built-in one
// (sandbox, tests). Created in the background, retrying while the Queue webhook is not
// served yet; not at all with createDefaultQueue: false. Until it exists, pods with no
// queue label wait.
func ensureDefaultQueue(ctx context.Context, o Options, dyn dynamic.Interface) error {
	if !o.Config.CreatesDefaultQueue() {
		klog.InfoS("Not creating the default queue (createDefaultQueue: false); pods with no queue label wait until it exists", "queue", o.Config.DefaultQueueName())
		return nil
	}
	q, err := bootstrap.QueueFromEnvOr(o.Config.DefaultQueueName())
	if err != nil {
		return err
	}
	go func() {
		if err := bootstrap.EnsureQueue(ctx, dyn, q, time.Minute); err != nil && ctx.Err() == nil {
			klog.ErrorS(err, "Cannot create the default queue; pods with no queue label wait until it exists", "queue", q.Name)
		}
	}()
	return nil
}

// startEvents starts the writer of all the scheduler's Events: kube-scheduler's
// pipeline (an events.k8s.io broadcaster over a rate-limited client of its own).
// Its recorder takes the pending reasons' and preemptions' Events straight; the
// Scheduled Events go behind a bounded queue (dispatch.Events). stop shuts the
// broadcaster down.
func startEvents(ctx context.Context, o Options, lookup gang.Lookup, m *metrics.Metrics) (events.EventRecorder, *dispatch.Events, func(), error) {
	eb, err := dispatch.NewEventBroadcaster(ctx, Protobuf(o.RestConfig))
	if err != nil {
		return nil, nil, nil, err
	}
	eb.StartRecordingToSink(ctx.Done())
	recorder := eb.NewRecorder(o.SchedulerNames[0])
	e := dispatch.NewEvents(recorder, lookup, m.EventDropped)
	go e.Run(ctx)
	return recorder, e, eb.Shutdown, nil
}

// OwnConnection is cfg for a client that dials a connection of its own: client-go
// shares one HTTP/2 connection among the clients of equal configs, and gives a
// config with a dialer of its own a transport of its own.
func OwnConnection(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	if c.Dial == nil {
		c.Dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	return c
}

// Uncompressed is cfg with gzip off, as kube-scheduler sets it for all its clients.
// Since Kubernetes 1.37 (WatchListCompression) the API server gzips a watch-list
// stream, each event as a gzip member of its own, for every client that accepts
// gzip, as Go's HTTP client does by default: every pod change cost the API server a
// compression and the scheduler a decompression for each of its informers, about 4 %
// of gantry-scheduler's CPU at 100 pods/s (docs/benchmarks.md, session 13), on the
// fast local network between the scheduler and the API server where it saves
// nothing worth that CPU.
func Uncompressed(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.DisableCompression = true
	return c
}

// Protobuf is cfg for a typed clientset: built-in kinds travel as protobuf, as
// kube-scheduler's and kube-controller-manager's do, and JSON only where the server
// offers nothing else. The informers decode every pod change, and a pod decodes
// from protobuf at a fraction of JSON's CPU, which on a busy control plane is CPU
// taken from the API server (issue 21). Custom resources (Queues, PodGroups,
// KubeRay's) have no protobuf form and go through the dynamic client, in JSON.
func Protobuf(cfg *rest.Config) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.ContentType = runtime.ContentTypeProtobuf
	c.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return c
}
