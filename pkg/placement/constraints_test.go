package placement

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// A pod that needs a node-declared feature fits only nodes declaring it.
func TestNodeDeclaredFeatures(t *testing.T) {
	s := model.NewSnapshot()
	s.AddNode(&model.Node{Name: "old", Allocatable: model.Resources{MilliCPU: 1000, MemoryBytes: 1 << 30, Pods: 10}})
	s.AddNode(&model.Node{Name: "new", DeclaredFeatures: []string{"X"}, Allocatable: model.Resources{MilliCPU: 1000, MemoryBytes: 1 << 30, Pods: 10}})
	pod := &model.Pod{ID: "ns/p", Constraints: &model.Constraints{NodeFeatures: []string{"X"}}}
	if got := FitsOn(NewView(s), pod); len(got) != 1 || got[0] != "new" {
		t.Fatalf("fits on %v, want [new]", got)
	}
	p, _ := New("")
	_, u := p.PlacePod(NewView(s), &model.Pod{ID: "ns/q", Constraints: &model.Constraints{NodeFeatures: []string{"Y"}}})
	if u == nil || u.Reasons[ReasonNodeFeatures] != 2 {
		t.Fatalf("unschedulable = %+v, want both nodes lacking the feature", u)
	}
}
