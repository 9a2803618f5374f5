package scheduler_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// The scenario tests declare a cluster, its queues and gangs as data, run one cycle,
// and compare what the cycle decided: which gangs it binds, which pods it evicts, and
// why the rest wait.
func TestCycleScenarios(t *testing.T) {
	twoTeams := []sc.Queue{
		{Name: "dept", Quota: -1},
		{Name: "team-a", Parent: "dept", Quota: 4},
		{Name: "team-b", Parent: "dept", Quota: 4},
	}
	h100 := func(name string, gpus int) sc.Node { return sc.Node{Name: name, GPUs: gpus} }
	a10g := sc.Node{Name: "a", GPUs: 1, Model: "NVIDIA-A10G"}
	for _, s := range []sc.Scenario{
		{
			Name:   "a gang that fits only together is bound whole",
			Nodes:  []sc.Node{h100("a", 4), h100("b", 4)},
			Gangs:  []sc.Gang{{Name: "train", Pods: 2, GPUs: 4}},
			Expect: sc.Expect{Binds: []string{"train"}},
		},
		{
			Name:   "a gang one GPU too big binds nothing",
			Nodes:  []sc.Node{h100("a", 4), h100("b", 4)},
			Gangs:  []sc.Gang{{Name: "train", Pods: 3, GPUs: 3}},
			Expect: sc.Expect{Pending: pending("train", noFit)},
		},
		{
			Name:  "elastic members take only what is left after gangs",
			Nodes: []sc.Node{h100("a", 4)},
			Gangs: []sc.Gang{{Name: "ray", Pods: 5, Min: 2, GPUs: 1}},
			// The fifth member waits with a reason, as every pending pod does.
			Expect: sc.Expect{Binds: []string{"ray", "ray+2"}, Pending: pending("ray", string(scheduler.PendingNoFit))},
		},
		{
			Name:   "a queue at its limit waits with the limit as reason",
			Nodes:  []sc.Node{h100("a", 8)},
			Queues: []sc.Queue{{Name: "capped", Quota: 2, Limit: 2}},
			Gangs: []sc.Gang{
				{Name: "running", Queue: "capped", GPUs: 2, On: "a"},
				{Name: "more", Queue: "capped", GPUs: 1},
			},
			Expect: sc.Expect{Pending: pending("more", string(scheduler.PendingQueueLimit))},
		},
		{
			Name:   "non-preemptible work may not borrow beyond its quota",
			Nodes:  []sc.Node{h100("a", 8)},
			Queues: twoTeams,
			Gangs:  []sc.Gang{{Name: "serve", Queue: "team-a", Priority: 125, NonPreemptible: true, GPUs: 6}},
			Expect: sc.Expect{Pending: pending("serve", string(scheduler.PendingQueueQuota))},
		},
		{
			Name:   "the queue furthest below its share goes first",
			Nodes:  []sc.Node{h100("a", 4)},
			Queues: twoTeams,
			Gangs: []sc.Gang{
				{Name: "a-running", Queue: "team-a", GPUs: 2, On: "a"},
				{Name: "a-next", Queue: "team-a", GPUs: 2},
				{Name: "b-next", Queue: "team-b", GPUs: 2},
			},
			Expect: sc.Expect{Binds: []string{"b-next"}, Pending: pending("a-next", noFit)},
		},
		{
			Name:  "inference preempts the whole training gang",
			Nodes: []sc.Node{a10g},
			Gangs: []sc.Gang{
				{Name: "train", Pods: 2, On: "a", Priority: 50},
				{Name: "train-gpu", GPUs: 1, On: "a", Priority: 50},
				{Name: "serve", GPUs: 1, Priority: 125, NonPreemptible: true},
			},
			Expect: sc.Expect{Evicted: []string{"train-gpu-0"}, Nominated: []string{"serve"}},
		},
		{
			Name:  "equal priority never preempts",
			Nodes: []sc.Node{a10g},
			Gangs: []sc.Gang{
				{Name: "first", GPUs: 1, On: "a", Priority: 50},
				{Name: "second", GPUs: 1, Priority: 50},
			},
			Expect: sc.Expect{Pending: pending("second", noFit)},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}

// The cycle decides from its snapshot alone: the same snapshot gives the same plan.
func TestCycleIsDeterministic(t *testing.T) {
	s, _ := scheduler.New("", scheduler.Config{Preemption: true})
	var gangs []sc.Gang
	for i := 0; i < 20; i++ {
		gangs = append(gangs, sc.Gang{Name: fmt.Sprintf("g%02d", i), Pods: 2, GPUs: 1 + i%3})
	}
	var first string
	for run := 0; run < 5; run++ {
		snap, err := sc.Build(sc.Scenario{Nodes: []sc.Node{{Name: "a", GPUs: 8}, {Name: "b", GPUs: 8}, {Name: "c", GPUs: 4}}, Gangs: gangs})
		if err != nil {
			t.Fatal(err)
		}
		plan := s.Schedule(snap)
		var lines []string
		for _, b := range plan.Binds {
			for _, p := range b.Placements {
				lines = append(lines, fmt.Sprintf("%s@%s%v", p.Pod, p.Node, p.GPUs))
			}
		}
		got := strings.Join(lines, ";")
		if run == 0 {
			first = got
		} else if got != first {
			t.Fatalf("run %d planned differently:\n%s\nvs\n%s", run, got, first)
		}
	}
}

// The cycle never changes the snapshot it is given.
func TestCycleDoesNotModifySnapshot(t *testing.T) {
	s, _ := scheduler.New("", scheduler.Config{Preemption: true})
	snap, err := sc.Build(sc.Scenario{Nodes: []sc.Node{{Name: "a", GPUs: 2}}, Gangs: []sc.Gang{{Name: "g", Pods: 2, GPUs: 1}}})
	if err != nil {
		t.Fatal(err)
	}
	before := fmt.Sprintf("%+v", *snap.Node("a"))
	plan := s.Schedule(snap)
	if len(plan.Binds) != 1 {
		t.Fatalf("binds = %v, want the gang", plan.Binds)
	}
	if after := fmt.Sprintf("%+v", *snap.Node("a")); after != before {
		t.Errorf("node changed by the cycle:\n%s\n%s", before, after)
	}
}
