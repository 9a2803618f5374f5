package bench

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"sort"
	"strings"
	"text/tabwriter"
	"time"
)

// Statuses of a run. Anything else is an error message.
const (
	StatusOK           = "ok"
	StatusTimeout      = "timeout"
	StatusStalled      = "stalled"
	StatusNotSupported = "not supported yet"
)

// Result is one scheduler's run of one scenario.
type Result struct {
	Scenario  string `json:"scenario"`
	Scheduler string `json:"scheduler"`
	// Run counts the repetitions from 1; schedulers alternate within a repetition.
	Run   int     `json:"run"`
	Scale float64 `json:"scale"`
	Nodes int     `json:"nodes"`
	Pods  int     `json:"pods"`
	Bound int     `json:"bound"`
	// PodsPerSecond is Bound over the first-to-last-bind window.
	PodsPerSecond float64 `json:"podsPerSecond"`
	// WallPodsPerSecond is Bound over the time from the scheduler's start to the
	// last bind.
	WallPodsPerSecond float64 `json:"wallPodsPerSecond"`
	FirstBindSeconds  float64 `json:"firstBindSeconds"`
	LastBindSeconds   float64 `json:"lastBindSeconds"`
	// Ratio is gantry's PodsPerSecond over kube-scheduler's in the same scenario, on
	// gantry's row; WallRatio the same for WallPodsPerSecond.
	Ratio     float64 `json:"ratio,omitempty"`
	WallRatio float64 `json:"wallRatio,omitempty"`
	// PeakRSSMiB is the largest VmRSS sampled every 100 ms; HWMMiB the kernel's VmHWM.
	PeakRSSMiB float64     `json:"peakRSSMiB,omitempty"`
	HWMMiB     float64     `json:"hwmMiB,omitempty"`
	Gang       *GangResult `json:"gang,omitempty"`
	// ClaimsAllocated and ClaimsReserved count DRA claims at the end of the run.
	ClaimsAllocated *int `json:"claimsAllocated,omitempty"`
	ClaimsReserved  *int `json:"claimsReserved,omitempty"`
	// SetupSeconds is the time to create the namespace, nodes, pods (and claims).
	SetupSeconds float64 `json:"setupSeconds"`
	// CPU seconds spent from the scheduler's start to the last bind by the
	// scheduler (absent in-process), kube-apiserver and etcd: less sensitive than
	// wall time to other work on the machine.
	SchedulerCPUSeconds float64 `json:"schedulerCPUSeconds,omitempty"`
	APIServerCPUSeconds float64 `json:"apiserverCPUSeconds"`
	EtcdCPUSeconds      float64 `json:"etcdCPUSeconds"`
	// HarnessCPUSeconds is the harness process's CPU over the run: creating the pods
	// and following them, plus the floor's binder in the floor's runs. KwokCPUSeconds
	// is kwok's, where the control plane runs it.
	HarnessCPUSeconds float64 `json:"harnessCPUSeconds,omitempty"`
	KwokCPUSeconds    float64 `json:"kwokCPUSeconds,omitempty"`
	// MachineBusySeconds is the CPU the whole machine spent over the run, every
	// process and the kernel; MachineStealSeconds the CPU time its hypervisor gave
	// to other machines while this one's wanted to run. Steady arrivals' latencies
	// follow how busy the machine was, not only the scheduler.
	MachineBusySeconds  float64 `json:"machineBusySeconds,omitempty"`
	MachineStealSeconds float64 `json:"machineStealSeconds,omitempty"`
	// CPUMillisPerPod is the scheduler's, kube-apiserver's and etcd's CPU time
	// together per bound pod. On a machine shared with other work it is steadier
	// than throughput, and on an otherwise idle one throughput is about the cores
	// over it when the scheduler, API server and etcd saturate them.
	CPUMillisPerPod float64 `json:"cpuMillisPerPod,omitempty"`
	// Events is how many Events the scheduler wrote in the benchmark namespace: API
	// writes beside the bindings.
	Events int `json:"events"`
	// EventReasons counts those Events by reason.
	EventReasons map[string]int `json:"eventReasons,omitempty"`
	// LoadAverage is the machine's one-minute load average when the scheduler started.
	LoadAverage float64 `json:"loadAverage"`
	// SpeedProbeMs is how long one goroutine took, just before the scheduler
	// started, to hash a fixed 16 MiB (speedProbe): on a shared host the same work
	// costs more CPU time at some hours than at others, which steal time does not
	// show, and a pair of runs compares fairly only on probes alike.
	SpeedProbeMs float64 `json:"speedProbeMs,omitempty"`
	Status       string  `json:"status"`
	// OfFloor is PodsPerSecond over the floor's in the same run of the scenario
	// (WallOfFloor the same from the start); for steady arrivals, the create → bound
	// p99 over the floor's.
	OfFloor     float64 `json:"ofFloor,omitempty"`
	WallOfFloor float64 `json:"wallOfFloor,omitempty"`
	// Latency is create → bound under steady arrivals.
	Latency *LatencyResult `json:"latency,omitempty"`
	// Cycles are gantry-scheduler's, from its log; Goroutines its count at the last
	// bind (go_goroutines).
	Cycles     *CycleStats `json:"cycles,omitempty"`
	Goroutines int         `json:"goroutines,omitempty"`
	// ClosedWatches counts, by resource, the watches the API server closed during the
	// run because their reader fell behind (apiserver_terminated_watchers_total):
	// each costs its client a re-watch, and the events of that time arrive late.
	ClosedWatches map[string]int `json:"closedWatches,omitempty"`
	// FloorErrors counts the floor's refused Bindings.
	FloorErrors   int      `json:"floorErrors,omitempty"`
	ProfileErrors []string `json:"profileErrors,omitempty"`
}

