package placement

import (
	"fmt"
	"math"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// TestBoundShapeScarcityFollowsFreeCapacity: a shape bound to H100 weighs, against
// an unbound one, the cluster's GPUs over the H100 GPUs when the cluster is empty
// (40 / 8 = 5), and the free GPUs over the free H100 GPUs once half the H100 GPUs
// are taken (36 / 4 = 9); without bound shapes, filling the cluster changes no
// weight.
func TestBoundShapeScarcityFollowsFreeCapacity(t *testing.T) {
	var nodes []*model.Node
	for i := 0; i < 4; i++ {
		nodes = append(nodes, gpuNode(fmt.Sprint("a10-", i), 8, "A10", 24<<30))
	}
	nodes = append(nodes, gpuNode("h100", 8, "H100", 80<<30))
	s := snapshotOf(nodes...)
	common := Shape{GPU: model.GPUDemand{Count: 1}, Requests: model.Resources{MilliCPU: 1000}, Weight: 1}
	bound := Shape{GPU: model.GPUDemand{Count: 1, Models: []string{"H100"}}, Requests: model.Resources{MilliCPU: 1000}, Weight: 1}

	ratio := func(p *Placer, v *View) float64 {
		p.setShapes(p.shapes) // recompile against v
		p.adaptTo(v)
		got := map[int]float64{}
		for _, g := range p.workload.groups {
			got[len(g.demand.Models)] = g.weight
		}
		return got[1] / got[0]
	}
	p, _ := New("")
	p.SetWorkload([]Shape{common, bound})
	v := NewView(s)
	if r := ratio(p, v); math.Abs(r-5) > 1e-9 {
		t.Fatalf("empty cluster: bound/common weight = %v, want 5", r)
	}
	for i := 0; i < 4; i++ {
		pod := gpuPod(fmt.Sprint("h-", i), 1, 1000, 1<<30)
		pod.GPU.Models = []string{"H100"}
		pl, u := p.PlacePod(v, pod)
		if u != nil || pl.Node != "h100" {
			t.Fatalf("pod %d: %v %v", i, pl.Node, u)
		}
		v.Assign(pod, pl)
	}
	if r := ratio(p, v); math.Abs(r-9) > 1e-9 {
		t.Errorf("half the H100 GPUs taken: bound/common weight = %v, want 9 (36 free GPUs, 4 of them H100)", r)
	}

	// Without bound shapes the weights are the empty cluster's, whatever is taken.
	other := Shape{GPU: model.GPUDemand{Count: 8}, Weight: 1}
	q, _ := New("")
	q.SetWorkload([]Shape{common, other})
	before := ratioOf(q, NewView(s))
	if after := ratioOf(q, v); after != before {
		t.Errorf("without bound shapes the weights moved with the cluster's state: %v, then %v", before, after)
	}
}

// ratioOf is the weight of the 8-GPU group over the 1-GPU group, compiled against v.
func ratioOf(p *Placer, v *View) float64 {
	p.setShapes(p.shapes)
	p.adaptTo(v)
	got := map[int]float64{}
	for _, g := range p.workload.groups {
		got[g.demand.Count] = g.weight
	}
	return got[8] / got[1]
}
