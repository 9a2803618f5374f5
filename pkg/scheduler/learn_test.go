package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// Each cycle teaches the placer the pods it has not seen: a fresh (or restarted)
// scheduler learns from every pod, running and pending, and a pod seen in an
// earlier cycle is not counted again.
func TestCycleTeachesThePlacerTheWorkloadMix(t *testing.T) {
	s, err := scheduler.New("", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	snap, err := sc.Build(sc.Scenario{
		Nodes: []sc.Node{{Name: "a", GPUs: 8, Model: "H100"}},
		Gangs: []sc.Gang{
			{Name: "running", Pods: 2, Min: 2, GPUs: 2, CPU: 1000, On: "a"},
			{Name: "pending", Pods: 3, Min: 3, GPUs: 1, CPU: 1000},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
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
