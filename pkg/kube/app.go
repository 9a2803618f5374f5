package kube

import (
	"context"
	"fmt"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

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
}

// Run schedules until ctx ends: informers, the cycle loop and the status reporter.
// cmd/scheduler calls it under leader election; tests and the sandbox call it
// directly.
func Run(ctx context.Context, o Options) error {
	if len(o.SchedulerNames) == 0 {
		o.SchedulerNames = []string{"gantry-scheduler"}
	}
	client, err := kubernetes.NewForConfig(o.RestConfig)
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
	metrics := NewMetrics(reg)

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(scheme.Scheme, corev1.EventSource{Component: o.SchedulerNames[0]})

	lookup := NewObjectLookup()
	cache := NewCache(o.SchedulerNames, lookup)
	cache.snap.DefaultQueue = o.Config.DefaultQueueName()
	inf, err := NewInformers(client, dyn, cache, lookup)
	if err != nil {
		return fmt.Errorf("informers: %w", err)
	}
	if err := inf.Start(ctx); err != nil {
		return err
	}
	runner := NewRunner(cache, sched, client, recorder, metrics, RunnerOptions{
		BindWorkers: o.Config.BindWorkers, EvictionQPS: o.Config.EvictionQPS, EvictionBurst: o.Config.EvictionBurst,
	})
	status := NewStatusReporter(cache, sched, dyn, metrics, lookup, runner.Pending)
	go status.Run(ctx, 2*time.Second)
	klog.InfoS("Scheduling", "schedulerNames", o.SchedulerNames, "policy", sched.Placer.Policy())
	if o.Ready != nil {
		o.Ready()
	}
	runner.Run(ctx)
	return nil
}
