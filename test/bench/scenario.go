package bench

import (
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
)

// Scheduler names a scheduler under test. The value is also the schedulerName its
// pods carry.
type Scheduler string

const (
	// Gantry is gantry-scheduler, run from bin/gantry-scheduler (or in-process when
	// profiling).
	Gantry Scheduler = "gantry-scheduler"
	// KubeScheduler is kube-scheduler v1.37.2 from bin/kube-scheduler with its
	// default profile.
	KubeScheduler Scheduler = "default-scheduler"
	// Floor is the API server's floor (floor.go): a bare binder in the harness that
	// binds each pending pod to a node with a free slot, FloorInFlight binds at once,
	// no scheduling at all. Every other figure is read as a fraction of it.
	Floor Scheduler = "floor-binder"
)

// Label is how tables and JSON name a scheduler.
func (s Scheduler) Label() string {
	switch s {
	case KubeScheduler:
		return "kube-scheduler"
	case Floor:
		return "floor"
	}
	return string(s)
}

// ParseSchedulers reads a comma-separated list of "gantry" and "kube" (or the
// schedulers' full names).
func ParseSchedulers(list string) ([]Scheduler, error) {
	var out []Scheduler
	for _, n := range strings.Split(list, ",") {
		switch strings.TrimSpace(n) {
		case "gantry", "gantry-scheduler":
			out = append(out, Gantry)
		case "kube", "kube-scheduler", "default-scheduler":
			out = append(out, KubeScheduler)
		case "floor", "floor-binder":
			out = append(out, Floor)
		default:
			return nil, fmt.Errorf("unknown scheduler %q: choose gantry, kube or floor", n)
		}
	}
	return out, nil
}

// Scenario is one declarative workload.
type Scenario struct {
	// Name selects the scenario on the command line ("a", "b", …).
	Name string
	// Title is one line for the report.
	Title       string
	Nodes       int
	GPUsPerNode int
	// Pods is the number of pending pods, each asking for one GPU.
	Pods int
	// GangSize, when above 0, groups pods into gangs of this many through the
	// gantry.dev/pod-group and gantry.dev/min-member annotations.
	GangSize int
	// GangSizes, when set, replaces GangSize: gangs take these sizes in turn, so
	// that Pods should be a multiple of their sum (the last gang is cut short
	// otherwise and never complete).
	GangSizes []int
	// Rate, when above 0, makes the scenario one of steady arrivals: the scheduler
	// starts on an empty cluster and Rate pods a second are created for Duration;
	// Pods is then Rate × Duration. Otherwise the whole backlog is created first (a
	// drain).
	Rate     int
	Duration time.Duration
	// DRA publishes the GPUs as ResourceSlices of driver gpu.gantry.dev and has each
	// pod claim one through a ResourceClaimTemplate (kube-controller-manager creates
	// the claims); otherwise nodes advertise nvidia.com/gpu and pods request it.
	DRA bool
	// Selector, with DRA, is a CEL expression the claim template's request carries,
	// which sends Gantry's pods through the structured allocator.
	Selector string
	// Schedulers run in this order, each against its own fresh control plane.
	Schedulers []Scheduler
	// OnRequest run after Schedulers, only when -schedulers names them.
	OnRequest []Scheduler
	Goals     Goals
}

// runs returns the schedulers to run: Schedulers, then OnRequest, those of them
// in only when only is set.
func (s Scenario) runs(only []Scheduler) []Scheduler {
	var out []Scheduler
	for _, sched := range s.Schedulers {
		if len(only) == 0 || slices.Contains(only, sched) {
			out = append(out, sched)
		}
	}
	for _, sched := range s.OnRequest {
		if slices.Contains(only, sched) {
			out = append(out, sched)
		}
	}
	return out
}

// order is runs for repetition run (from 1): reversed on even repetitions.
func (s Scenario) order(only []Scheduler, run int) []Scheduler {
	out := s.runs(only)
	if run%2 == 0 {
		slices.Reverse(out)
	}
	return out
}

// Goals are what gantry-scheduler must reach in a scenario; zero means no goal.
type Goals struct {
	// MinRatio is gantry's pods/s over kube-scheduler's.
	MinRatio float64
	// MinPodsPerSecond is gantry's absolute throughput.
	MinPodsPerSecond float64
	// MaxRSSMiB bounds gantry's peak resident memory (VmHWM).
	MaxRSSMiB float64
	// MaxGangSpread bounds, for every gang, the time between its first and its last
	// member's bind as the watch sees them. Gantry binds a gang from one cycle's plan,
	// all members at once, so the spread is API latency; a gang finished by a later
	// cycle shows a spread of at least a cycle.
	MaxGangSpread time.Duration
	// MinOfFloor is gantry's pods/s over the floor's of the same run (median of
	// runs); MaxP99OfFloor its create → bound p99 over the floor's, for steady
	// arrivals; MaxCycleP99 bounds its cycle-time p99 in every run.
	MinOfFloor    float64
	MaxP99OfFloor float64
	MaxCycleP99   time.Duration
}

