package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// A gang blocked by a parent queue's limit: the victims that bring the parent under
// its limit may be anywhere below it, under the ordinary rules (lower priority in the
// gang's own queue; by quota or fair share in a sibling queue).
func TestParentLimitScenarios(t *testing.T) {
	dept := []sc.Queue{
		{Name: "d1", Quota: 2, Limit: 2},
		{Name: "team-a", Parent: "d1", Quota: 1},
		{Name: "team-b", Parent: "d1", Quota: 1},
	}
	for _, s := range []sc.Scenario{
		{
			Name:   "under a parent's limit, a queue within its quota reclaims from a sibling above its own",
			Nodes:  []sc.Node{{Name: "n", GPUs: 4}},
			Queues: dept,
			Gangs: []sc.Gang{
				{Name: "b1", Queue: "team-b", GPUs: 1, On: "n"},
				{Name: "b2", Queue: "team-b", GPUs: 1, On: "n", StartedAgo: 60},
				{Name: "job", Queue: "team-a", GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"b2-0"}, Nominated: []string{"job"}},
			Cycles: 5,
			Final: &sc.Final{Running: []string{"b1", "job"},
				Pending: map[string]scheduler.PendingKind{"b2": scheduler.PendingQueueLimit}},
		},
		{
			Name:   "under a parent's limit, lower-priority work of the gang's own queue is preempted",
			Nodes:  []sc.Node{{Name: "n", GPUs: 4}},
			Queues: dept,
			Gangs: []sc.Gang{
				{Name: "b1", Queue: "team-b", Priority: 10, GPUs: 1, On: "n"},
				{Name: "train", Queue: "team-a", Priority: 50, GPUs: 1, On: "n"},
				{Name: "interactive", Queue: "team-a", Priority: 75, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"train-0"}, Nominated: []string{"interactive"}},
			Cycles: 5,
			Final: &sc.Final{Running: []string{"b1", "interactive"},
				Pending: map[string]scheduler.PendingKind{"train": scheduler.PendingQueueLimit}},
		},
		{
			// b1 is within team-b's quota: lower priority does not make it a victim
			// across queues.
			Name:   "under a parent's limit, a sibling within its quota keeps its work",
			Nodes:  []sc.Node{{Name: "n", GPUs: 4}},
			Queues: dept,
			Gangs: []sc.Gang{
				{Name: "b1", Queue: "team-b", Priority: 10, GPUs: 1, On: "n"},
				{Name: "a1", Queue: "team-a", Priority: 50, GPUs: 1, On: "n"},
				{Name: "a2", Queue: "team-a", Priority: 50, GPUs: 1},
			},
			Expect: sc.Expect{Pending: map[string]scheduler.PendingKind{"a2": scheduler.PendingQueueLimit}},
		},
		{
			// Evicting d2's work would not bring d1 under its limit.
			Name:   "under a parent's limit, work outside that parent is never a victim",
			Nodes:  []sc.Node{{Name: "n", GPUs: 4}},
			Queues: append([]sc.Queue{{Name: "d2", Quota: 0}, {Name: "team-c", Parent: "d2", Quota: 0}}, dept...),
			Gangs: []sc.Gang{
				{Name: "b1", Queue: "team-b", GPUs: 1, On: "n"},
				{Name: "a1", Queue: "team-a", GPUs: 1, On: "n"},
				{Name: "c1", Queue: "team-c", GPUs: 2, On: "n"},
				{Name: "a2", Queue: "team-a", Priority: 100, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"a1-0"}, Nominated: []string{"a2"}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}
