package placement

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// weightOf is the learned weight of the shapes with count GPUs and milliCPU.
func weightOf(p *Placer, gpus int, milliCPU int64) float64 {
	var w float64
	for _, s := range p.Mix() {
		if s.GPU.Count == gpus && s.Requests.MilliCPU == milliCPU {
			w += s.Weight
		}
	}
	return w
}

func TestLearnerFollowsArrivalsAndForgetsOldOnes(t *testing.T) {
	p, err := NewOnline("")
	if err != nil {
		t.Fatal(err)
	}
	if got := weightOf(p, 8, 0); got == 0 {
		t.Fatalf("before any arrival the mix should be DefaultWorkload, got %v", p.Mix())
	}
	for i := 0; i < 3*MixHalfLife; i++ {
		p.Arrive(gpuPod("old", 1, 4000, 16<<30))
	}
	for i := 0; i < 3*MixHalfLife; i++ {
		p.Arrive(gpuPod("new", 2, 8000, 32<<30))
	}
	// Three half-lives on, the old pods weigh 2^-3 of what they did: the new shape
	// is 7/8 of the mix, not half of it as a count would say.
	if got := weightOf(p, 2, 8000); math.Abs(got-0.875) > 0.06 {
		t.Errorf("the new shape weighs %.3f of the mix, want about 0.875", got)
	}
	if got := weightOf(p, 8, 0); got > 1e-3 {
		t.Errorf("the default mix still weighs %.4f after %d arrivals", got, 6*MixHalfLife)
	}
	if s := p.Settings(); !s.LearnsMix || s.Arrivals != 6*MixHalfLife {
		t.Errorf("Settings() = %+v, want a learner with %d arrivals", s, 6*MixHalfLife)
	}
}

func TestObserveSnapshotCountsEachPodOnceFromPendingAndRunning(t *testing.T) {
	s := snapshotOf(gpuNode("a", 8, "H100", 80<<30))
	add := func(p *model.Pod, node string) {
		p.Gang = model.GangID(p.ID)
		p.Node = node
		s.Pods[p.ID] = p
		s.Gangs[p.Gang] = &model.Gang{ID: p.Gang, MinMember: 1, Members: []model.PodID{p.ID}}
	}
	add(gpuPod("running", 4, 32000, 64<<30), "a")
	add(gpuPod("pending", 1, 8000, 16<<30), "")
	foreign := gpuPod("foreign", 2, 1000, 1<<30)
	foreign.Foreign = true
	add(foreign, "a")

	p, _ := NewOnline("")
	// A restarted scheduler learns from what is running and pending.
	p.ObserveSnapshot(s)
	if got := p.Settings().Arrivals; got != 2 {
		t.Fatalf("first snapshot counted %d pods, want 2 (running and pending, not the other scheduler's)", got)
	}
	p.ObserveSnapshot(s)
	if got := p.Settings().Arrivals; got != 2 {
		t.Fatalf("the same pods seen again counted %d, want still 2", got)
	}
	add(gpuPod("later", 1, 8000, 16<<30), "")
	s.PendingGangs = map[model.GangID]struct{}{"ns/later": {}, "ns/pending": {}}
	p.ObserveSnapshot(s)
	if got := p.Settings().Arrivals; got != 3 {
		t.Fatalf("a new pending pod made %d arrivals, want 3", got)
	}
}

// TestStrandedTermFromLearnedMix: once the placer has learned that GPU pods take 8
// cores per GPU, a CPU-only pod goes to the node with CPU to spare for its GPUs,
// not to the one whose 8 GPUs would be left with the CPU for one. Without the
// stranded term (or without the learned CPU per GPU) both nodes look alike to the
// per-shape terms, and the best-fit tie break picks the CPU-poor node.
func TestStrandedTermFromLearnedMix(t *testing.T) {
	poor := gpuNode("cpu-poor", 8, "H100", 80<<30)
	poor.Allocatable.MilliCPU = 16000
	rich := gpuNode("cpu-rich", 8, "H100", 80<<30)
	rich.Allocatable.MilliCPU = 128000
	s := snapshotOf(poor, rich)

	fixed, _ := New("")
	pl, u := fixed.PlacePod(NewView(s), cpuPod("etl", 8000, 1<<30))
	if u != nil || pl.Node != "cpu-poor" {
		t.Fatalf("with the default mix (no CPU per GPU known) the pod went to %q (%v); the test expects the tie break to pick cpu-poor", pl.Node, u)
	}

	learned, _ := NewOnline("")
	for i := 0; i < 500; i++ {
		learned.Arrive(gpuPod(fmt.Sprint("train-", i), 1, 8000, 32<<30))
	}
	pl, u = learned.PlacePod(NewView(s), cpuPod("etl", 8000, 1<<30))
	if u != nil || pl.Node != "cpu-rich" {
		t.Fatalf("after learning 8 cores per GPU, the CPU-only pod went to %q (%v), want cpu-rich", pl.Node, u)
	}
}

// TestScarcityWeighsRareShapes: a shape that fits only the tenth of the cluster's
// GPUs on one model weighs ten times its share of arrivals; a shape that fits no
// node weighs nothing; and the weighting does not reach the CPU per GPU of the
// stranded term.
func TestScarcityWeighsRareShapes(t *testing.T) {
	var nodes []*model.Node
	for i := 0; i < 9; i++ {
		nodes = append(nodes, gpuNode(fmt.Sprint("a10-", i), 8, "A10", 24<<30))
	}
	nodes = append(nodes, gpuNode("h100", 8, "H100", 80<<30))
	s := snapshotOf(nodes...)
	common := Shape{GPU: model.GPUDemand{Count: 1}, Requests: model.Resources{MilliCPU: 1000}, Weight: 1}
	rare := Shape{GPU: model.GPUDemand{Count: 1, Models: []string{"H100"}}, Requests: model.Resources{MilliCPU: 40000}, Weight: 1}
	never := Shape{GPU: model.GPUDemand{Count: 16}, Weight: 1}

	p, _ := New("")
	p.SetWorkload([]Shape{common, rare, never})
	p.adaptTo(NewView(s))
	got := map[int]float64{}
	for _, g := range p.workload.groups {
		got[len(g.demand.Models)*100+g.demand.Count] = g.weight
	}
	if math.Abs(got[101]/got[1]-10) > 1e-9 {
		t.Errorf("rare/common weight = %v, want 10 (the rare shape fits a tenth of the GPUs)", got[101]/got[1])
	}
	if got[16] != 0 {
		t.Errorf("a shape that fits no node weighs %v, want 0", got[16])
	}
	// CPU per GPU is that of arrivals: (1000 + 40000) / 2000 milli, not weighed.
	if want := 41000.0 / 2000; math.Abs(p.workload.cpuPerMilli-want) > 1e-9 {
		t.Errorf("cpuPerMilli = %v, want %v: scarcity must not set the stranded term's ratio", p.workload.cpuPerMilli, want)
	}
}

func TestDescribeMix(t *testing.T) {
	p, _ := NewOnline("")
	for i := 0; i < 30; i++ {
		p.Arrive(gpuPod("train", 1, 8000, 32<<30))
		if i%3 == 0 {
			p.Arrive(cpuPod("etl", 2000, 4<<30))
		}
	}
	lines := DescribeMix(p.Mix(), 2)
	if len(lines) != 2 || !strings.HasSuffix(lines[0], "% 1 GPU, 8 CPUs and 32 GiB memory") || !strings.HasSuffix(lines[1], "% 2 CPUs and 4 GiB memory") {
		t.Fatalf("DescribeMix = %q", lines)
	}
}
