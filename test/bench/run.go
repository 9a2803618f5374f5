package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/test/testenv"
)

// Options configure a benchmark run.
type Options struct {
	// BinDir holds kube-apiserver, etcd, kube-controller-manager and kube-scheduler
	// (testenv.BinDir when empty).
	BinDir string
	// GantryBinary is gantry-scheduler's binary (BinDir/gantry-scheduler when empty).
	GantryBinary string
	// Scale multiplies every scenario's nodes and pods (1 when 0).
	Scale float64
	// QPS is the client QPS and burst of both schedulers and of the harness.
	QPS int
	// Workers is how many goroutines create nodes and pods.
	Workers int
	// RunTimeout bounds one scheduler's run from its start to the last bind.
	RunTimeout time.Duration
	// StallTimeout ends a run early when no pod has been bound for this long.
	StallTimeout time.Duration
	// WorkDir receives one folder of scheduler logs per run.
	WorkDir string
	// CPUProfile and HeapProfile, when set, run gantry-scheduler in this process
	// (pkg/kube.Run) instead of its binary and write pprof profiles of the
	// scheduling phase, with the file name prefixed by the scenario's name. Memory
	// figures are then not reported for gantry.
	CPUProfile, HeapProfile string
	// Progress receives one line per step.
	Progress io.Writer
}

func (o *Options) defaults() error {
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
	if o.Scale == 0 {
		o.Scale = 1
	}
	if o.QPS == 0 {
		o.QPS = 5000
	}
	if o.Workers == 0 {
		o.Workers = 48
	}
	if o.RunTimeout == 0 {
		o.RunTimeout = 5 * time.Minute
	}
	if o.StallTimeout == 0 {
		o.StallTimeout = time.Minute
	}
	if o.Progress == nil {
		o.Progress = io.Discard
	}
	if o.WorkDir == "" {
		d, err := os.MkdirTemp("", "gantry-bench-")
		if err != nil {
			return err
		}
		o.WorkDir = d
	}
	for _, bin := range []string{filepath.Join(o.BinDir, "kube-scheduler"), o.GantryBinary} {
		if _, err := os.Stat(bin); err != nil && !(bin == o.GantryBinary && o.inProcessGantry()) {
			return fmt.Errorf("%s missing: run `make tools` and `go build -o bin/gantry-scheduler ./cmd/scheduler` (or `make bench`)", bin)
		}
	}
	return nil
}

func (o *Options) inProcessGantry() bool { return o.CPUProfile != "" || o.HeapProfile != "" }

func (o *Options) logf(format string, args ...any) {
	fmt.Fprintf(o.Progress, "%s  %s\n", time.Now().Format("15:04:05"), fmt.Sprintf(format, args...))
}

// Run runs each scenario with each of its schedulers and checks the goals. A run that
// fails or times out becomes a result with a Status saying so; the error is only for
// a harness that cannot start at all.
func Run(ctx context.Context, scenarios []Scenario, opts Options) ([]Result, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(opts.WorkDir, 0o755); err != nil {
		return nil, err
	}
	opts.logf("logs in %s", opts.WorkDir)
	var all []Result
	for _, sc := range scenarios {
		s := sc.Scaled(opts.Scale)
		var results []Result
		for _, sched := range s.Schedulers {
			if ctx.Err() != nil {
				break
			}
			r := runOne(ctx, s, sched, opts)
			opts.logf("%s %s: %s, %d/%d bound, %.0f pods/s (first to last bind), %.0f pods/s from start", s.Name, sched.Label(), r.Status, r.Bound, r.Pods, r.PodsPerSecond, r.WallPodsPerSecond)
			results = append(results, r)
		}
		checkGoals(s, opts.Scale, results)
		all = append(all, results...)
	}
	return all, ctx.Err()
}

// runOne benchmarks one scheduler on a fresh control plane.
func runOne(ctx context.Context, s Scenario, sched Scheduler, opts Options) Result {
	r := Result{Scenario: s.Name, Scheduler: sched.Label(), Scale: opts.Scale, Nodes: s.Nodes, Pods: s.Pods, Status: StatusOK}
	if err := benchmark(ctx, s, sched, opts, &r); err != nil {
		r.Status = "error: " + err.Error()
	}
	return r
}

