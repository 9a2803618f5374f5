package bench

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"
	"time"
)

// ScaleScenarios are issue 21's workloads (`make bench-scale`, `-scenarios scale`):
// drains, gangs and steady arrivals, each beside the floor (floor.go) in the same
// run, and beside kube-scheduler where it applies. They are not among "all", so that
// `make bench` keeps its time.
var ScaleScenarios = append([]Scenario{
	{
		Name: "drain-5k", Title: "drain: 5,000 pending one-GPU pods on 1,000 nodes × 8 GPUs",
		Nodes: 1000, GPUsPerNode: 8, Pods: 5000,
		Schedulers: []Scheduler{Floor, Gantry, KubeScheduler},
		Goals:      Goals{MinOfFloor: 0.85, MaxCycleP99: 100 * time.Millisecond},
	},
	{
		Name: "drain-20k", Title: "drain: 20,000 pending one-GPU pods on 5,000 nodes × 8 GPUs",
		Nodes: 5000, GPUsPerNode: 8, Pods: 20000,
		Schedulers: []Scheduler{Floor, Gantry, KubeScheduler},
		Goals:      Goals{MinOfFloor: 0.85, MaxCycleP99: 100 * time.Millisecond},
	},
	{
		// kube-scheduler takes about 20 minutes here: it runs only with -schedulers
		// naming it (-schedulers kube, or floor,gantry,kube).
		Name: "drain-100k", Title: "drain: 100,000 pending one-GPU pods on 5,000 nodes × 20 GPUs",
		Nodes: 5000, GPUsPerNode: 20, Pods: 100000,
		Schedulers: []Scheduler{Floor, Gantry},
		OnRequest:  []Scheduler{KubeScheduler},
		Goals:      Goals{MinOfFloor: 0.85, MaxRSSMiB: 1024, MaxCycleP99: 100 * time.Millisecond},
	},
	{
		Name: "gang-1k", Title: "gangs: 625 gangs × 8 one-GPU pods on 1,000 nodes × 8 GPUs (scenario c)",
		Nodes: 1000, GPUsPerNode: 8, Pods: 5000, GangSize: 8,
		Schedulers: []Scheduler{Floor, Gantry},
		Goals:      Goals{MinOfFloor: 0.8, MaxCycleP99: 100 * time.Millisecond},
	},
	{
		Name: "gang-5k", Title: "gangs: 20,000 one-GPU pods in gangs of 2 to 32 on 5,000 nodes × 8 GPUs",
		Nodes: 5000, GPUsPerNode: 8, Pods: 20000, GangSizes: []int{2, 4, 6, 8, 12, 16, 32},
		Schedulers: []Scheduler{Floor, Gantry},
		Goals:      Goals{MinOfFloor: 0.8, MaxCycleP99: 100 * time.Millisecond},
	},
}, steadyScenarios()...)

// steadyScenarios are 100, 400 and 800 pods/s for 60 s on 2,000 and 5,000 nodes,
// with GPUs enough per node for every pod.
func steadyScenarios() []Scenario {
	var out []Scenario
	for _, nodes := range []int{2000, 5000} {
		for _, rate := range []int{100, 400, 800} {
			d := time.Minute
			pods := rate * int(d/time.Second)
			gpus := max(8, (pods+nodes-1)/nodes+1)
			out = append(out, Scenario{
				Name:  fmt.Sprintf("steady-%d-%dk", rate, nodes/1000),
				Title: fmt.Sprintf("steady: %d one-GPU pods/s for %s on %d nodes × %d GPUs", rate, d, nodes, gpus),
				Nodes: nodes, GPUsPerNode: gpus, Pods: pods, Rate: rate, Duration: d,
				Schedulers: []Scheduler{Floor, Gantry, KubeScheduler},
				Goals:      Goals{MaxP99OfFloor: 1.25, MaxCycleP99: 100 * time.Millisecond},
			})
		}
	}
	return out
}

// ofFloor fills each run's fractions of the floor of the same repetition: pods/s for
// drains, create → bound p99 for steady arrivals.
func ofFloor(results []Result) {
	floors := map[int]*Result{}
	for i := range results {
		if r := &results[i]; r.Scheduler == Floor.Label() && r.Status == StatusOK {
			floors[r.Run] = r
		}
	}
	for i := range results {
		r := &results[i]
		f := floors[r.Run]
		if f == nil || r.Scheduler == Floor.Label() || r.Status != StatusOK {
			continue
		}
		switch {
		case r.Latency != nil && f.Latency != nil && f.Latency.P99 > 0:
			r.OfFloor = round(r.Latency.P99/f.Latency.P99, 2)
		case r.Latency == nil && f.PodsPerSecond > 0:
			r.OfFloor = round(r.PodsPerSecond/f.PodsPerSecond, 2)
			r.WallOfFloor = round(r.WallPodsPerSecond/f.WallPodsPerSecond, 2)
		}
	}
}

