package model

import (
	"fmt"
	"math/rand/v2"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The counts a cycle reads instead of visiting every node stay equal to a count
// from scratch through adds, replacements (a booking's clone), and removals.
func TestNodeCountsFollowAddReplaceRemove(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := NewSnapshot()
	anti := &Pod{ID: "ns/anti", Constraints: &Constraints{AntiAffinity: []AffinityTerm{{}}}}
	aff := &Pod{ID: "ns/aff", Constraints: &Constraints{PreferredAffinity: []WeightedAffinityTerm{{Weight: 1}}}}
	if !anti.HasAntiAffinity() || !aff.HasAffinityTerms() {
		t.Fatal("test pods do not have the terms the counts look for")
	}
	for step := range 5000 {
		name := fmt.Sprintf("n%d", rng.IntN(40))
		switch op := rng.IntN(4); {
		case op == 0:
			s.RemoveNode(name)
		case s.Node(name) == nil:
			n := &Node{Name: name}
			if rng.IntN(3) == 0 {
				n.Taints = []corev1.Taint{{Key: "k", Effect: corev1.TaintEffectPreferNoSchedule}}
			}
			s.AddNode(n)
		default:
			n := s.Node(name).Clone()
			p := []*Pod{anti, aff}[rng.IntN(2)]
			if op == 1 {
				n.Book(p, nil)
			} else {
				n.Unbook(p, nil)
			}
			s.AddNode(n)
		}
		if got, want := s.NodeCounts(), CountNodes(s.Nodes); got != want {
			t.Fatalf("step %d: NodeCounts %+v, counted from scratch %+v", step, got, want)
		}
	}
	if c := s.NodeCounts(); c.Affinity == 0 || c.AntiAffinity == 0 || c.SoftTainted == 0 {
		t.Errorf("the walk ended with no node of some kind (%+v): it did not exercise the counts", c)
	}
}
