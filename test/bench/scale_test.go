package bench

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

// The smoke of the scale benchmarks under -short: no control plane and no timing,
// only that the pieces the figures come from read and count right.

// Mixed gangs take their sizes in turn; every pod of a gang carries its size.
func TestMixedGangLayout(t *testing.T) {
	s, err := Select("gang-5k")
	if err != nil {
		t.Fatal(err)
	}
	sc := s[0]
	sizes := map[int]int{}
	for i := 0; i < sc.Pods; i++ {
		g, size := sc.gangOf(i)
		sizes[g]++
		if p := pod(i, sc, Gantry); p.Annotations[AnnotationMinMember] == "" || size < 2 || size > 32 {
			t.Fatalf("pod %d: gang %d of size %d, annotations %v", i, g, size, p.Annotations)
		}
	}
	if len(sizes) != sc.Gangs() || sc.Gangs() != 1750 {
		t.Fatalf("%d gangs seen, Gangs() says %d; want 1750 (250 × 7 sizes)", len(sizes), sc.Gangs())
	}
	for g, n := range sizes {
		if _, size := sc.gangOf(firstPodOf(sc, g)); n != size {
			t.Fatalf("gang %d has %d pods, size %d", g, n, size)
		}
	}
	if got := sc.Scaled(0.1); got.Pods%80 != 0 || got.Nodes != 500 {
		t.Fatalf("scaled gang-5k: %d nodes, %d pods; want 500 and whole rounds of 80", got.Nodes, got.Pods)
	}
}

func firstPodOf(s Scenario, gang int) int {
	for i := 0; i < s.Pods; i++ {
		if g, _ := s.gangOf(i); g == gang {
			return i
		}
	}
	return -1
}

// Every scale scenario has a slot for each pod (and, steady, the warm-up pod).
func TestScaleScenariosFit(t *testing.T) {
	for _, s := range ScaleScenarios {
		warmup := 0
		if s.Rate > 0 {
			warmup = 1
		}
		if s.Nodes*s.GPUsPerNode < s.Pods+warmup || s.GPUsPerNode > 110 {
			t.Errorf("%s: %d pods (+1 warm-up) on %d nodes × %d GPUs", s.Name, s.Pods, s.Nodes, s.GPUsPerNode)
		}
		if s.Rate > 0 && s.Pods != s.Rate*int(s.Duration/time.Second) {
			t.Errorf("%s: %d pods at %d/s for %s", s.Name, s.Pods, s.Rate, s.Duration)
		}
	}
}

func TestCycleTrace(t *testing.T) {
	lines := []string{
		"1764593061100000\t1500\t10\t10\t0\t0\t256\t0",
		"1764593061300000\t500\t0\t0\t2\t30\t256\t0",
		"1764593062500000\t100000\t30\t3\t0\t60\t512\t1",
		"not a cycle",
		"1764593062600000\t7",
	}
	var parsed []cycleLine
	for _, l := range lines {
		if c, ok := parseTraceLine(l); ok {
			parsed = append(parsed, c)
		}
	}
	st := cycleStats(parsed)
	if st.Cycles != 3 || st.BindingCycles != 2 || st.PodsPerCycle != 20 || st.MaxPodsPerCycle != 30 {
		t.Fatalf("%+v: want 3 cycles, 2 binding, 20 pods per binding cycle, 30 at most", st)
	}
	if st.P50Ms != 1.5 || st.MaxMs != 100 || st.InFlightMean != 30 || st.DryStartShare != 0.5 {
		t.Fatalf("%+v: want p50 1.5 ms, max 100 ms, 30 in flight on average, half the binding cycles dry", st)
	}
	if len(st.InFlightBySecond) != 2 || st.InFlightBySecond[0] != 15 || st.InFlightBySecond[1] != 60 {
		t.Fatalf("in flight by second %v, want [15 60]", st.InFlightBySecond)
	}
	if cycleStats(nil) != nil {
		t.Fatal("no cycles should give no stats")
	}
}

// Runs are set against the floor of their own repetition: throughput for drains,
// p99 for steady arrivals.
func TestOfFloor(t *testing.T) {
	rs := []Result{
		{Run: 1, Scheduler: "floor", Status: StatusOK, PodsPerSecond: 1000, WallPodsPerSecond: 800},
		{Run: 1, Scheduler: "gantry-scheduler", Status: StatusOK, PodsPerSecond: 900, WallPodsPerSecond: 600},
		{Run: 2, Scheduler: "floor", Status: StatusOK, Latency: &LatencyResult{P99: 0.2}},
		{Run: 2, Scheduler: "gantry-scheduler", Status: StatusOK, Latency: &LatencyResult{P99: 0.3}},
		{Run: 3, Scheduler: "gantry-scheduler", Status: StatusOK, PodsPerSecond: 900},
	}
	ofFloor(rs)
	if rs[1].OfFloor != 0.9 || rs[1].WallOfFloor != 0.75 || rs[3].OfFloor != 1.5 || rs[4].OfFloor != 0 {
		t.Fatalf("of floor %v %v %v %v; want 0.9, 0.75, 1.5 and none without a floor", rs[1].OfFloor, rs[1].WallOfFloor, rs[3].OfFloor, rs[4].OfFloor)
	}
}

