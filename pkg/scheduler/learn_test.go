package scheduler

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Each cycle teaches the placer the pods it has not seen: a fresh (or restarted)
// scheduler learns from every pod, running and pending, and a pod seen in an
// earlier cycle is not counted again.
func TestCycleTeachesThePlacerTheWorkloadMix(t *testing.T) {
	s, err := New("", Config{})
	if err != nil {
		t.Fatal(err)
	}
	snap := build([]*model.Node{node("a", 8, "H100")}, nil, []gangSpec{
		{name: "running", size: 2, min: 2, gpus: 2, boundOn: "a"},
		{name: "pending", size: 3, min: 3, gpus: 1},
	})
	s.Schedule(snap)
	if got := s.Placer.Settings().Arrivals; got != 5 {
		t.Fatalf("after the first cycle the placer learned from %d pods, want 5 (2 running, 3 pending)", got)
	}
	s.Schedule(snap)
	if got := s.Placer.Settings().Arrivals; got != 5 {
		t.Fatalf("the same pods again made %d arrivals, want 5", got)
	}
	var twoGPU float64
	for _, shape := range s.Placer.Mix() {
		if shape.GPU.Count == 2 && shape.Requests.MilliCPU == 1000 {
			twoGPU = shape.Weight
		}
	}
	if twoGPU == 0 {
		t.Fatalf("the running 2-GPU pods are not in the learned mix: %v", s.Placer.Mix())
	}
}