// Scenarios are the benchmark's workloads. The anchors (kube-scheduler 273 pods/s on
// a, 219 on b) were measured on a 2-core machine at client QPS 5000; see
// docs/benchmarks.md.
var Scenarios = []Scenario{
	{
		Name: "a", Title: "1,000 nodes × 8 GPUs, 5,000 pending one-GPU pods",
		Nodes: 1000, GPUsPerNode: 8, Pods: 5000,
		Schedulers: []Scheduler{KubeScheduler, Gantry},
		Goals:      Goals{MinRatio: 4},
	},
	{
		Name: "b", Title: "5,000 nodes × 8 GPUs, 10,000 pending one-GPU pods",
		Nodes: 5000, GPUsPerNode: 8, Pods: 10000,
		Schedulers: []Scheduler{KubeScheduler, Gantry},
		Goals:      Goals{MinRatio: 4, MaxRSSMiB: 500},
	},
	{
		Name: "c", Title: "625 gangs × 8 one-GPU pods on 1,000 nodes × 8 GPUs",
		Nodes: 1000, GPUsPerNode: 8, Pods: 5000, GangSize: 8,
		// kube-scheduler has no gangs.
		Schedulers: []Scheduler{Gantry},
		Goals:      Goals{MinPodsPerSecond: 1000, MaxGangSpread: time.Second},
	},
	{
		Name: "d", Title: "DRA: 500 nodes × 8 GPUs as ResourceSlices, 2,000 pods claiming one GPU each",
		Nodes: 500, GPUsPerNode: 8, Pods: 2000, DRA: true,
		Schedulers: []Scheduler{KubeScheduler, Gantry},
		Goals:      Goals{MinRatio: 5},
	},
	{
		Name: "e", Title: "DRA with a CEL selector: as d, each claim selecting the GPU model",
		Nodes: 500, GPUsPerNode: 8, Pods: 2000, DRA: true,
		Selector:   `device.attributes["gpu.gantry.dev"].productName == "NVIDIA H100 80GB HBM3"`,
		Schedulers: []Scheduler{KubeScheduler, Gantry},
		// No goal in the issue: this measures Gantry's structured-allocator path.
	},
}

// Select returns the named scenarios in the order given ("all" or "" for a to e,
// "scale" for every one of ScaleScenarios).
func Select(names string) ([]Scenario, error) {
	if names == "" || names == "all" {
		return append([]Scenario(nil), Scenarios...), nil
	}
	if names == "scale" {
		return append([]Scenario(nil), ScaleScenarios...), nil
	}
	var out []Scenario
	for _, n := range strings.Split(names, ",") {
		n = strings.TrimSpace(n)
		found := false
		for _, s := range append(Scenarios[:len(Scenarios):len(Scenarios)], ScaleScenarios...) {
			if s.Name == n {
				out = append(out, s)
				found = true
			}
		}
		if !found {
			var scale []string
			for _, s := range ScaleScenarios {
				scale = append(scale, s.Name)
			}
			return nil, fmt.Errorf("unknown scenario %q: choose from a, b, c, d, e, all, scale or one of %s", n, strings.Join(scale, ", "))
		}
	}
	return out, nil
}

// Scaled shrinks (or grows) the scenario's nodes and pods by factor, keeping whole
// gangs and at least one node and one gang. Goals on ratios and memory still apply
// but mean less on a small cluster; the report says the scale.
func (s Scenario) Scaled(factor float64) Scenario {
	if factor == 1 {
		return s
	}
	s.Nodes = max(1, int(math.Round(float64(s.Nodes)*factor)))
	unit := max(1, s.GangSize)
	if len(s.GangSizes) > 0 {
		unit = 0
		for _, n := range s.GangSizes {
			unit += n
		}
	}
	s.Pods = max(unit, int(math.Round(float64(s.Pods)*factor/float64(unit)))*unit)
	if s.Rate > 0 {
		s.Rate = max(1, int(math.Round(float64(s.Rate)*factor)))
		s.Pods = s.Rate * int(s.Duration/time.Second)
	}
	s.Title = fmt.Sprintf("%s, scaled by %g to %d nodes and %d pods", s.Title, factor, s.Nodes, s.Pods)
	return s
}

// Gangs is the number of gangs, 0 for lone pods.
func (s Scenario) Gangs() int {
	if len(s.GangSizes) > 0 {
		g, _ := s.gangOf(s.Pods - 1)
		return g + 1
	}
	if s.GangSize <= 0 {
		return 0
	}
	return s.Pods / s.GangSize
}

// gangOf is pod i's gang and that gang's size (-1, 0 for a lone pod).
func (s Scenario) gangOf(i int) (gang, size int) {
	if len(s.GangSizes) == 0 {
		if s.GangSize <= 0 {
			return -1, 0
		}
		return i / s.GangSize, s.GangSize
	}
	sum := 0
	for _, n := range s.GangSizes {
		sum += n
	}
	gang = i / sum * len(s.GangSizes)
	for k, off := 0, i%sum; ; k++ {
		if off < s.GangSizes[k] {
			return gang + k, s.GangSizes[k]
		}
		off -= s.GangSizes[k]
	}
}

// hasGangs reports whether the scenario groups pods.
func (s Scenario) hasGangs() bool { return s.GangSize > 0 || len(s.GangSizes) > 0 }