// The floor binds each pod it is handed to the next node with a free slot.
func TestFloorFillsNodesInOrder(t *testing.T) {
	client := fake.NewClientset()
	var mu sync.Mutex
	got := map[string]string{}
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		mu.Lock()
		got[b.Name] = b.Target.Name
		mu.Unlock()
		return true, b, nil
	})
	f := &floorBinder{client: client, nodes: 2, slots: 2}
	for _, n := range []string{"a", "b", "c", "d", "e"} {
		f.queue = append(f.queue, n)
	}
	f.cond = sync.NewCond(&f.mu)
	done := make(chan struct{})
	go func() { f.work(context.Background()); close(done) }()
	for {
		f.mu.Lock()
		empty := len(f.queue) == 0
		f.mu.Unlock()
		if empty {
			break
		}
		time.Sleep(time.Millisecond)
	}
	f.mu.Lock()
	f.stopped = true
	f.cond.Broadcast()
	f.mu.Unlock()
	<-done
	perNode := map[string]int{}
	for _, n := range got {
		perNode[n]++
	}
	if len(got) != 4 || perNode[nodeName(0)] != 2 || perNode[nodeName(1)] != 2 || f.errors.Load() != 1 {
		t.Fatalf("bindings %v, %d errors; want 4 pods two per node and the fifth refused for want of a slot", got, f.errors.Load())
	}
}

// kube-scheduler's 100,000-pod drain runs only when asked for: by default the
// scenario runs the floor and gantry-scheduler; -schedulers kube runs kube-scheduler
// alone, and -schedulers gantry never adds it. (Before OnRequest, -schedulers kube
// only filtered the scenario's own list and ran nothing.)
func TestDrain100kRunsKubeSchedulerOnlyOnRequest(t *testing.T) {
	var s Scenario
	for _, sc := range ScaleScenarios {
		if sc.Name == "drain-100k" {
			s = sc
		}
	}
	for _, c := range []struct {
		only []Scheduler
		want []Scheduler
	}{
		{nil, []Scheduler{Floor, Gantry}},
		{[]Scheduler{KubeScheduler}, []Scheduler{KubeScheduler}},
		{[]Scheduler{Gantry}, []Scheduler{Gantry}},
		{[]Scheduler{Floor, Gantry, KubeScheduler}, []Scheduler{Floor, Gantry, KubeScheduler}},
	} {
		if got := s.runs(c.only); !slices.Equal(got, c.want) {
			t.Errorf("-schedulers %v runs %v, want %v", c.only, got, c.want)
		}
	}
}

// The even repetitions run the schedulers in the reverse order, so that neither
// always runs on the machine as the other left it.
func TestRepetitionsAlternateTheOrder(t *testing.T) {
	s, err := Select("drain-5k")
	if err != nil {
		t.Fatal(err)
	}
	first, second := s[0].order(nil, 1), s[0].order(nil, 2)
	if len(first) < 2 {
		t.Fatalf("drain-5k runs %v, want the floor and gantry-scheduler", first)
	}
	if !slices.Equal(first, s[0].runs(nil)) || !slices.Equal(s[0].order(nil, 3), first) {
		t.Errorf("odd repetitions run %v and %v, want the scenario's order %v", first, s[0].order(nil, 3), s[0].runs(nil))
	}
	reversed := slices.Clone(first)
	slices.Reverse(reversed)
	if !slices.Equal(second, reversed) {
		t.Errorf("repetition 2 runs %v, want %v", second, reversed)
	}
}

// The machine's CPU comes from /proc/stat's first line: busy is user, nice, system,
// irq and softirq; steal is counted apart; idle and iowait are neither.
func TestParseMachineCPU(t *testing.T) {
	m, err := parseMachineCPU("cpu  282440 10 34109 593153 838 5 622 4748 0 0")
	if err != nil {
		t.Fatal(err)
	}
	if want := (282440.0 + 10 + 34109 + 5 + 622) / 100; m.busy != want || m.steal != 47.48 || !m.known {
		t.Errorf("got busy %v steal %v, want %v and 47.48", m.busy, m.steal, want)
	}
	for _, bad := range []string{"", "cpu0 1 2 3 4 5 6 7 8", "cpu 1 2 3"} {
		if _, err := parseMachineCPU(bad); err == nil {
			t.Errorf("parseMachineCPU(%q) took it", bad)
		}
	}
	if _, err := readMachineCPU(); err != nil {
		t.Errorf("this machine's /proc/stat: %v", err)
	}
}
