package placement

import (
	"fmt"
	"math"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

func TestNewPolicies(t *testing.T) {
	p, err := New("")
	if err != nil || p.Policy() != "fgd" {
		t.Fatalf(`New("") = %v, %v; want the fgd policy`, p, err)
	}
	for _, name := range Policies() {
		if _, err := New(name); err != nil {
			t.Errorf("New(%q): %v", name, err)
		}
	}
	_, err = New("firstfit")
	if err == nil || !strings.Contains(err.Error(), "fgd, fgd-classic, bestfit, spread") {
		t.Fatalf(`New("firstfit") error = %v, want one listing the valid policies`, err)
	}
}

// TestFragmentation checks the measure against hand-computed values, in
// milli-GPUs, for a node of four 1000-milli GPUs.
func TestFragmentation(t *testing.T) {
	const mem = 1_000_000 // bytes per GPU, so a milli is 1000 bytes
	slots := func(free ...int64) []gpuSlot {
		s := make([]gpuSlot, len(free))
		for i, f := range free {
			s[i] = gpuSlot{model: "T4", memory: mem, free: f * 1000, idle: f == 1000}
		}
		return s
	}
	whole := func(n int, w float64) Shape { return Shape{GPU: model.GPUDemand{Count: n}, Weight: w} }
	share := func(milli int64, w float64) Shape {
		return Shape{GPU: model.GPUDemand{Count: 1, FractionMilli: milli}, Weight: w}
	}
	tests := []struct {
		name   string
		shapes []Shape
		slots  []gpuSlot
		want   float64
	}{
		{"an idle node is no fragment to one-GPU pods", []Shape{whole(1, 1)}, slots(1000, 1000, 1000, 1000), 0},
		{"slivers are fragments to one-GPU pods", []Shape{whole(1, 1)}, slots(1000, 300, 0, 200), 500},
		{"all free GPU is a fragment when the shape cannot fit", []Shape{whole(4, 1)}, slots(1000, 1000, 1000, 500), 3500},
		{"a half share uses GPUs with half free", []Shape{share(500, 1)}, slots(600, 400, 0, 0), 400},
		{"the mix weighs each shape", []Shape{whole(1, 3), share(500, 1)}, slots(600, 400, 1000, 0), 0.75*1000 + 0.25*400},
		{"a full node has no fragment", []Shape{whole(1, 1)}, slots(0, 0, 0, 0), 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := compileWorkload(tt.shapes, nil, clusterCapacity{}, false, 0)
			wfit := w.fitWeights(math.MaxInt64, math.MaxInt64, nil)
			if got := w.fragmentation(tt.slots, false, wfit, math.MaxInt64, math.MaxInt64, nodeRatios{}); math.Abs(got-tt.want) > 1e-9 {
				t.Fatalf("fragmentation = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestFragmentationCountsGPUsStrandedByCPU(t *testing.T) {
	shapes := []Shape{{Requests: model.Resources{MilliCPU: 8000}, GPU: model.GPUDemand{Count: 1}, Weight: 1}}
	w := compileWorkload(shapes, nil, clusterCapacity{}, false, 1)
	slots := []gpuSlot{{memory: 1000, free: 1000, idle: true}, {memory: 1000, free: 1000, idle: true}}
	// 8 cores feed one of the two idle GPUs at the mix's 8 cores per GPU.
	wfit := w.fitWeights(8000, math.MaxInt64, nil)
	if got := w.fragmentation(slots, false, wfit, 8000, math.MaxInt64, nodeRatios{}); got != 1000 {
		t.Fatalf("fragmentation with CPU for one GPU = %v, want 1000", got)
	}
	wfit = w.fitWeights(16000, math.MaxInt64, nil)
	if got := w.fragmentation(slots, false, wfit, 16000, math.MaxInt64, nodeRatios{}); got != 0 {
		t.Fatalf("fragmentation with CPU for both GPUs = %v, want 0", got)
	}
}

// place runs one pod through a fresh placer and returns node and GPU indexes.
func place(t *testing.T, policy string, shapes []Shape, s *model.Snapshot, pod *model.Pod) (string, []int) {
	t.Helper()
	p, err := New(policy)
	if err != nil {
		t.Fatal(err)
	}
	if shapes != nil {
		p.SetWorkload(shapes)
	}
	pl, u := p.PlacePod(NewView(s), pod)
	if u != nil {
		t.Fatalf("PlacePod: %s", u.Message)
	}
	var gpus []int
	for _, b := range pl.GPUs {
		gpus = append(gpus, b.Index)
	}
	return pl.Node, gpus
}

func TestScoring(t *testing.T) {
	// partly is an 8-GPU node with GPU 0 half booked and GPU 1 held whole.
	partly := func() *model.Node {
		n := gpuNode("partly", 8, "H100", 80*gib)
		n.GPUs[0].AllocatedBytes, n.GPUs[0].Sharers = 40*gib, 1
		n.GPUs[1].AllocatedBytes, n.GPUs[1].Exclusive = 80*gib, true
		return n
	}
	mix := []Shape{
		{GPU: model.GPUDemand{Count: 1}, Weight: 4},
		{GPU: model.GPUDemand{Count: 8}, Weight: 1},
		{GPU: model.GPUDemand{Count: 1, FractionMilli: 500}, Weight: 2},
	}
	tests := []struct {
		name     string
		policy   string
		shapes   []Shape
		nodes    []*model.Node
		pod      *model.Pod
		wantNode string
		wantGPUs []int
	}{
		{
			name:  "fgd fills the half-booked GPU instead of starting a new one",
			nodes: []*model.Node{gpuNode("idle", 8, "H100", 80*gib), partly()},
			pod:   sharePod("half", 500, 1000, gib), shapes: mix,
			wantNode: "partly", wantGPUs: []int{0},
		},
		{
			name:  "fgd keeps the idle node whole for 8-GPU pods",
			nodes: []*model.Node{gpuNode("idle", 8, "H100", 80*gib), partly()},
			pod:   gpuPod("one", 1, 1000, gib), shapes: mix,
			wantNode: "partly", wantGPUs: []int{2},
		},
		{
			name: "fgd sends a CPU-only pod where CPU is plentiful for the GPUs",
			nodes: []*model.Node{
				func() *model.Node {
					n := gpuNode("gpu-dense", 8, "H100", 80*gib)
					n.Allocatable.MilliCPU = 64000
					return n
				}(),
				func() *model.Node {
					n := gpuNode("cpu-rich", 2, "H100", 80*gib)
					n.Allocatable.MilliCPU = 96000
					return n
				}(),
			},
			shapes:   []Shape{{Requests: model.Resources{MilliCPU: 8000, MemoryBytes: gib}, GPU: model.GPUDemand{Count: 1}, Weight: 1}},
			pod:      cpuPod("cpu", 16000, gib),
			wantNode: "cpu-rich",
		},
		{
			name:  "fgd leaves a scarce model to the pods that need it",
			nodes: []*model.Node{gpuNode("h100", 1, "H100", 80*gib), gpuNode("l4", 1, "L4", 24*gib)},
			shapes: []Shape{
				{GPU: model.GPUDemand{Count: 1, Models: []string{"H100"}}, Weight: 1},
				{GPU: model.GPUDemand{Count: 1}, Weight: 1},
			},
			pod:      gpuPod("any", 1, 1000, gib),
			wantNode: "l4", wantGPUs: []int{0},
		},
		{
			name:     "bestfit packs the fullest node and the tightest GPU",
			policy:   "bestfit",
			nodes:    []*model.Node{gpuNode("idle", 8, "H100", 80*gib), partly()},
			pod:      memSharePod("share", 30*gib),
			wantNode: "partly", wantGPUs: []int{0},
		},
		{
			name:     "spread picks the emptiest node and the emptiest GPU",
			policy:   "spread",
			nodes:    []*model.Node{partly(), gpuNode("idle", 8, "H100", 80*gib)},
			pod:      memSharePod("share", 30*gib),
			wantNode: "idle", wantGPUs: []int{0},
		},
		{
			name:   "fgd-classic fills the half-booked GPU too",
			policy: "fgd-classic", shapes: mix,
			nodes:    []*model.Node{gpuNode("idle", 8, "H100", 80*gib), partly()},
			pod:      sharePod("half", 500, 1000, gib),
			wantNode: "partly", wantGPUs: []int{0},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			node, gpus := place(t, tt.policy, tt.shapes, snapshotOf(tt.nodes...), tt.pod)
			if node != tt.wantNode || !equalInts(gpus, tt.wantGPUs) {
				t.Fatalf("placed on %s GPUs %v, want %s GPUs %v", node, gpus, tt.wantNode, tt.wantGPUs)
			}
		})
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestPlacerSeesChangesThroughTheView checks that cached scores follow the view: a
// node filled through Assign is not chosen again for a pod that no longer fits it.
func TestPlacerSeesChangesThroughTheView(t *testing.T) {
	s := snapshotOf(gpuNode("a", 2, "H100", 80*gib), gpuNode("b", 2, "H100", 80*gib))
	v := NewView(s)
	p, _ := New("")
	pod := gpuPod("p", 1, 1000, gib)
	count := map[string]int{}
	for i := 0; i < 4; i++ {
		pl, u := p.PlacePod(v, pod)
		if u != nil {
			t.Fatalf("placement %d: %s", i, u.Message)
		}
		v.Assign(pod, pl)
		count[pl.Node]++
	}
	if count["a"] != 2 || count["b"] != 2 {
		t.Fatalf("placements per node = %v, want 2 and 2", count)
	}
	if _, u := p.PlacePod(v, pod); u == nil {
		t.Fatal("placed a fifth one-GPU pod on four GPUs")
	}
	// A fresh view of the untouched snapshot: the placer must not reuse the full
	// nodes' scores.
	if _, u := p.PlacePod(NewView(s), pod); u != nil {
		t.Fatalf("fresh view: %s", u.Message)
	}
}

func TestShapesOfMergesIdenticalPods(t *testing.T) {
	shapes := ShapesOf([]*model.Pod{gpuPod("a", 1, 1000, gib), sharePod("b", 500, 1000, gib), gpuPod("c", 1, 1000, gib)})
	if len(shapes) != 2 || shapes[0].Weight != 2 || shapes[0].GPU.Count != 1 || shapes[0].GPU.FractionMilli != 0 {
		t.Fatalf("ShapesOf = %+v, want the one-GPU shape with weight 2 first", shapes)
	}
}

func TestScarceShapesWeighMore(t *testing.T) {
	var nodes []*model.Node
	for i := 0; i < 9; i++ {
		n := gpuNode(fmt.Sprintf("small-%d", i), 8, "H100", 80*gib)
		n.Allocatable.MilliCPU = 32000
		nodes = append(nodes, n)
	}
	big := gpuNode("big", 8, "H100", 80*gib)
	big.Allocatable.MilliCPU = 128000
	nodes = append(nodes, big)
	p, _ := New("")
	p.SetWorkload([]Shape{
		{Requests: model.Resources{MilliCPU: 4000}, GPU: model.GPUDemand{Count: 1}, Weight: 1},
		{Requests: model.Resources{MilliCPU: 120000}, GPU: model.GPUDemand{Count: 8}, Weight: 1},
		{GPU: model.GPUDemand{Count: 1, Models: []string{"B200"}}, Weight: 1},
	})
	p.PlacePod(NewView(snapshotOf(nodes...)), gpuPod("p", 1, 1000, gib))
	weights := map[int]float64{}
	for _, g := range p.workload.groups {
		if len(g.demand.Models) > 0 {
			t.Fatalf("a shape of a model the cluster lacks kept weight %v", g.weight)
		}
		weights[g.demand.Count] = g.weight
	}
	// The 8-GPU shape fits one node in ten: it weighs ten times the one-GPU shape.
	if got := weights[8] / weights[1]; math.Abs(got-10) > 1e-9 {
		t.Fatalf("8-GPU shape weighs %v times the 1-GPU shape, want 10", got)
	}
}
