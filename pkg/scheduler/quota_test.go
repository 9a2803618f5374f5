package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// Queues with finite quotas: the repros of issue 12, each a scenario.
func TestQuotaScenarios(t *testing.T) {
	for _, s := range []sc.Scenario{
		{
			Name:   "non-preemptible work in a queue full of its own preemptible work preempts it",
			Nodes:  []sc.Node{{Name: "a10g", GPUs: 1, Model: "NVIDIA-A10G"}},
			Queues: []sc.Queue{{Name: "team-a", Quota: 1}},
			Gangs: []sc.Gang{
				{Name: "train", Queue: "team-a", Priority: 50, GPUs: 1, On: "a10g"},
				{Name: "serve", Queue: "team-a", Priority: 125, NonPreemptible: true, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"train-0"}, Nominated: []string{"serve"}},
			Cycles: 5,
			Final: &sc.Final{Running: []string{"serve"},
				Pending: map[string]scheduler.PendingKind{"train": scheduler.PendingNoFit}},
		},
		{
			Name:  "the non-preemptible quota check walks every ancestor",
			Nodes: []sc.Node{{Name: "n", GPUs: 4}},
			Queues: []sc.Queue{
				{Name: "d1", Quota: 1}, {Name: "d2", Quota: 1},
				{Name: "team-a", Parent: "d1", Quota: 2},
			},
			Gangs: []sc.Gang{
				{Name: "serve", Queue: "team-a", Priority: 125, NonPreemptible: true, GPUs: 2},
			},
			Expect: sc.Expect{Pending: map[string]scheduler.PendingKind{"serve": scheduler.PendingQueueQuota}},
		},
		{
			Name:  "quota is guaranteed: a gang above its queue's quota is reclaimed whole",
			Nodes: []sc.Node{{Name: "n", GPUs: 2}},
			Queues: []sc.Queue{
				{Name: "team-a", Quota: 1}, {Name: "team-b", Quota: 1},
			},
			Gangs: []sc.Gang{
				{Name: "train", Queue: "team-a", Priority: 50, GPUs: 2, On: "n"},
				{Name: "job", Queue: "team-b", Priority: 50, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"train-0"}, Nominated: []string{"job"}},
			Cycles: 6,
			Final: &sc.Final{Running: []string{"job"},
				Pending: map[string]scheduler.PendingKind{"train": scheduler.PendingNoFit}},
		},
		{
			Name:  "quota is guaranteed across two nodes",
			Nodes: []sc.Node{{Name: "n1", GPUs: 1}, {Name: "n2", GPUs: 1}},
			Queues: []sc.Queue{
				{Name: "team-a", Quota: 1}, {Name: "team-b", Quota: 1},
			},
			Gangs: []sc.Gang{
				{Name: "train", Queue: "team-a", Priority: 50, Pods: 2, GPUs: 1, OnNodes: []string{"n1", "n2"}},
				{Name: "job", Queue: "team-b", Priority: 50, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"train-0", "train-1"}, Nominated: []string{"job"}},
			Cycles: 6,
			Final:  &sc.Final{Running: []string{"job"}},
		},
		{
			Name:   "a gang at its queue's limit preempts lower-priority work of its own queue",
			Nodes:  []sc.Node{{Name: "n", GPUs: 2}},
			Queues: []sc.Queue{{Name: "team-a", Quota: 1, Limit: 1}},
			Gangs: []sc.Gang{
				{Name: "train", Queue: "team-a", Priority: 50, GPUs: 1, On: "n"},
				{Name: "interactive", Queue: "team-a", Priority: 75, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"train-0"}, Nominated: []string{"interactive"}},
			Cycles: 5,
			Final: &sc.Final{Running: []string{"interactive"},
				Pending: map[string]scheduler.PendingKind{"train": scheduler.PendingQueueLimit}},
		},
		{
			Name:   "a gang at its queue's limit does not preempt work of equal priority",
			Nodes:  []sc.Node{{Name: "n", GPUs: 2}},
			Queues: []sc.Queue{{Name: "team-a", Quota: 1, Limit: 1}},
			Gangs: []sc.Gang{
				{Name: "train", Queue: "team-a", Priority: 50, GPUs: 1, On: "n"},
				{Name: "train-2", Queue: "team-a", Priority: 50, GPUs: 1},
			},
			Expect: sc.Expect{Pending: map[string]scheduler.PendingKind{"train-2": scheduler.PendingQueueLimit}},
		},
		{
			Name:  "what a reclaim frees is kept for the gang it was freed for",
			Nodes: []sc.Node{{Name: "n", GPUs: 2}},
			Queues: []sc.Queue{
				{Name: "b-team", Quota: 1}, {Name: "x-busy", Quota: 0}, {Name: "a-late", Quota: 0},
			},
			Gangs: []sc.Gang{
				{Name: "x1", Queue: "x-busy", GPUs: 1, On: "n"},
				{Name: "x2", Queue: "x-busy", GPUs: 1, On: "n", StartedAgo: 60},
				{Name: "b-job", Queue: "b-team", GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"x2-0"}, Nominated: []string{"b-job"}},
			Arrive: map[int][]sc.Gang{2: {{Name: "a-job", Queue: "a-late", GPUs: 1}}},
			Cycles: 6,
			Final:  &sc.Final{Running: []string{"b-job", "x1"}},
		},
		{
			// x2's pod is still terminating in cycle 2, when a-late arrives; the GPU x1
			// freed is booked for b-gang, which binds whole once x2 has gone.
			Name:  "room kept for a gang while part of its victims still terminate",
			Nodes: []sc.Node{{Name: "n1", GPUs: 1}, {Name: "n2", GPUs: 1}},
			Queues: []sc.Queue{
				{Name: "b-team", Quota: 2}, {Name: "x-busy", Quota: 0}, {Name: "a-late", Quota: 0},
			},
			Gangs: []sc.Gang{
				{Name: "x1", Queue: "x-busy", GPUs: 1, On: "n1"},
				{Name: "x2", Queue: "x-busy", GPUs: 1, On: "n2"},
				{Name: "b-gang", Queue: "b-team", Pods: 2, GPUs: 1},
			},
			Linger: map[string]int{"n2": 1},
			Expect: sc.Expect{Evicted: []string{"x1-0", "x2-0"}, Nominated: []string{"b-gang"}},
			Arrive: map[int][]sc.Gang{2: {{Name: "a-job", Queue: "a-late", GPUs: 1}}},
			Cycles: 6,
			Final:  &sc.Final{Running: []string{"b-gang"}},
		},
		{
			Name:  "elastic members count toward the guarantee",
			Nodes: []sc.Node{{Name: "n", GPUs: 4}},
			Queues: []sc.Queue{
				{Name: "ray-team", Quota: 2}, {Name: "batch", Quota: 2},
			},
			Gangs: []sc.Gang{
				{Name: "ray", Queue: "ray-team", Pods: 2, Min: 1, Bound: 1, GPUs: 1, On: "n"},
				{Name: "batch-a", Queue: "batch", GPUs: 1, On: "n"},
				{Name: "batch-b", Queue: "batch", GPUs: 1, On: "n"},
				{Name: "batch-c", Queue: "batch", GPUs: 1, On: "n", StartedAgo: 60},
			},
			Expect: sc.Expect{Evicted: []string{"batch-c-0"}, Nominated: []string{"ray+1"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"batch-a", "batch-b", "ray"}},
		},
		{
			Name:         "pods with no queue are charged to the default queue",
			Nodes:        []sc.Node{{Name: "n", GPUs: 4}},
			Queues:       []sc.Queue{{Name: "default", Quota: 1, Limit: 1}},
			DefaultQueue: "default",
			Gangs: []sc.Gang{
				{Name: "first", GPUs: 1, On: "n"},
				{Name: "second", GPUs: 1},
			},
			Expect: sc.Expect{Pending: map[string]scheduler.PendingKind{"second": scheduler.PendingQueueLimit}},
		},
		{
			// defaultQueue.create=false and the admin has not created it yet (or deleted
			// it): work with no queue waits instead of running outside every quota.
			Name:         "pods with no queue wait while the default queue does not exist",
			Nodes:        []sc.Node{{Name: "n", GPUs: 4}},
			Queues:       []sc.Queue{{Name: "team", Quota: 4}},
			DefaultQueue: "default",
			Gangs:        []sc.Gang{{Name: "unlabelled", GPUs: 1}, {Name: "labelled", Queue: "team", GPUs: 1}},
			Expect:       sc.Expect{Binds: []string{"labelled"}, Pending: map[string]scheduler.PendingKind{"unlabelled": scheduler.PendingQueueNotFound}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}
