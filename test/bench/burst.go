package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"time"

	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/test/testenv"
)

// Names of the workload's objects: training RayClusters train-00…, RayServices
// llm-00… (at most 100 of each).
const (
	trainingPrefix = "train-"
	servicePrefix  = "llm-"
)

// BurstOptions configure the live burst benchmark (issue 19): a cluster full of
// preemptible training Ray clusters, then a burst of vLLM RayServices at once.
type BurstOptions struct {
	// BinDir holds the control-plane tools, kwok, the KubeRay operator and
	// gantry-scheduler (testenv.BinDir when empty).
	BinDir string
	// GantryBinary is gantry-scheduler's binary (BinDir/gantry-scheduler when empty).
	GantryBinary string
	// Nodes × GPUs is the cluster (8 × 8); Training clusters of Workers one-GPU
	// workers fill it (16 × 4), MinWorkers of them each gang's minimum (4: rigid).
	Nodes, GPUs, Training, Workers, MinWorkers int
	// Bursts are the numbers of RayServices created at once (1, 8, 32).
	Bursts []int
	// Modes are "whole" (a whole GPU per service) and "share" (Share of one GPU).
	Modes []string
	// Share is the gantry.dev/gpu-memory of a service's worker in share mode
	// ("20Gi"); Utilization its engine's gpu_memory_utilization (0.75).
	Share       string
	Utilization float64
	// Grace is how long kwok keeps a deleted pod, bound, before it goes (5 s).
	Grace time.Duration
	// Repeat runs every burst size and mode this many times (3); medians are reported.
	Repeat int
	// Settle is how long a run goes on after the last service is bound, to catch
	// evictions that still run (10 s); Timeout bounds a burst (3 min).
	Settle, Timeout time.Duration
	// WorkDir receives one folder of logs per run.
	WorkDir  string
	Progress io.Writer
}

