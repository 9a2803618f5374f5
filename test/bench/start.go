package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/test/testenv"
)

// running is one scheduler under test: a child process (gantry-scheduler or
// kube-scheduler), gantry in this process (profiling), or the floor's binder.
type running struct {
	sched         Scheduler
	proc          *process
	stopInProcess func() error
	stopFloor     func() int64
	mem           *memorySampler
	// metricsPort, probePort and profilePort are gantry-scheduler's /metrics,
	// /readyz and pprof (0: none).
	metricsPort, probePort, profilePort int
	// tracePath is gantry-scheduler's --cycle-trace file.
	tracePath string
	// profilePrefix is where profiles go (DIR/SCENARIO-RUN-); cpuDone ends with the
	// CPU profile's fetch.
	profilePrefix string
	cpuDone       chan error
}

// startScheduler starts sched on the scenario's cluster.
func startScheduler(ctx context.Context, env *testenv.Env, cfg *rest.Config, s Scenario, sched Scheduler, opts Options, logDir string, run int) (*running, error) {
	sc := &running{sched: sched}
	var err error
	switch {
	case sched == Floor:
		fc := rest.CopyConfig(cfg)
		fc.UserAgent = string(Floor)
		client, cerr := kubernetes.NewForConfig(fc)
		if cerr != nil {
			return nil, cerr
		}
		sc.stopFloor, err = startFloor(ctx, client, s.Nodes, s.GPUsPerNode)
	case sched == Gantry && opts.inProcessGantry():
		prefix := fmt.Sprintf("%s-%d", s.Name, run)
		sc.stopInProcess, err = startGantryInProcess(ctx, cfg, opts.QPS, profilePath(opts.CPUProfile, prefix), profilePath(opts.HeapProfile, prefix))
	case sched == Gantry:
		// At its production log level, with one trace line per cycle (cyclelog.go):
		// the --v=4 Cycle log line costs several times as much.
		sc.tracePath = filepath.Join(logDir, "cycles.tsv")
		extra := []string{"--cycle-trace=" + sc.tracePath}
		if opts.ProfileDir != "" {
			if sc.profilePort, err = testenv.FreePort(); err != nil {
				return nil, err
			}
			extra = append(extra, "--profiling-address=127.0.0.1:"+strconv.Itoa(sc.profilePort))
			sc.profilePrefix = filepath.Join(opts.ProfileDir, fmt.Sprintf("%s-%d-", s.Name, run))
		}
		sc.proc, sc.metricsPort, sc.probePort, err = startGantry(opts.GantryBinary, env.Kubeconfig, logDir, opts.QPS, extra...)
	default:
		sc.proc, err = startKubeScheduler(filepath.Join(opts.BinDir, "kube-scheduler"), env.Kubeconfig, logDir, opts.QPS)
	}
	if err != nil {
		return nil, err
	}
	if sc.proc != nil {
		sc.mem = sampleMemory(sc.proc.pid(), 100*time.Millisecond)
	}
	if sc.profilePort != 0 {
		sc.cpuDone = make(chan error, 1)
		go func() {
			// The profile's server waits until it answers; give it a moment to listen.
			time.Sleep(200 * time.Millisecond)
			sc.cpuDone <- sc.fetchProfile(ctx, fmt.Sprintf("profile?seconds=%d", int(opts.ProfileSeconds/time.Second)), "cpu")
		}()
	}
	return sc, nil
}

// finish records, after the last bind and before the scheduler stops, its CPU and
// memory, goroutines, cycles and profiles; and the API server's and etcd's CPU.
func (sc *running) finish(ctx context.Context, r *Result, bound int, used map[string]float64) {
	r.APIServerCPUSeconds, r.EtcdCPUSeconds = round(used["kube-apiserver"], 1), round(used["etcd"], 1)
	r.HarnessCPUSeconds, r.KwokCPUSeconds = round(used["harness"], 1), round(used["kwok"], 1)
	r.MachineBusySeconds, r.MachineStealSeconds = round(used[machineBusy], 1), round(used[machineSteal], 1)
	if sc.stopFloor != nil {
		r.FloorErrors = int(sc.stopFloor())
		sc.stopFloor = nil
	}
	if sc.proc == nil {
		return
	}
	if secs, err := cpuSeconds(sc.proc.pid()); err == nil {
		r.SchedulerCPUSeconds = round(secs, 2)
		if bound > 0 {
			r.CPUMillisPerPod = round((secs+used["kube-apiserver"]+used["etcd"])*1000/float64(bound), 2)
		}
	}
	rss, hwm := sc.mem.finish()
	r.PeakRSSMiB, r.HWMMiB = round(mib(rss), 1), round(mib(hwm), 1)
	if sc.metricsPort != 0 {
		if n, err := scrapeGauge(ctx, sc.metricsPort, "go_goroutines"); err == nil {
			r.Goroutines = int(n)
		}
	}
	if sc.profilePort != 0 {
		for _, name := range []string{"heap", "block", "mutex", "goroutine"} {
			if err := sc.fetchProfile(ctx, name, name); err != nil {
				r.ProfileErrors = append(r.ProfileErrors, err.Error())
			}
		}
		if err := <-sc.cpuDone; err != nil {
			r.ProfileErrors = append(r.ProfileErrors, err.Error())
		}
	}
}

// cycles reads the scheduler's cycle trace into r once the scheduler has stopped
// (and flushed it).
func (sc *running) cycles(r *Result) {
	if sc.tracePath == "" {
		return
	}
	if st, err := parseCycleTrace(sc.tracePath); err == nil {
		r.Cycles = st
	}
}

// readyCheck returns whether gantry-scheduler answers /readyz (leading, informers
// synced), or nil for a scheduler the harness cannot ask, whose stall clock runs
// from its start. Once ready it is not asked again.
func (sc *running) readyCheck(ctx context.Context) func() bool {
	if sc.probePort == 0 {
		return nil
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", sc.probePort)
	return func() bool {
		rctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		body, err := httpGet(rctx, url)
		if err != nil {
			return false
		}
		body.Close()
		return true
	}
}

func (sc *running) stop() {
	if sc.stopFloor != nil {
		sc.stopFloor()
	}
	if sc.proc != nil {
		sc.proc.stop()
	}
}

// fetchProfile saves gantry-scheduler's /debug/pprof/PATH as PREFIX-NAME.pprof.
func (sc *running) fetchProfile(ctx context.Context, path, name string) error {
	body, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/debug/pprof/%s", sc.profilePort, path))
	if err != nil {
		return fmt.Errorf("%s profile: %w", name, err)
	}
	defer body.Close()
	f, err := os.Create(sc.profilePrefix + name + ".pprof")
	if err != nil {
		return err
	}
	_, err = io.Copy(f, body)
	return errors.Join(err, f.Close())
}

// scrapeGauge reads one unlabelled series from a /metrics page.
func scrapeGauge(ctx context.Context, port int, name string) (float64, error) {
	body, err := httpGet(ctx, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	if err != nil {
		return 0, err
	}
	defer body.Close()
	sc := bufio.NewScanner(body)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s not on /metrics", name)
}

func httpGet(ctx context.Context, url string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		return nil, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return resp.Body, nil
}
