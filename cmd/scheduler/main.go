// Command gantry-scheduler is Gantry's scheduler: it watches the cluster, runs the
// scheduling core, and binds, allocates and evicts. Flags and wiring only; the work
// is in pkg/kube and pkg/scheduler.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gantry-dev/gantry/pkg/certs"
	"github.com/gantry-dev/gantry/pkg/kube"
	"github.com/gantry-dev/gantry/pkg/webhook"
)

type names []string

func (n *names) String() string { return strings.Join(*n, ",") }
func (n *names) Set(v string) error {
	*n = append(*n, v)
	return nil
}

func main() {
	var (
		kubeconfig     = flag.String("kubeconfig", "", "kubeconfig file; empty for in-cluster config")
		schedulerNames names
		leaderElect    = flag.Bool("leader-elect", true, "elect a leader through a Lease so that only one replica schedules")
		leaseNamespace = flag.String("leader-elect-namespace", "gantry-system", "namespace of the leader-election Lease")
		leaseName      = flag.String("leader-elect-name", "gantry-scheduler", "name of the leader-election Lease")
		qps            = flag.Float64("kube-api-qps", 50, "client QPS to the API server")
		burst          = flag.Int("kube-api-burst", 100, "client burst to the API server")
		metricsAddr    = flag.String("metrics-bind-address", ":8080", "address of /metrics; 0 disables")
		metricsSecure  = flag.Bool("metrics-secure", true, "serve /metrics over HTTPS to clients the API server authenticates and authorizes (get on the non-resource URL /metrics); a loopback address is always plain HTTP, for a proxy in the pod")
		metricsCertDir = flag.String("metrics-cert-dir", "", "directory with tls.crt and tls.key for /metrics (reloaded when they change); empty: a self-signed certificate")
		probeAddr      = flag.String("health-probe-bind-address", ":8081", "address of /healthz (process), /livez (the scheduling loop has not stalled) and /readyz (leading, synced); 0 disables")
		configPath     = flag.String("config", "", "policy file (YAML): policy, preemption, minRuntime, evictionQPS, evictionBurst, bindWorkers")
		webhookAddr    = flag.String("webhook-bind-address", "", "serve the Queue validating and pod defaulting webhooks here (TLS); empty disables")
		webhookCertDir = flag.String("webhook-cert-dir", "/etc/gantry/webhook", "directory with tls.crt and tls.key for the webhooks")
		cycleTrace     = flag.String("cycle-trace", "", "write one tab-separated line per scheduling cycle to this file: its start (Unix microseconds), its time (microseconds), the pods and gangs it sent to bind, the gangs left pending, the binds in flight at its start, its pod budget and the gangs it deferred; buffered, flushed about once a second. For benchmarks and diagnosis; the --v=4 Cycle log line says the same and more at several times the cost. Empty (the default) disables")
		profilingAddr  = flag.String("profiling-address", "", "serve Go's pprof profiles (CPU, heap, block, mutex, goroutine) at /debug/pprof/ on this address, e.g. 127.0.0.1:6060; also turns on block and mutex sampling. Empty (the default) disables")
	)
	flag.Var(&schedulerNames, "scheduler-name", "schedulerName of the pods to serve; repeatable (default gantry-scheduler)")
	klog.InitFlags(nil)
	// certwatcher logs through controller-runtime's logger; route it to klog.
	ctrllog.SetLogger(klog.NewKlogr())
	flag.Parse()
	klog.Info(setMemoryLimit(cgroupRoot, os.LookupEnv))
	klog.Info(tuneGC(os.LookupEnv))
	if len(schedulerNames) == 0 {
		schedulerNames = names{"gantry-scheduler"}
	}
	if err := serveProfiles(*profilingAddr); err != nil {
		fmt.Fprintln(os.Stderr, "gantry-scheduler:", err)
		os.Exit(1)
	}
	metrics := metricsOptions{addr: *metricsAddr, secure: *metricsSecure, certDir: *metricsCertDir}
	var trace io.Writer
	if *cycleTrace != "" {
		f, err := os.Create(*cycleTrace)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gantry-scheduler: --cycle-trace:", err)
			os.Exit(1)
		}
		defer f.Close()
		trace = f
	}
	if err := run(*kubeconfig, schedulerNames, *leaderElect, *leaseNamespace, *leaseName, float32(*qps), *burst, metrics, *probeAddr, *configPath, *webhookAddr, *webhookCertDir, trace); err != nil {
		fmt.Fprintln(os.Stderr, "gantry-scheduler:", err)
		os.Exit(1)
	}
}

