package bench

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
	// Only, when set, runs just these of each scenario's schedulers.
	Only []Scheduler
	// Repeat runs every scenario this many times (1 when 0), alternating the
	// schedulers, so that other work on the machine weighs on both alike: the
	// even repetitions run them in the reverse order (floor, gantry; gantry, floor;
	// …), so that a machine growing busier or quieter over the runs does not favour
	// the one that always runs first.
	Repeat int
	// Workers is how many goroutines create nodes and pods.
	Workers int
	// RunTimeout bounds one scheduler's run from its start to the last bind.
	RunTimeout time.Duration
	// StallTimeout ends a run early when no pod has been bound for this long, counted
	// from gantry-scheduler's readiness (its informers synced), and for the others
	// from their start.
	StallTimeout time.Duration
	// WorkDir receives one folder of scheduler logs per run.
	WorkDir string
	// CPUProfile and HeapProfile, when set, run gantry-scheduler in this process
	// (pkg/kube.Run) instead of its binary and write pprof profiles of the
	// scheduling phase, with the file name prefixed by the scenario and run ("a-1-cpu.pprof"). Memory
	// figures are then not reported for gantry.
	CPUProfile, HeapProfile string
	// ProfileDir, when set, runs gantry-scheduler's binary with --profiling-address
	// and saves into it, for each run, a CPU profile of its first ProfileSeconds and
	// its heap, block, mutex and goroutine profiles at the last bind
	// (SCENARIO-RUN-cpu.pprof, …).
	ProfileDir     string
	ProfileSeconds time.Duration
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
	if o.Repeat == 0 {
		o.Repeat = 1
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
	if o.ProfileSeconds == 0 {
		o.ProfileSeconds = 10 * time.Second
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
// fails or times out becomes a result with a Status saying so; the error is for a
// harness that cannot start or was interrupted (the report then holds what ran).
func Run(ctx context.Context, scenarios []Scenario, opts Options) (*Report, error) {
	if err := opts.defaults(); err != nil {
		return nil, err
	}
	for _, d := range []string{opts.WorkDir, opts.ProfileDir} {
		if err := os.MkdirAll(d, 0o755); d != "" && err != nil {
			return nil, err
		}
	}
	rep := &Report{Started: time.Now().UTC(), Machine: describeMachine(), QPS: opts.QPS}
	if opts.inProcessGantry() {
		rep.Gantry = Binary{InProcess: true}
	} else {
		copyPath := filepath.Join(opts.WorkDir, "gantry-scheduler")
		bin, err := snapshotBinary(opts.GantryBinary, copyPath)
		if err != nil {
			return nil, fmt.Errorf("copy %s: %w", opts.GantryBinary, err)
		}
		rep.Gantry, opts.GantryBinary = bin, copyPath
	}
	opts.logf("logs in %s; gantry-scheduler %s (sha256 %.12s, built %s)", opts.WorkDir, rep.Gantry.Path, rep.Gantry.SHA256, rep.Gantry.Built.Format(time.RFC3339))
	for _, sc := range scenarios {
		s := sc.Scaled(opts.Scale)
		var results []Result
		for run := 1; run <= opts.Repeat; run++ {
			for _, sched := range s.order(opts.Only, run) {
				if ctx.Err() != nil {
					break
				}
				r := runOne(ctx, s, sched, run, opts)
				opts.logf("%s run %d %s: %s, %d/%d bound, %.0f pods/s (first to last bind), %.0f pods/s from start, scheduler CPU %.1fs, load %.1f",
					s.Name, run, sched.Label(), r.Status, r.Bound, r.Pods, r.PodsPerSecond, r.WallPodsPerSecond, r.SchedulerCPUSeconds, r.LoadAverage)
				results = append(results, r)
			}
		}
		rep.Summary = append(rep.Summary, summarize(s, opts.Scale, results))
		rep.Results = append(rep.Results, results...)
	}
	rep.Duration = round(time.Since(rep.Started).Seconds(), 1)
	return rep, ctx.Err()
}

// runOne benchmarks one scheduler on a fresh control plane.
func runOne(ctx context.Context, s Scenario, sched Scheduler, run int, opts Options) Result {
	r := Result{Scenario: s.Name, Scheduler: sched.Label(), Run: run, Scale: opts.Scale, Nodes: s.Nodes, Pods: s.Pods, Status: StatusOK}
	if err := benchmark(ctx, s, sched, opts, &r); err != nil {
		r.Status = "error: " + err.Error()
	}
	return r
}

func benchmark(ctx context.Context, s Scenario, sched Scheduler, opts Options, r *Result) (err error) {
	logDir := filepath.Join(opts.WorkDir, fmt.Sprintf("%s-%d-%s", s.Name, r.Run, sched.Label()))
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
	// Uncompressed, as kube-scheduler and gantry-scheduler read: the API server gzips
	// each event of a watch-list stream for a client that accepts gzip, and the
	// floor and the bind recorder read every pod event. A floor that paid for gzip
	// would be a floor set too low.
	cfg.DisableCompression = true
	cfg.UserAgent = "gantry-bench"
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}

	setupStart := time.Now()
	if err := populate(ctx, env, cfg, client, s, sched, opts); err != nil {
		return err
	}
	r.SetupSeconds = round(time.Since(setupStart).Seconds(), 1)
	// Let the API server and etcd finish the creation burst (compaction, watch
	// fan-out) before the clock starts.
	time.Sleep(2 * time.Second)
	return measure(ctx, env, cfg, client, s, sched, opts, logDir, r)
}

// measure starts the scheduler, on the backlog or before the arrivals, and fills r
// with what it did.
func measure(ctx context.Context, env *testenv.Env, cfg *rest.Config, client kubernetes.Interface, s Scenario, sched Scheduler, opts Options, logDir string, r *Result) error {
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	rec := newBindRecorder(s.Pods, s.GangSize)
	ready := make(chan error, 1)
	go rec.run(watchCtx, client, ready)
	if err := <-ready; err != nil {
		return err
	}

	if s.Rate > 0 {
		opts.logf("%s %s: starting the scheduler before %d pods/s arrive for %s", s.Name, sched.Label(), s.Rate, s.Duration)
	} else {
		opts.logf("%s %s: starting the scheduler on a backlog of %d pods", s.Name, sched.Label(), s.Pods)
	}
	r.LoadAverage = loadAverage()
	r.SpeedProbeMs = speedProbe()
	components := env.PIDs()
	// The harness's own CPU: the pods' creation and the recorder's informer in every
	// run, and the floor's binder in the floor's. With the API server, etcd and the
	// scheduler it is the machine's CPU, which the steady runs' latencies depend on.
	metered := map[string]int{"kube-apiserver": components["kube-apiserver"], "etcd": components["etcd"], "harness": os.Getpid()}
	if pid, ok := components["kwok"]; ok {
		metered["kwok"] = pid
	}
	cpu := meterCPU(metered)
	start := time.Now()
	sc, err := startScheduler(ctx, env, cfg, s, sched, opts, logDir, r.Run)
	if err != nil {
		return err
	}
	defer sc.stop()
	var arrivalErr chan error
	if s.Rate > 0 {
		if err := warmUp(ctx, client, s, sched, 2*time.Minute); err != nil {
			return err
		}
		arrivalErr = make(chan error, 1)
		go func() { arrivalErr <- arrive(ctx, client, s, sched, rec, opts.Workers) }()
	}

	waitErr := waitBound(ctx, rec, sc.proc, opts.RunTimeout, opts.StallTimeout, sc.readyCheck(ctx))
	if arrivalErr != nil && waitErr == nil {
		waitErr = <-arrivalErr
	}
	st := rec.stats(start)
	if err := rec.writeTimeline(filepath.Join(logDir, "timeline.tsv")); err != nil {
		opts.logf("%s %s: timeline: %v", s.Name, sched.Label(), err)
	}
	r.fill(st, s)
	sc.finish(ctx, r, st.Bound, cpu.used())
	if sc.stopInProcess != nil {
		if err := sc.stopInProcess(); err != nil {
			opts.logf("%s %s: in-process scheduler: %v", s.Name, sched.Label(), err)
		}
	}
	var exitErr error // the scheduler ended on its own, before the harness stopped it
	if sc.proc != nil {
		exitErr = sc.proc.exited()
	}
	sc.stop()
	sc.cycles(r)
	switch {
	case waitErr != nil:
		r.Status = waitErr.Error()
	case exitErr != nil:
		r.Status = exitErr.Error()
	}
	return inspect(ctx, client, s, sched, logDir, r)
}

// populate creates the namespace, nodes, the backlog of pods and, for DRA, the
// device class, slices and claims, then warms the API server's watch caches.
func populate(ctx context.Context, env *testenv.Env, cfg *rest.Config, client kubernetes.Interface, s Scenario, sched Scheduler, opts Options) error {
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
	if s.Rate > 0 {
		// Steady arrivals: the pods come once the scheduler runs (measure).
		return warmCRDWatchCaches(ctx, cfg)
	}
	podsStart := time.Now()
	if err := createPods(ctx, client, s, sched, opts.Workers); err != nil {
		return err
	}
	took := time.Since(podsStart).Seconds()
	opts.logf("%s %s: %d nodes, then %d pods created in %.1fs (%.0f pods/s)", s.Name, sched.Label(), s.Nodes, s.Pods, took, float64(s.Pods)/took)
	if s.DRA {
		if err := waitClaimsCreated(ctx, client, s.Pods, 3*time.Minute); err != nil {
			return err
		}
	}
	return warmCRDWatchCaches(ctx, cfg)
}

// inspect reads what the scheduler left behind: the Events it wrote (counted, and
// listed in LOGDIR/events.txt) and whether its placements are valid.
func inspect(ctx context.Context, client kubernetes.Interface, s Scenario, sched Scheduler, logDir string, r *Result) error {
	evs, err := client.CoreV1().Events(Namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list events: %w", err)
	}
	if r.ClosedWatches, err = closedWatches(ctx, client, filepath.Join(logDir, "apiserver-metrics.txt")); err != nil {
		return err
	}
	r.Events = len(evs.Items)
	r.EventReasons = map[string]int{}
	var lines strings.Builder
	for _, ev := range evs.Items {
		r.EventReasons[ev.Reason] += int(max(ev.Count, 1))
		fmt.Fprintf(&lines, "%s %s %s: %s\n", ev.LastTimestamp.Format(time.RFC3339), ev.InvolvedObject.Name, ev.Reason, ev.Message)
	}
	if err := os.WriteFile(filepath.Join(logDir, "events.txt"), []byte(lines.String()), 0o644); err != nil {
		return err
	}
	check, err := validatePlacement(ctx, client, s)
	if err != nil {
		return err
	}
	if len(check.Violations) > 0 {
		r.Status = "invalid placement: " + strings.Join(check.Violations, "; ")
	}
	if !s.DRA {
		return nil
	}
	r.ClaimsAllocated, r.ClaimsReserved = &check.ClaimsAllocated, &check.ClaimsReserved
	switch {
	case len(check.Violations) > 0:
	case r.Bound > 0 && check.ClaimsAllocated < r.Bound:
		// Binding a DRA pod without allocating its claim is not scheduling it: the
		// kubelet would refuse it.
		r.Status = fmt.Sprintf("%s: %d bound, %d claims allocated", StatusNotSupported, r.Bound, check.ClaimsAllocated)
	case r.Bound == 0 && sched == Gantry && (r.Status == StatusStalled || r.Status == StatusTimeout):
		// A scheduler that exited or failed keeps its own error: it is no verdict on
		// DRA support.
		r.Status = fmt.Sprintf("%s: bound none of %d DRA pods (%s)", StatusNotSupported, s.Pods, r.Status)
	}
	return nil
}

// closedWatches reads from the API server's /metrics how many watches it closed
// for falling behind, by resource, and keeps the whole page at keep (the requests
// each run made, by verb and resource, and the API server's own runtime figures).
// The control plane is the run's own, so the counts are the run's.
func closedWatches(ctx context.Context, client kubernetes.Interface, keep string) (map[string]int, error) {
	body, err := client.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		return nil, fmt.Errorf("read the API server's metrics: %w", err)
	}
	if err := os.WriteFile(keep, body, 0o644); err != nil {
		return nil, err
	}
	return parseClosedWatches(string(body))
}

