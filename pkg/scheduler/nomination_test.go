package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// Nominations last while they serve, and end when the gang can use neither the room
// kept for it nor any other.
func TestNominationScenarios(t *testing.T) {
	for _, s := range []sc.Scenario{
		{
			// The GPU freed for nom on n1 went to squatter (bound before the nomination
			// reached the cache, say). nom no longer goes first: urgent, of higher
			// priority, preempts low, and nom waits.
			Name:   "a nomination whose room was taken ends, and the gang takes its turn in queue order",
			Nodes:  []sc.Node{{Name: "n1", GPUs: 1}, {Name: "n2", GPUs: 1}},
			Queues: []sc.Queue{{Name: "qa", Quota: 2}},
			Gangs: []sc.Gang{
				{Name: "squatter", Queue: "qa", Priority: 1000, NonPreemptible: true, GPUs: 1, On: "n1"},
				{Name: "low", Queue: "qa", Priority: 5, GPUs: 1, On: "n2"},
				{Name: "nom", Queue: "qa", Priority: 10, GPUs: 1, NominatedTo: "n1"},
				{Name: "urgent", Queue: "qa", Priority: 100, GPUs: 1},
			},
			Expect: sc.Expect{
				Evicted: []string{"low-0"}, Nominated: []string{"urgent"}, Withdrawn: []string{"nom"},
				Pending: map[string]scheduler.PendingKind{"nom": scheduler.PendingNoFit},
			},
			Cycles: 5,
			Final: &sc.Final{Running: []string{"squatter", "urgent"},
				Pending: map[string]scheduler.PendingKind{"low": scheduler.PendingNoFit, "nom": scheduler.PendingNoFit}},
		},
		{
			Name:   "a nominated gang its queue's quota now refuses loses its nomination",
			Nodes:  []sc.Node{{Name: "n", GPUs: 2}},
			Queues: []sc.Queue{{Name: "team-a", Quota: 1}},
			Gangs: []sc.Gang{
				{Name: "held", Queue: "team-a", Priority: 125, NonPreemptible: true, GPUs: 1, On: "n"},
				{Name: "serve", Queue: "team-a", Priority: 125, NonPreemptible: true, GPUs: 1, NominatedTo: "n"},
			},
			Expect: sc.Expect{Withdrawn: []string{"serve"},
				Pending: map[string]scheduler.PendingKind{"serve": scheduler.PendingQueueQuota}},
		},
		{
			Name:   "a nominated member above a gang's minimum that no longer fits loses its nomination",
			Nodes:  []sc.Node{{Name: "n", GPUs: 2}},
			Queues: []sc.Queue{{Name: "ray-team", Quota: 2}, {Name: "serving", Quota: 1}},
			Gangs: []sc.Gang{
				{Name: "ray", Queue: "ray-team", Pods: 2, Min: 1, Bound: 1, GPUs: 1, On: "n", NominatedTo: "n"},
				{Name: "serve", Queue: "serving", NonPreemptible: true, GPUs: 1, On: "n"},
			},
			// Withdrawn, the member waits like any other, with a reason.
			Expect: sc.Expect{Withdrawn: []string{"ray"}, Pending: map[string]scheduler.PendingKind{"ray": scheduler.PendingNoFit}},
		},
		{
			// train lingers a cycle: interactive's queue is still at its limit while it
			// goes, and the nomination holds until interactive binds.
			Name:   "a nomination at the queue's limit holds while its victim terminates",
			Nodes:  []sc.Node{{Name: "n", GPUs: 2}},
			Queues: []sc.Queue{{Name: "team-a", Quota: 1, Limit: 1}},
			Gangs: []sc.Gang{
				{Name: "train", Queue: "team-a", Priority: 50, GPUs: 1, On: "n"},
				{Name: "interactive", Queue: "team-a", Priority: 75, GPUs: 1},
			},
			Linger: map[string]int{"n": 1},
			Expect: sc.Expect{Evicted: []string{"train-0"}, Nominated: []string{"interactive"}},
			Later: map[int]sc.Expect{
				2: {Pending: map[string]scheduler.PendingKind{"interactive": scheduler.PendingWaitingForVictim}},
				3: {Binds: []string{"interactive"}, Pending: map[string]scheduler.PendingKind{"train": scheduler.PendingQueueLimit}},
			},
			Cycles: 6,
			Final: &sc.Final{Running: []string{"interactive"},
				Pending: map[string]scheduler.PendingKind{"train": scheduler.PendingQueueLimit}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}