// floorGoals judges gantry's medians of its fractions of the floor and its cycles.
func floorGoals(s Scenario, results []Result, add func(goal, got string, met bool)) {
	var frac, cycleP99 []float64
	for _, r := range results {
		if r.Scheduler != Gantry.Label() {
			continue
		}
		if r.OfFloor > 0 {
			frac = append(frac, r.OfFloor)
		}
		if r.Cycles != nil {
			cycleP99 = append(cycleP99, r.Cycles.P99Ms)
		}
	}
	g := s.Goals
	if g.MinOfFloor > 0 {
		m := median(frac)
		add(fmt.Sprintf("≥ %.0f%% of the floor's pods/s (median of runs)", g.MinOfFloor*100), fmt.Sprintf("%.2f", m), m >= g.MinOfFloor)
	}
	if g.MaxP99OfFloor > 0 {
		m := median(frac)
		add(fmt.Sprintf("create → bound p99 ≤ %g× the floor's", g.MaxP99OfFloor), fmt.Sprintf("%.2f×", m), m > 0 && m <= g.MaxP99OfFloor)
	}
	if g.MaxCycleP99 > 0 && len(cycleP99) > 0 {
		worst := 0.0
		for _, v := range cycleP99 {
			worst = max(worst, v)
		}
		add(fmt.Sprintf("cycle p99 < %s in every run", g.MaxCycleP99), fmt.Sprintf("worst %.1f ms", worst), worst < float64(g.MaxCycleP99.Milliseconds()))
	}
}

// WriteScaleTable prints, for runs with a floor or cycles, the figures of issue 21:
// fractions of the floor, latencies, cycles, binds in flight, goroutines, memory.
func WriteScaleTable(w io.Writer, results []Result) {
	show := false
	for _, r := range results {
		show = show || r.Scheduler == Floor.Label() || r.Cycles != nil
	}
	if !show {
		return
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\trun\tscheduler\tpods/s\tof floor\tfrom start\tof floor\tp50 s\tp90 s\tp99 s\tmax s\tp99 of floor\tarrived/s\tcycles\tcycle p50/p99/max ms\tpods/cycle (max)\tin flight at cycle start (dry)\tgoroutines\tVmHWM MiB\tload\tspeed probe ms\tmachine CPU s (stolen)\twatches closed\t")
	for _, r := range results {
		lat := "\t\t\t\t\t\t"
		if l := r.Latency; l != nil {
			lat = fmt.Sprintf("%.3f\t%.3f\t%.3f\t%.3f\t%s\t%.0f\t", l.P50, l.P90, l.P99, l.Max, blankZero(r.OfFloor, "%.2f×"), l.ArrivalPerSecond)
		}
		thr := fmt.Sprintf("%.0f\t%s\t%.0f\t%s\t", r.PodsPerSecond, blankZero(r.OfFloor, "%.2f"), r.WallPodsPerSecond, blankZero(r.WallOfFloor, "%.2f"))
		if r.Latency != nil {
			thr = "\t\t\t\t"
		}
		cyc := "\t\t\t\t"
		if c := r.Cycles; c != nil {
			cyc = fmt.Sprintf("%d\t%.1f/%.1f/%.1f\t%.1f (%d)\t%.1f (%.0f%%)\t", c.Cycles, c.P50Ms, c.P99Ms, c.MaxMs, c.PodsPerCycle, c.MaxPodsPerCycle, c.InFlightMean, c.DryStartShare*100)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s%s%s%s\t%s\t%.1f\t%s\t%.1f (%.1f)\t%s\t\n", r.Scenario, r.Run, r.Scheduler, thr, lat, cyc,
			blankZero(float64(r.Goroutines), "%.0f"), blankZero(r.HWMMiB, "%.0f"), r.LoadAverage, blankZero(r.SpeedProbeMs, "%.0f"), r.MachineBusySeconds, r.MachineStealSeconds,
			closedList(r.ClosedWatches))
	}
	tw.Flush()
}

// closedList is "pods 3, nodes 1", by resource name.
func closedList(closed map[string]int) string {
	var out []string
	for _, res := range slices.Sorted(maps.Keys(closed)) {
		out = append(out, fmt.Sprintf("%s %d", res, closed[res]))
	}
	return strings.Join(out, ", ")
}

func blankZero(v float64, format string) string {
	if v == 0 {
		return ""
	}
	return fmt.Sprintf(format, v)
}