// LatencyResult is create → bound of steady arrivals, in seconds, and the arrival
// rate the harness achieved.
type LatencyResult struct {
	P50, P90, P99, Max float64
	ArrivalPerSecond   float64 `json:"arrivalPerSecond"`
}

// GangResult is what the watch saw of gangs: for each gang the time between its
// first and last member's bind (spread), and how many gangs were partly bound
// (0 < bound < size) at the worst event and at the end.
type GangResult struct {
	Gangs             int     `json:"gangs"`
	Complete          int     `json:"complete"`
	MaxSpreadSeconds  float64 `json:"maxSpreadSeconds"`
	P99SpreadSeconds  float64 `json:"p99SpreadSeconds"`
	MaxPartialAtOnce  int     `json:"maxPartialAtOnce"`
	PartialAtTheEnd   int     `json:"partialAtTheEnd"`
	SpreadGoalSeconds float64 `json:"spreadGoalSeconds,omitempty"`
}

// GoalCheck is one goal of a scenario and whether gantry met it.
type GoalCheck struct {
	Goal string `json:"goal"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

func (r *Result) fill(st bindStats, s Scenario) {
	r.Bound = st.Bound
	r.PodsPerSecond = round(st.podsPerSecond(), 1)
	r.WallPodsPerSecond = round(st.wallPodsPerSecond(), 1)
	r.FirstBindSeconds = round(st.FirstBind.Seconds(), 3)
	r.LastBindSeconds = round(st.LastBind.Seconds(), 3)
	if len(st.Latencies) > 0 {
		sec := func(q float64) float64 { return round(percentile(st.Latencies, q).Seconds(), 4) }
		r.Latency = &LatencyResult{P50: sec(0.5), P90: sec(0.9), P99: sec(0.99), Max: sec(1)}
		if st.Arrival > 0 {
			r.Latency.ArrivalPerSecond = round(float64(len(st.Latencies)-1)/st.Arrival.Seconds(), 1)
		}
	}
	if s.hasGangs() {
		r.Gang = &GangResult{
			Gangs: s.Gangs(), Complete: st.GangsComplete,
			MaxSpreadSeconds: round(st.GangMaxSpread.Seconds(), 3), P99SpreadSeconds: round(st.GangP99Spread.Seconds(), 3),
			MaxPartialAtOnce: st.MaxPartialGangs, PartialAtTheEnd: st.PartialGangsEnd,
			SpreadGoalSeconds: s.Goals.MaxGangSpread.Seconds(),
		}
	}
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// Summary is one scenario over all its runs: medians per scheduler, their ratio, and
// gantry-scheduler's goals judged on them (memory and gangs on the worst run).
type Summary struct {
	Scenario string  `json:"scenario"`
	Title    string  `json:"title"`
	Scale    float64 `json:"scale"`
	Runs     int     `json:"runs"`
	// Median pods/s (first to last bind) and from the scheduler's start, of the runs
	// that bound every pod.
	KubePodsPerSecond       float64 `json:"kubeSchedulerPodsPerSecond,omitempty"`
	GantryPodsPerSecond     float64 `json:"gantryPodsPerSecond,omitempty"`
	KubeWallPodsPerSecond   float64 `json:"kubeSchedulerWallPodsPerSecond,omitempty"`
	GantryWallPodsPerSecond float64 `json:"gantryWallPodsPerSecond,omitempty"`
	Ratio                   float64 `json:"ratio,omitempty"`
	WallRatio               float64 `json:"wallRatio,omitempty"`
	GantryMaxHWMMiB         float64 `json:"gantryMaxHWMMiB,omitempty"`
	// Median CPU ms per pod (scheduler + kube-apiserver + etcd) and kube-scheduler's
	// over gantry's: the throughput ratio to expect where those three alone share
	// the cores.
	KubeCPUMillisPerPod   float64     `json:"kubeSchedulerCPUMillisPerPod,omitempty"`
	GantryCPUMillisPerPod float64     `json:"gantryCPUMillisPerPod,omitempty"`
	CPURatio              float64     `json:"cpuRatio,omitempty"`
	Goals                 []GoalCheck `json:"goals,omitempty"`
}

// summarize fills the per-run ratios (gantry's run i against kube-scheduler's run i)
// and returns the scenario's summary.
func summarize(s Scenario, scale float64, results []Result) Summary {
	ofFloor(results)
	sum := Summary{Scenario: s.Name, Title: s.Title, Scale: scale}
	kubeRuns := map[int]*Result{}
	var kube, gantry, kubeWall, gantryWall, kubeCPU, gantryCPU []float64
	gantryRuns, gantryOK := 0, 0
	var worstGang *GangResult
	for i := range results {
		r := &results[i]
		sum.Runs = max(sum.Runs, r.Run)
		ok := r.Status == StatusOK
		switch r.Scheduler {
		case KubeScheduler.Label():
			if ok {
				kubeRuns[r.Run] = r
				kube, kubeWall = append(kube, r.PodsPerSecond), append(kubeWall, r.WallPodsPerSecond)
				if r.CPUMillisPerPod > 0 {
					kubeCPU = append(kubeCPU, r.CPUMillisPerPod)
				}
			}
		case Gantry.Label():
			gantryRuns++
			sum.GantryMaxHWMMiB = max(sum.GantryMaxHWMMiB, r.HWMMiB)
			if r.Gang != nil && (worstGang == nil || r.Gang.MaxSpreadSeconds > worstGang.MaxSpreadSeconds || r.Gang.PartialAtTheEnd > worstGang.PartialAtTheEnd) {
				worstGang = r.Gang
			}
			if ok {
				gantryOK++
				gantry, gantryWall = append(gantry, r.PodsPerSecond), append(gantryWall, r.WallPodsPerSecond)
				if r.CPUMillisPerPod > 0 {
					gantryCPU = append(gantryCPU, r.CPUMillisPerPod)
				}
			}
		}
	}
	for i := range results {
		r := &results[i]
		if k := kubeRuns[r.Run]; r.Scheduler == Gantry.Label() && r.Status == StatusOK && k != nil && k.PodsPerSecond > 0 {
			r.Ratio = round(r.PodsPerSecond/k.PodsPerSecond, 2)
			r.WallRatio = round(r.WallPodsPerSecond/k.WallPodsPerSecond, 2)
		}
	}
	sum.KubePodsPerSecond, sum.KubeWallPodsPerSecond = median(kube), median(kubeWall)
	sum.GantryPodsPerSecond, sum.GantryWallPodsPerSecond = median(gantry), median(gantryWall)
	if sum.KubePodsPerSecond > 0 && sum.GantryPodsPerSecond > 0 {
		sum.Ratio = round(sum.GantryPodsPerSecond/sum.KubePodsPerSecond, 2)
		sum.WallRatio = round(sum.GantryWallPodsPerSecond/sum.KubeWallPodsPerSecond, 2)
	}
	sum.KubeCPUMillisPerPod, sum.GantryCPUMillisPerPod = median(kubeCPU), median(gantryCPU)
	if sum.KubeCPUMillisPerPod > 0 && sum.GantryCPUMillisPerPod > 0 {
		sum.CPURatio = round(sum.KubeCPUMillisPerPod/sum.GantryCPUMillisPerPod, 2)
	}
	if gantryRuns == 0 {
		return sum
	}
	// Every gantry run must have bound every pod for a goal to count as met.
	allOK := gantryOK == gantryRuns
	g := s.Goals
	add := func(goal, got string, met bool) {
		if scale != 1 {
			goal += fmt.Sprintf(" (at scale %g)", scale)
		}
		sum.Goals = append(sum.Goals, GoalCheck{Goal: goal, Got: got, Met: met && allOK})
	}
	if g.MinRatio > 0 && len(kubeRuns) > 0 {
		add(fmt.Sprintf("≥ %g× kube-scheduler", g.MinRatio), fmt.Sprintf("%.2f×", sum.Ratio), sum.Ratio >= g.MinRatio)
	}
	if g.MinPodsPerSecond > 0 {
		add(fmt.Sprintf("≥ %g pods/s", g.MinPodsPerSecond), fmt.Sprintf("%.0f pods/s", sum.GantryPodsPerSecond), sum.GantryPodsPerSecond >= g.MinPodsPerSecond)
	}
	if g.MaxRSSMiB > 0 && sum.GantryMaxHWMMiB > 0 {
		add(fmt.Sprintf("VmHWM < %g MiB", g.MaxRSSMiB), fmt.Sprintf("%.0f MiB", sum.GantryMaxHWMMiB), sum.GantryMaxHWMMiB < g.MaxRSSMiB)
	}
	floorGoals(s, results, add)
	if worstGang != nil {
		add("no gang partly bound at the end", fmt.Sprintf("%d", worstGang.PartialAtTheEnd), worstGang.PartialAtTheEnd == 0 && worstGang.Complete == worstGang.Gangs)
		if g.MaxGangSpread > 0 {
			add(fmt.Sprintf("every gang's first-to-last bind ≤ %s", g.MaxGangSpread), fmt.Sprintf("max %.3fs", worstGang.MaxSpreadSeconds),
				time.Duration(worstGang.MaxSpreadSeconds*float64(time.Second)) <= g.MaxGangSpread)
		}
	}
	return sum
}

func median(v []float64) float64 {
	if len(v) == 0 {
		return 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return round((s[len(s)/2-1]+s[len(s)/2])/2, 1)
}

// WriteTable prints every run as a row of an aligned table, then each scenario's
// medians, ratio and goals.
func WriteTable(w io.Writer, results []Result, summaries []Summary) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\trun\tscheduler\tnodes\tpods\tbound\tpods/s\tpods/s from start\tfirst bind s\tlast bind s\tgantry/kube\tVmHWM MiB\tsched CPU s\tapiserver CPU s\tCPU ms/pod\tload\tstatus\t")
	for _, r := range results {
		ratio, mem, cpu := "", "", ""
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f× (%.2f×)", r.Ratio, r.WallRatio)
		}
		if r.HWMMiB > 0 {
			mem = fmt.Sprintf("%.0f", r.HWMMiB)
		}
		if r.SchedulerCPUSeconds > 0 {
			cpu = fmt.Sprintf("%.1f", r.SchedulerCPUSeconds)
		}
		perPod := ""
		if r.CPUMillisPerPod > 0 {
			perPod = fmt.Sprintf("%.2f", r.CPUMillisPerPod)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%s\t%s\t%s\t%.1f\t%s\t%.1f\t%s\t\n",
			r.Scenario, r.Run, r.Scheduler, r.Nodes, r.Pods, r.Bound, r.PodsPerSecond, r.WallPodsPerSecond,
			r.FirstBindSeconds, r.LastBindSeconds, ratio, mem, cpu, r.APIServerCPUSeconds, perPod, r.LoadAverage, r.Status)
	}
	tw.Flush()
	for _, r := range results {
		if r.Gang != nil {
			fmt.Fprintf(w, "%s run %d %s gangs: %d of %d complete; first-to-last bind per gang max %.3fs, p99 %.3fs; at most %d partly bound at once, %d at the end\n",
				r.Scenario, r.Run, r.Scheduler, r.Gang.Complete, r.Gang.Gangs, r.Gang.MaxSpreadSeconds, r.Gang.P99SpreadSeconds, r.Gang.MaxPartialAtOnce, r.Gang.PartialAtTheEnd)
		}
		if r.ClaimsAllocated != nil {
			fmt.Fprintf(w, "%s run %d %s DRA: %d claims allocated, %d reserved for their pod\n", r.Scenario, r.Run, r.Scheduler, *r.ClaimsAllocated, *r.ClaimsReserved)
		}
	}
	for _, sum := range summaries {
		fmt.Fprintf(w, "\n%s (%s), %d run(s), medians:", sum.Scenario, sum.Title, sum.Runs)
		if sum.KubePodsPerSecond > 0 {
			fmt.Fprintf(w, " kube-scheduler %.0f pods/s (%.0f from start, %.2f CPU ms/pod);", sum.KubePodsPerSecond, sum.KubeWallPodsPerSecond, sum.KubeCPUMillisPerPod)
		}
		if sum.GantryPodsPerSecond > 0 {
			fmt.Fprintf(w, " gantry-scheduler %.0f pods/s (%.0f from start", sum.GantryPodsPerSecond, sum.GantryWallPodsPerSecond)
			if sum.GantryCPUMillisPerPod > 0 {
				fmt.Fprintf(w, ", %.2f CPU ms/pod", sum.GantryCPUMillisPerPod)
			}
			fmt.Fprint(w, ")")
		}
		if sum.Ratio > 0 {
			fmt.Fprintf(w, "; gantry/kube %.2f× (%.2f× from start, %.2f× by CPU per pod)", sum.Ratio, sum.WallRatio, sum.CPURatio)
		}
		fmt.Fprintln(w)
		for _, g := range sum.Goals {
			mark := "MET "
			if !g.Met {
				mark = "MISS"
			}
			fmt.Fprintf(w, "  %s %s: %s\n", mark, g.Goal, g.Got)
		}
	}
}

// Report is a whole benchmark run, as the JSON result file holds it.
type Report struct {
	Started time.Time `json:"started"`
	// Command is the command line, filled by the caller.
	Command  string    `json:"command,omitempty"`
	Machine  Machine   `json:"machine"`
	Gantry   Binary    `json:"gantryScheduler"`
	QPS      int       `json:"clientQPS"`
	Results  []Result  `json:"results"`
	Summary  []Summary `json:"summary"`
	Duration float64   `json:"durationSeconds"`
}

// Machine says where the figures were measured.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"goVersion"`
	Kernel    string `json:"kernel,omitempty"`
}

// Binary identifies the gantry-scheduler build that was measured.
type Binary struct {
	// Path is where the binary was copied from; every run used the copy.
	Path   string    `json:"path"`
	SHA256 string    `json:"sha256,omitempty"`
	Built  time.Time `json:"built"`
	// InProcess is true when gantry-scheduler ran inside the harness (profiling).
	InProcess bool `json:"inProcess,omitempty"`
}

func describeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// snapshotBinary copies the binary at src to dst, so that a concurrent rebuild of
// bin/ cannot change the build half-way through a run, and describes it.
func snapshotBinary(src, dst string) (Binary, error) {
	b := Binary{Path: src}
	st, err := os.Stat(src)
	if err != nil {
		return b, err
	}
	b.Built = st.ModTime().UTC()
	data, err := os.ReadFile(src)
	if err != nil {
		return b, err
	}
	sum := sha256.Sum256(data)
	b.SHA256 = hex.EncodeToString(sum[:])
	return b, os.WriteFile(dst, data, 0o755)
}

// WriteJSON writes the report to path.
func WriteJSON(path string, rep Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