func benchmark(ctx context.Context, s Scenario, sched Scheduler, opts Options, r *Result) (err error) {
	logDir := filepath.Join(opts.WorkDir, s.Name+"-"+sched.Label())
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return err
	}
	opts.logf("%s %s: starting a fresh control plane", s.Name, sched.Label())
	startCtx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	env, err := testenv.Start(startCtx, testenv.Options{ControllerManager: s.DRA})
	cancel()
	if err != nil {
		return err
	}
	defer func() {
		if serr := env.Stop(); serr != nil && err == nil {
			err = fmt.Errorf("stop control plane: %w", serr)
		}
	}()
	cfg := rest.CopyConfig(env.Config)
	cfg.QPS, cfg.Burst = float32(opts.QPS), opts.QPS
	cfg.ContentType = "application/vnd.kubernetes.protobuf"
	cfg.UserAgent = "gantry-bench"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	setupStart := time.Now()
	if err := env.CreateNamespace(ctx, Namespace); err != nil {
		return err
	}
	if s.DRA {
		if err := createDRAObjects(ctx, client, s, opts.Workers); err != nil {
			return err
		}
	}
	if err := createNodes(ctx, client, s, opts.Workers); err != nil {
		return err
	}
	if !s.DRA {
		// With kube-controller-manager (DRA) the node-lifecycle controller may taint
		// kubelet-less nodes at any time; those pods tolerate every taint instead.
		if err := checkNodesUntainted(ctx, client, s.Nodes); err != nil {
			return err
		}
	}
	podsStart := time.Now()
	if err := createPods(ctx, client, s, sched, opts.Workers); err != nil {
		return err
	}
	opts.logf("%s %s: %d nodes, then %d pods created in %.1fs (%.0f pods/s)", s.Name, sched.Label(), s.Nodes, s.Pods,
		time.Since(podsStart).Seconds(), float64(s.Pods)/time.Since(podsStart).Seconds())
	if s.DRA {
		if err := waitClaimsCreated(ctx, client, s.Pods, 3*time.Minute); err != nil {
			return err
		}
	}
	r.SetupSeconds = time.Since(setupStart).Seconds()
	// Let the API server and etcd finish the creation burst (compaction, watch
	// fan-out) before the clock starts.
	time.Sleep(2 * time.Second)

	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rec := newBindRecorder(s.Pods, s.GangSize)
	ready := make(chan error, 1)
	go rec.run(watchCtx, client, ready)
	if err := <-ready; err != nil {
		return err
	}

	opts.logf("%s %s: starting the scheduler on a backlog of %d pods", s.Name, sched.Label(), s.Pods)
	start := time.Now()
	var proc *process
	var mem *memorySampler
	var stopInProcess func() error
	switch {
	case sched == Gantry && opts.inProcessGantry():
		stopInProcess, err = startGantryInProcess(ctx, cfg, opts.QPS, profilePath(opts.CPUProfile, s.Name), profilePath(opts.HeapProfile, s.Name))
	case sched == Gantry:
		proc, err = startGantry(opts.GantryBinary, env.Kubeconfig, logDir, opts.QPS)
	default:
		proc, err = startKubeScheduler(filepath.Join(opts.BinDir, "kube-scheduler"), env.Kubeconfig, logDir, opts.QPS)
	}
	if err != nil {
		return err
	}
	if proc != nil {
		mem = sampleMemory(proc.pid(), 100*time.Millisecond)
		defer proc.stop()
	}
	waitErr := waitBound(ctx, rec, proc, opts.RunTimeout, opts.StallTimeout)
	st := rec.stats(start)
	if mem != nil {
		rss, hwm := mem.finish()
		r.PeakRSSMiB, r.HWMMiB = mib(rss), mib(hwm)
	}
	if stopInProcess != nil {
		if err := stopInProcess(); err != nil {
			opts.logf("%s %s: in-process scheduler: %v", s.Name, sched.Label(), err)
		}
	}
	r.fill(st, s)
	if waitErr != nil {
		r.Status = waitErr.Error()
	}
	if s.DRA {
		allocated, reserved, err := claimsAllocated(ctx, client)
		if err != nil {
			return err
		}
		r.ClaimsAllocated, r.ClaimsReserved = &allocated, &reserved
		if r.Bound > 0 && allocated < r.Bound {
			// Binding a DRA pod without allocating its claim is not scheduling it: the
			// kubelet would refuse it.
			r.Status = fmt.Sprintf("%s: %d pods bound but only %d claims allocated (DRA allocation not supported)", StatusNotSupported, r.Bound, allocated)
		} else if r.Bound == 0 && sched == Gantry {
			r.Status = fmt.Sprintf("%s: bound none of %d DRA pods (%s)", StatusNotSupported, s.Pods, r.Status)
		}
	}
	if proc != nil {
		if err := proc.exited(); err != nil {
			r.Status = err.Error()
		}
	}
	return nil
}

// waitBound waits until every pod is bound, and fails when the scheduler exits, the
// run takes longer than timeout, or no pod is bound for stall.
func waitBound(ctx context.Context, rec *bindRecorder, proc *process, timeout, stall time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var exited <-chan struct{}
	if proc != nil {
		exited = proc.done
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	last, lastChange := -1, time.Now()
	for {
		select {
		case <-rec.done:
			return nil
		case <-exited:
			return proc.exited()
		case <-ctx.Done():
			return fmt.Errorf("%s: bound %d of %d in %s", StatusTimeout, rec.count(), rec.want, timeout)
		case <-tick.C:
		}
		if n := rec.count(); n != last {
			last, lastChange = n, time.Now()
		} else if time.Since(lastChange) > stall {
			return fmt.Errorf("%s: bound %d of %d, none for %s", StatusStalled, n, rec.want, stall)
		}
	}
}

func (r *bindRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.boundAt)
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

func profilePath(path, scenario string) string {
	if path == "" {
		return ""
	}
	dir, file := filepath.Split(path)
	return filepath.Join(dir, scenario+"-"+file)
}