// annotationShareClaims turns on the pod webhook's conversion of gantry.dev/gpu-memory
// annotations into DRA claims (pkg/webhook.PodDefaulter.Templates).
var annotationShareClaims = flag.Bool("annotation-share-claims", false, "pod webhook: turn a gantry.dev/gpu-memory or gantry.dev/gpu-fraction annotation into a gpu.gantry.dev ResourceClaim (from a ResourceClaimTemplate it creates in the pod's namespace) that the node agent prepares, once some node publishes gpu.gantry.dev GPUs; refuses such a pod that also requests nvidia.com/gpu; records the pods using each template as its owners, so that the garbage collector deletes it once they are gone; needs get, create and patch on resourceclaimtemplates")

func run(kubeconfig string, schedulerNames []string, leaderElect bool, leaseNamespace, leaseName string, qps float32, burst int, metrics metricsOptions, probeAddr, configPath, webhookAddr, webhookCertDir string, trace io.Writer) error {
	cfg, err := kube.LoadConfig(configPath)
	if err != nil {
		return err
	}
	restCfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("client config: %w", err)
	}
	restCfg.QPS, restCfg.Burst = qps, burst
	restCfg.UserAgent = "gantry-scheduler"
	client, err := kubernetes.NewForConfig(restCfg)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	// Ready: a standby replica is ready at once (it serves webhooks and waits for the
	// Lease); the leader once its informers have synced.
	var ready atomic.Bool
	if leaderElect {
		ready.Store(true)
	}
	if _, err := serveMetrics(ctx, metrics, restCfg, reg); err != nil {
		return err
	}
	live := kube.NewLiveness(cfg.StallTimeout.Duration)
	if err := serveProbes(ctx, probeAddr, &ready, live); err != nil {
		return err
	}

	// Webhooks are served by every replica, leader or not: the API server may call
	// any of them.
	if webhookAddr != "" {
		dyn, err := dynamic.NewForConfig(restCfg)
		if err != nil {
			return err
		}
		// With the chart's default certMode "self", every replica keeps the webhook
		// certificate in a Secret, writes it to webhookCertDir and sets the webhooks'
		// caBundle (pkg/certs); with cert-manager the files are mounted.
		certOpts, selfManaged, err := certs.OptionsFromEnv(webhookCertDir)
		if err != nil {
			return err
		}
		if selfManaged {
			if err := certs.Start(ctx, client, certOpts); err != nil {
				return fmt.Errorf("webhook certificates: %w", err)
			}
		}
		if err := webhook.Serve(ctx, webhookAddr, webhookCertDir, dyn, webhook.WithAnnotationShareClaims(*annotationShareClaims)); err != nil {
			return err
		}
	}
	lead := func(ctx context.Context) {
		ready.Store(false)
		err := kube.Run(ctx, kube.Options{
			RestConfig: restCfg, SchedulerNames: schedulerNames, Config: cfg, Registry: reg,
			Ready: func() { ready.Store(true) }, Liveness: live, CycleTrace: trace,
		})
		if err != nil {
			klog.ErrorS(err, "Scheduler stopped")
			os.Exit(1)
		}
	}
	if !leaderElect {
		lead(ctx)
		return nil
	}
	id, _ := os.Hostname()
	id = fmt.Sprintf("%s_%d", id, os.Getpid())
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: leaseNamespace, Name: leaseName},
		Client:     client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: id},
	}
	leaderelection.RunOrDie(ctx, leaderelection.LeaderElectionConfig{
		Lock:            lock,
		ReleaseOnCancel: true,
		LeaseDuration:   15 * time.Second,
		RenewDeadline:   10 * time.Second,
		RetryPeriod:     2 * time.Second,
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: lead,
			OnStoppedLeading: func() {
				klog.InfoS("Lost leadership; exiting so that a fresh replica takes over")
				os.Exit(0)
			},
		},
	})
	return nil
}