func (o *BurstOptions) defaults() error {
	if o.BinDir == "" {
		d, err := testenv.BinDir()
		if err != nil {
			return err
		}
		o.BinDir = d
	}
	if o.GantryBinary == "" {
		o.GantryBinary = filepath.Join(o.BinDir, "gantry-scheduler")
	}
	set := func(v *int, d int) {
		if *v == 0 {
			*v = d
		}
	}
	set(&o.Nodes, 8)
	set(&o.GPUs, 8)
	set(&o.Training, 16)
	set(&o.Workers, 4)
	set(&o.MinWorkers, o.Workers)
	set(&o.Repeat, 3)
	if len(o.Bursts) == 0 {
		o.Bursts = []int{1, 8, 32}
	}
	if len(o.Modes) == 0 {
		o.Modes = []string{"whole", "share"}
	}
	if o.Share == "" {
		o.Share = "20Gi"
	}
	if o.Utilization == 0 {
		o.Utilization = 0.75
	}
	if o.Grace == 0 {
		o.Grace = 5 * time.Second
	}
	if o.Settle == 0 {
		o.Settle = 10 * time.Second
	}
	if o.Timeout == 0 {
		o.Timeout = 3 * time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	for _, m := range o.Modes {
		if m != "whole" && m != "share" {
			return fmt.Errorf("mode %q: use whole or share", m)
		}
	}
	if o.MinWorkers > o.Workers {
		return fmt.Errorf("min workers %d above workers %d", o.MinWorkers, o.Workers)
	}
	if o.Training*o.Workers > o.Nodes*o.GPUs {
		return fmt.Errorf("%d training clusters of %d GPUs do not fit in %d × %d GPUs", o.Training, o.Workers, o.Nodes, o.GPUs)
	}
	for _, n := range o.Bursts {
		if n < 1 || n > 100 || o.Training > 100 {
			return fmt.Errorf("bursts of 1 to 100 services and at most 100 training clusters, not %d and %d", n, o.Training)
		}
	}
	if o.WorkDir == "" {
		d, err := os.MkdirTemp("", "gantry-burst-")
		if err != nil {
			return err
		}
		o.WorkDir = d
	}
	if err := os.MkdirAll(o.WorkDir, 0o755); err != nil {
		return err
	}
	if _, err := os.Stat(o.GantryBinary); err != nil {
		return fmt.Errorf("%s missing: run `make build`", o.GantryBinary)
	}
	return nil
}

func (o *BurstOptions) logf(format string, args ...any) {
	fmt.Fprintf(o.Progress, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// RunBurst runs every mode and burst size Repeat times, each on a fresh control
// plane, and returns every run and the medians.
func RunBurst(ctx context.Context, o BurstOptions) (*BurstReport, error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	rep := &BurstReport{Started: time.Now().UTC(), Machine: describeMachine(), Options: o}
	bin, err := snapshotBinary(o.GantryBinary, filepath.Join(o.WorkDir, "gantry-scheduler"))
	if err != nil {
		return nil, fmt.Errorf("copy %s: %w", o.GantryBinary, err)
	}
	rep.Gantry, o.GantryBinary = bin, bin.Path
	o.logf("logs in %s; gantry-scheduler sha256 %.12s", o.WorkDir, bin.SHA256)
	for _, mode := range o.Modes {
		for _, n := range o.Bursts {
			var runs []BurstRun
			for i := 1; i <= o.Repeat && ctx.Err() == nil; i++ {
				r := runBurstOnce(ctx, o, mode, n, i)
				o.logf("%s burst %d run %d: %s", mode, n, i, r.oneLine())
				runs = append(runs, r)
			}
			rep.Runs = append(rep.Runs, runs...)
			rep.Summary = append(rep.Summary, summarizeBurst(mode, n, runs))
		}
	}
	rep.Duration = round(time.Since(rep.Started).Seconds(), 1)
	return rep, ctx.Err()
}

func runBurstOnce(ctx context.Context, o BurstOptions, mode string, n, run int) BurstRun {
	r := BurstRun{Mode: mode, Burst: n, Run: run, Status: StatusOK}
	if err := burstOnce(ctx, o, &r); err != nil {
		r.Status = "error: " + err.Error()
	}
	return r
}

func burstOnce(ctx context.Context, o BurstOptions, r *BurstRun) (err error) {
	dir := filepath.Join(o.WorkDir, fmt.Sprintf("%s-%d-%d", r.Mode, r.Burst, r.Run))
	overlay, err := overlayBinDir(o.BinDir, dir, o.Grace)
	if err != nil {
		return err
	}
	// testenv reads its tools from $GANTRY_BIN_DIR: the overlay gives kwok the grace.
	prev, had := os.LookupEnv("GANTRY_BIN_DIR")
	os.Setenv("GANTRY_BIN_DIR", overlay)
	defer func() {
		if had {
			os.Setenv("GANTRY_BIN_DIR", prev)
		} else {
			os.Unsetenv("GANTRY_BIN_DIR")
		}
	}()
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	// No kube-controller-manager: the benchmark creates the namespace's service
	// account and lifts the nodes' not-ready taint itself, and on a loaded machine its
	// node-lifecycle controller could evict pods of a node whose kwok heartbeat is late.
	env, err := testenv.Start(startCtx, testenv.Options{Kwok: true, KubeRay: true})
	cancel()
	if err != nil {
		return err
	}
	r.LogDir = dir
	defer func() {
		// The control plane's folder goes with it: keep the logs that explain a run.
		for _, name := range []string{"gantry-scheduler.log", "kuberay-operator.log", "kwok.log"} {
			if b, rerr := os.ReadFile(filepath.Join(env.Dir, name)); rerr == nil {
				_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
			}
		}
		if serr := env.Stop(); serr != nil && err == nil {
			err = fmt.Errorf("stop control plane: %w", serr)
		}
	}()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	if err := prepareBurstCluster(ctx, env, o); err != nil {
		return err
	}
	metricsURL, err := startBurstScheduler(env, o.GantryBinary)
	if err != nil {
		return err
	}
	rec := newBurstRecorder(1 + o.MinWorkers)
	watchCtx, stop := context.WithCancel(ctx)
	defer stop()
	ready := make(chan struct{})
	go rec.run(watchCtx, env.Client, ready)
	<-ready

	for i := 0; i < o.Training; i++ {
		if err := createObject(ctx, dyn, rayClusterGVR, trainingCluster(fmt.Sprintf("%s%02d", trainingPrefix, i), o.Workers, o.MinWorkers, o.Grace)); err != nil {
			return err
		}
	}
	if err := waitFor(ctx, env, 3*time.Minute, func() bool { _, t := rec.boundWorkers(); return t == o.Training }); err != nil {
		return fmt.Errorf("training clusters never all bound: %w", err)
	}
	o.logf("%s burst %d run %d: %d training clusters bound; creating %d RayServices", r.Mode, r.Burst, r.Run, o.Training, r.Burst)
	time.Sleep(2 * time.Second) // let bursts of status updates pass before the clock starts

	start := time.Now()
	rec.countPartialFrom(start)
	share := ""
	if r.Mode == "share" {
		share = o.Share
	}
	errs := make(chan error, r.Burst)
	for i := 0; i < r.Burst; i++ {
		go func(i int) {
			errs <- createObject(ctx, dyn, rayServiceGVR, inferenceService(fmt.Sprintf("%s%02d", servicePrefix, i), share, o.Utilization, o.Grace))
		}(i)
	}
	for i := 0; i < r.Burst; i++ {
		if err := <-errs; err != nil {
			return err
		}
	}
	timedOut := waitFor(ctx, env, o.Timeout, func() bool { s, _ := rec.boundWorkers(); return s == r.Burst }) != nil
	allBound := time.Now()
	time.Sleep(o.Settle)
	traces := rec.traces()
	r.analyze(o, traces, start, allBound, rec.partialGangs())
	if r.Metrics, err = scrapeBurstMetrics(ctx, metricsURL); err != nil {
		return fmt.Errorf("scrape gantry-scheduler's metrics: %w", err)
	}
	if err := writePodTraces(filepath.Join(dir, "pods.tsv"), traces, start); err != nil {
		return err
	}
	if timedOut {
		r.Status = StatusTimeout
	}
	return env.Exited("gantry-scheduler")
}

// prepareBurstCluster installs the PriorityClasses, the namespace and the nodes.
func prepareBurstCluster(ctx context.Context, env *testenv.Env, o BurstOptions) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	if _, err := testenv.ApplyFile(ctx, env.Config, "", filepath.Join(root, "deploy", "manifests", "priorityclasses.yaml")); err != nil {
		return err
	}
	if err := env.CreateNamespace(ctx, Namespace); err != nil {
		return err
	}
	return createBurstNodes(ctx, env.Client, o.Nodes, o.GPUs)
}

// startBurstScheduler runs gantry-scheduler as the sandbox does: serving
// gantry-scheduler and kai-scheduler (the name KubeRay stamps on its pods). It
// returns the URL of its metrics.
func startBurstScheduler(env *testenv.Env, bin string) (string, error) {
	var ports [2]int
	for i := range ports {
		p, err := testenv.FreePort()
		if err != nil {
			return "", err
		}
		ports[i] = p
	}
	_, err := env.StartProcess("gantry-scheduler", bin, false,
		"--kubeconfig="+env.Kubeconfig,
		"--leader-elect=false",
		"--scheduler-name=gantry-scheduler",
		"--scheduler-name=kai-scheduler",
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(ports[0]),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(ports[1]),
	)
	return "http://127.0.0.1:" + strconv.Itoa(ports[0]) + "/metrics", err
}

// waitFor polls done every 100 ms until it holds, the scheduler exits or timeout.
func waitFor(ctx context.Context, env *testenv.Env, timeout time.Duration, done func() bool) error {
	deadline := time.Now().Add(timeout)
	for !done() {
		if err := env.Exited("gantry-scheduler"); err != nil {
			return err
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not done after %s", timeout)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return nil
}
