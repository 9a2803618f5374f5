package scheduler_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// The repros of issue 19, each a scenario: a burst of inference into a cluster full of
// training evicts what it needs, once, and books what vLLM will take.
func TestBurstScenarios(t *testing.T) {
	const GiB = sc.GiB
	training := func(name, node string) sc.Gang {
		return sc.Gang{Name: name, Queue: "team", Priority: 50, GPUs: 4, On: node}
	}
	inference := func(n int, g sc.Gang) []sc.Gang {
		var out []sc.Gang
		for i := 0; i < n; i++ {
			c := g
			c.Name = fmt.Sprintf("%s-%d", g.Name, i)
			out = append(out, c)
		}
		return out
	}
	waiting := func(names ...string) map[string]scheduler.PendingKind {
		m := map[string]scheduler.PendingKind{}
		for _, n := range names {
			m[n] = scheduler.PendingWaitingForVictim
		}
		return m
	}
	full := []sc.Gang{training("train-a", "n1"), training("train-b", "n1"), training("train-c", "n2"), training("train-d", "n2")}
	serve := sc.Gang{Name: "serve", Queue: "team", Priority: 125, NonPreemptible: true, GPUs: 1}
	for _, s := range []sc.Scenario{
		{
			// Before: the second to fourth preemptor bound at once onto GPUs whose
			// victims were only being evicted, and the fifth chose the first's victims
			// again, freeing the room promised to the first.
			Name:   "a burst of 8 one-GPU services evicts two 4-GPU gangs, each once",
			Nodes:  []sc.Node{{Name: "n1", GPUs: 8}, {Name: "n2", GPUs: 8}},
			Queues: []sc.Queue{{Name: "team", Quota: -1}},
			Gangs:  append(append([]sc.Gang{}, full...), inference(8, serve)...),
			Expect: sc.Expect{
				Evicted:   []string{"train-a-0", "train-b-0"},
				Nominated: []string{"serve-0", "serve-1", "serve-2", "serve-3", "serve-4", "serve-5", "serve-6", "serve-7"},
				Pending:   waiting("serve-1", "serve-2", "serve-3", "serve-5", "serve-6", "serve-7"),
			},
			Linger: map[string]int{"n1": 2, "n2": 2},
			Cycles: 8,
			Final: &sc.Final{Running: []string{"serve-0", "serve-1", "serve-2", "serve-3", "serve-4", "serve-5", "serve-6", "serve-7", "train-c", "train-d"},
				Pending: map[string]scheduler.PendingKind{"train-a": scheduler.PendingNoFit, "train-b": scheduler.PendingNoFit}},
		},
		{
			// vLLM at 0.75 of an 80 GiB GPU needs 60 GiB free: two such engines never
			// share a GPU, whatever their 20 GiB share says.
			Name:   "a 20 GiB share with gpu_memory_utilization 0.75 books 60 GiB",
			Nodes:  []sc.Node{{Name: "n", GPUs: 1}},
			Queues: []sc.Queue{{Name: "team", Quota: -1}},
			Gangs: []sc.Gang{
				{Name: "llm-a", Queue: "team", Priority: 125, NonPreemptible: true, Share: 20 * GiB, StartFree: 0.75},
				{Name: "llm-b", Queue: "team", Priority: 125, NonPreemptible: true, Share: 20 * GiB, StartFree: 0.75},
			},
			Expect: sc.Expect{Binds: []string{"llm-a"}, Pending: map[string]scheduler.PendingKind{"llm-b": scheduler.PendingNoFit}},
		},
		{
			Name:   "an engine's booking decides what preemption frees: one 40 GiB notebook of two",
			Nodes:  []sc.Node{{Name: "n", GPUs: 1}},
			Queues: []sc.Queue{{Name: "team", Quota: -1}},
			Gangs: []sc.Gang{
				{Name: "nb-a", Queue: "team", Priority: 50, Share: 40 * GiB, On: "n"},
				{Name: "nb-b", Queue: "team", Priority: 50, Share: 40 * GiB, On: "n", StartedAgo: 60},
				{Name: "llm", Queue: "team", Priority: 125, NonPreemptible: true, Share: 10 * GiB, StartFree: 0.5},
			},
			Expect: sc.Expect{Evicted: []string{"nb-b-0"}, Nominated: []string{"llm"}},
			Cycles: 4,
			Final: &sc.Final{Running: []string{"llm", "nb-a"},
				Pending: map[string]scheduler.PendingKind{"nb-b": scheduler.PendingNoFit}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}

// TestPreemptionDecision checks the record a preemption leaves in the Plan for the log
// and the metrics: who, whom, what was freed against what was lacking, and why.
func TestPreemptionDecision(t *testing.T) {
	const GiB = sc.GiB
	snap, err := sc.Build(sc.Scenario{
		Nodes: []sc.Node{{Name: "n", GPUs: 2}},
		Gangs: []sc.Gang{
			{Name: "train", Priority: 50, GPUs: 1, On: "n"},
			{Name: "nb", Priority: 50, Share: 40 * GiB, On: "n"},
			{Name: "llm", Priority: 125, NonPreemptible: true, Share: 20 * GiB, StartFree: 0.75},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New("", scheduler.Config{Preemption: true})
	if err != nil {
		t.Fatal(err)
	}
	plan := s.Schedule(snap)
	if len(plan.Preemptions) != 1 {
		t.Fatalf("%d preemption decisions, want 1: %+v", len(plan.Preemptions), plan.Preemptions)
	}
	p := plan.Preemptions[0]
	// The 60 GiB the engine needs: the 40 GiB notebook frees 40 GiB of a GPU with 40
	// free, which is cheaper than a whole GPU.
	if p.Preemptor != "llm" || len(p.VictimGangs) != 1 || p.VictimGangs[0] != "nb" || p.Kind != "preempt" {
		t.Errorf("decision %+v, want llm preempting nb", p)
	}
	if p.NeededBytes != 60*GiB || p.ShortfallBytes != 20*GiB || p.FreedBytes != 40*GiB {
		t.Errorf("needed %d, shortfall %d, freed %d GiB; want 60, 20, 40",
			p.NeededBytes/GiB, p.ShortfallBytes/GiB, p.FreedBytes/GiB)
	}
	if p.WholeGPUs != 0 || p.SharedVictims != 1 || p.SharedBytes != 40*GiB || p.OverEviction() != 2 {
		t.Errorf("whole %d, shared %d (%d GiB), over-eviction %.2f; want 0, 1 (40), 2", p.WholeGPUs, p.SharedVictims, p.SharedBytes/GiB, p.OverEviction())
	}
	kv := fmt.Sprintln(p.KeysAndValues()...)
	for _, want := range []string{"preemptor llm", "freedBytes", "reason gang llm"} {
		if !strings.Contains(kv, want) {
			t.Errorf("log pairs %q lack %q", kv, want)
		}
	}
}