// parseClosedWatches sums apiserver_terminated_watchers_total by its resource label,
// leaving out resources with none.
func parseClosedWatches(metrics string) (map[string]int, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(metrics))
	if err != nil {
		return nil, fmt.Errorf("parse the API server's metrics: %w", err)
	}
	var out map[string]int
	for _, m := range fams["apiserver_terminated_watchers_total"].GetMetric() {
		n := int(m.GetCounter().GetValue())
		if n == 0 {
			continue
		}
		if out == nil {
			out = map[string]int{}
		}
		for _, l := range m.GetLabel() {
			if l.GetName() == "resource" {
				out[l.GetValue()] += n
			}
		}
	}
	return out, nil
}

// waitBound waits until every pod is bound, and fails when the scheduler exits, the
// run takes longer than timeout, or no pod is bound for stall once the scheduler is
// ready (ready nil: from the start). A scheduler's first sync of a large backlog
// (100,000 pods) takes minutes on a loaded machine and binds nothing; only the run
// timeout bounds it.
func waitBound(parent context.Context, rec *bindRecorder, proc *process, timeout, stall time.Duration, ready func() bool) error {
	ctx, cancel := context.WithTimeout(parent, timeout)
	defer cancel()
	var exited <-chan struct{}
	if proc != nil {
		exited = proc.done
	}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	clock := newStallClock(stall, ready, time.Now())
	for {
		select {
		case <-rec.done:
			return nil
		case <-exited:
			return proc.exited()
		case <-ctx.Done():
			if parent.Err() != nil {
				return fmt.Errorf("interrupted: bound %d of %d: %w", rec.count(), rec.want, context.Cause(parent))
			}
			return fmt.Errorf("%s: bound %d of %d in %s", StatusTimeout, rec.count(), rec.want, timeout)
		case <-tick.C:
		}
		n := rec.count()
		if clock.stalled(time.Now(), n) {
			return fmt.Errorf("%s: bound %d of %d, none for %s", StatusStalled, n, rec.want, stall)
		}
	}
}

// stallClock tells a run that binds nothing for too long, counting from the moment
// the scheduler is ready (or binds its first pod, whichever comes first).
type stallClock struct {
	limit time.Duration
	ready func() bool
	// started is set once the scheduler is ready or has bound a pod.
	started    bool
	last       int
	lastChange time.Time
}

func newStallClock(limit time.Duration, ready func() bool, now time.Time) *stallClock {
	c := &stallClock{limit: limit, ready: ready, lastChange: now}
	if ready == nil {
		c.started = true
	}
	return c
}

// stalled reports, given the pods bound by now, whether none was bound for the
// limit since the scheduler became ready.
func (c *stallClock) stalled(now time.Time, bound int) bool {
	if !c.started {
		if bound <= 0 && !c.ready() {
			return false
		}
		c.started, c.last, c.lastChange = true, bound, now
		return false
	}
	if bound != c.last {
		c.last, c.lastChange = bound, now
		return false
	}
	return now.Sub(c.lastChange) > c.limit
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
