package scheduler_test

import (
	"fmt"
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
