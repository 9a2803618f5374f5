package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// Scenario tests of a peer scheduler, Apache YuniKorn core
// (pkg/scheduler/objects/preemption_test.go), written again as Gantry scenarios to
// check Gantry's queue semantics on cases this project did not write. How they
// translate:
//
//   - YuniKorn's resource "first" (or "vcores") is GPUs, one for one; "pods" and
//     "mem" are left out (Gantry's pods ask for 1 CPU and 1 GiB, far below the nodes).
//   - A queue's guaranteed resource is its GPU quota, its max its GPU limit; a queue
//     with neither has quota 0 and no limit. YuniKorn's root queue is the cluster:
//     "root.parent.child1" is queue child1 under the top-level queue parent.
//   - Each allocation is a gang of one pod named after it ("alloc1-0"), so that it can
//     be preempted alone, as an allocation can; an older allocation started earlier.
//   - YuniKorn's tests hand the preemptor a headroom and mock the node predicates;
//     Gantry computes both from the snapshot. A test whose headroom stands for a
//     parent's max that the setup does not state gets that max as a limit.
//
// Where Gantry decides otherwise on purpose, Differs says why and the expectation is
// Gantry's.
const yk = "yunikorn-core pkg/scheduler/objects/preemption_test.go: "

// ykQueues is the two-level hierarchy most of the tests share: parent, and its
// children child1..child3 with the given quotas (guaranteed); the parent's limit (max)
// and quota, and every child's limit (0 for none), as given.
func ykQueues(parentQuota, parentLimit, childLimit float64, childQuotas ...float64) []sc.Queue {
	qs := []sc.Queue{{Name: "parent", Quota: parentQuota, Limit: parentLimit}}
	for i, q := range childQuotas {
		qs = append(qs, sc.Queue{Name: "child" + string(rune('1'+i)), Parent: "parent", Quota: q, Limit: childLimit})
	}
	return qs
}

func TestYuniKornPreemption(t *testing.T) {
	for _, s := range []sc.Scenario{
		{
			Name:   "on a full node, one of two allocations of a queue above its guarantee goes",
			Source: yk + "TestTryPreemptionOnNode",
			Nodes:  []sc.Node{{Name: "node1", GPUs: 5}, {Name: "node2", GPUs: 5}},
			Queues: ykQueues(10, 20, 10, 5, 5),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child1", GPUs: 5, On: "node1"},
				{Name: "alloc2", Queue: "child1", GPUs: 5, On: "node2", StartedAgo: 60},
				{Name: "alloc3", Queue: "child2", GPUs: 5},
			},
			Expect: sc.Expect{Evicted: []string{"alloc2-0"}, Nominated: []string{"alloc3"}},
			Cycles: 5,
			Final: &sc.Final{Running: []string{"alloc1", "alloc3"},
				Pending: map[string]scheduler.PendingKind{"alloc2": scheduler.PendingNoFit}},
		},
		{
			Name:   "an ask larger than any node preempts nothing",
			Source: yk + "TestTryPreemption_NodeWithCapacityLesserThanAsk",
			Nodes:  []sc.Node{{Name: "node1", GPUs: 5}, {Name: "node2", GPUs: 5}},
			Queues: ykQueues(10, 20, 10, 5, 6),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child1", GPUs: 5, On: "node1"},
				{Name: "alloc2", Queue: "child1", GPUs: 5, On: "node2", StartedAgo: 60},
				{Name: "alloc3", Queue: "child2", GPUs: 6},
			},
			Expect: sc.Expect{Pending: map[string]scheduler.PendingKind{"alloc3": scheduler.PendingNoFit}},
		},
		{
			Name:   "a queue under its guarantee takes from a sibling with none, its parent over its own",
			Source: yk + "TestTryPreemptionOnNodeWithOGParentAndUGPreemptor",
			Nodes:  []sc.Node{{Name: "node1", GPUs: 3}, {Name: "node2", GPUs: 3}},
			Queues: []sc.Queue{
				{Name: "parent", Quota: 2, Limit: 20},
				{Name: "child1", Parent: "parent"},
				{Name: "child2", Parent: "parent", Quota: 1, Limit: 10},
			},
			Gangs: []sc.Gang{
				// allocN started N minutes ago; odd ones on node2.
				{Name: "alloc1", Queue: "child1", GPUs: 1, On: "node2", StartedAgo: 60},
				{Name: "alloc2", Queue: "child1", GPUs: 1, On: "node1", StartedAgo: 120},
				{Name: "alloc3", Queue: "child1", GPUs: 1, On: "node2", StartedAgo: 180},
				{Name: "alloc4", Queue: "child1", GPUs: 1, On: "node1", StartedAgo: 240},
				{Name: "alloc5", Queue: "child1", GPUs: 1, On: "node2", StartedAgo: 300},
				{Name: "alloc6", Queue: "child1", GPUs: 1, On: "node1", StartedAgo: 360},
				{Name: "alloc7", Queue: "child2", GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"alloc1-0"}, Nominated: []string{"alloc7"}},
			Cycles: 5,
			Final: &sc.Final{Running: []string{"alloc2", "alloc3", "alloc4", "alloc5", "alloc6", "alloc7"},
				Pending: map[string]scheduler.PendingKind{"alloc1": scheduler.PendingNoFit}},
		},
		{
			Name:   "at the parent's max, a child under its guarantee takes from its sibling",
			Source: yk + "TestTryPreemptionOnQueue/both prefilter and filter passes with empty feasible nodes",
			Nodes:  []sc.Node{{Name: "node1", GPUs: 10}, {Name: "node2", GPUs: 10}},
			Queues: ykQueues(0, 10, 0, 5, 5),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child1", GPUs: 5, On: "node1"},
				{Name: "alloc2", Queue: "child1", GPUs: 5, On: "node2", StartedAgo: 60},
				{Name: "alloc3", Queue: "child2", GPUs: 5},
			},
			Expect: sc.Expect{Evicted: []string{"alloc2-0"}, Nominated: []string{"alloc3"}},
			Cycles: 5,
			Final: &sc.Final{Running: []string{"alloc1", "alloc3"},
				Pending: map[string]scheduler.PendingKind{"alloc2": scheduler.PendingQueueLimit}},
		},
		{
			Name:    "under the parent's max, victims smaller than the ask still make room",
			Source:  yk + "TestTryPreemption_VictimsAvailable_InsufficientResource",
			Differs: "the source hands the preemptor a headroom of 0 and requires the victims to free the whole ask; Gantry computes the headroom (max 8, 4 in use) and evicts one 2-GPU allocation, which brings the parent to 7 of 8 with the ask",
			Nodes:   []sc.Node{{Name: "node1", GPUs: 10}, {Name: "node2", GPUs: 10}},
			Queues:  ykQueues(0, 8, 0, 0, 5),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child1", GPUs: 2, On: "node1"},
				{Name: "alloc2", Queue: "child1", GPUs: 2, On: "node2", StartedAgo: 60},
				{Name: "alloc3", Queue: "child2", GPUs: 5},
			},
			Expect: sc.Expect{Evicted: []string{"alloc2-0"}, Nominated: []string{"alloc3"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"alloc1", "alloc3"}},
		},
		{
			Name:    "under the parent's max, on nodes almost full, both victims go",
			Source:  yk + "TestTryPreemption_VictimsOnDifferentNodes_InsufficientResource",
			Differs: "the source refuses because the victims (4) free less than the ask (5); Gantry counts the free room as well: with both gone the parent holds 5 of its max 6 and node1 has 5 free",
			Nodes:   []sc.Node{{Name: "node1", GPUs: 5}, {Name: "node2", GPUs: 5}},
			Queues:  ykQueues(0, 6, 0, 0, 5),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child1", GPUs: 2, On: "node1"},
				{Name: "alloc2", Queue: "child1", GPUs: 2, On: "node2", StartedAgo: 60},
				{Name: "alloc3", Queue: "child2", GPUs: 5},
			},
			Expect: sc.Expect{Evicted: []string{"alloc1-0", "alloc2-0"}, Nominated: []string{"alloc3"}},
		},
		{
			Name:    "victims on two nodes, the ask fits on one",
			Source:  yk + "TestTryPreemption_VictimsAvailableOnDifferentNodes",
			Differs: "the source hands the preemptor a headroom of 10 and so leaves the parent's max of 6 out; Gantry keeps the parent within it, which takes both allocations (6 in use, 5 asked for)",
			Nodes:   []sc.Node{{Name: "node1", GPUs: 5}, {Name: "node2", GPUs: 4}},
			Queues:  ykQueues(0, 6, 0, 0, 5),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child1", GPUs: 4, On: "node1", StartedAgo: 120},
				{Name: "alloc2", Queue: "child1", GPUs: 2, On: "node2", StartedAgo: 60},
				{Name: "alloc3", Queue: "child2", GPUs: 5},
			},
			Expect: sc.Expect{Evicted: []string{"alloc1-0", "alloc2-0"}, Nominated: []string{"alloc3"}},
		},
		{
			Name:   "at the parent's max, two allocations of two queues without guarantee go",
			Source: yk + "TestTryPreemption_OnQueue_VictimsOnDifferentNodes",
			Nodes:  []sc.Node{{Name: "node1", GPUs: 30}, {Name: "node2", GPUs: 30}},
			Queues: ykQueues(0, 18, 0, 0, 15, 0),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child1", GPUs: 5, On: "node1", StartedAgo: 120},
				{Name: "alloc2", Queue: "child1", GPUs: 5, On: "node2", StartedAgo: 60},
				{Name: "alloc4", Queue: "child3", GPUs: 5, On: "node2", StartedAgo: 30},
				{Name: "alloc3", Queue: "child2", GPUs: 10},
			},
			Expect: sc.Expect{Evicted: []string{"alloc2-0", "alloc4-0"}, Nominated: []string{"alloc3"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"alloc1", "alloc3"}},
		},
		{
			Name:   "at the parent's max, the higher-priority allocation is spared",
			Source: yk + "TestTryPreemption_OnQueue_VictimsAvailable_LowerPriority",
			Nodes:  []sc.Node{{Name: "node1", GPUs: 30}, {Name: "node2", GPUs: 30}},
			Queues: ykQueues(0, 18, 0, 0, 15, 0),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child1", GPUs: 5, On: "node1", StartedAgo: 120},
				{Name: "alloc2", Queue: "child1", GPUs: 5, On: "node1", StartedAgo: 60},
				{Name: "alloc4", Queue: "child3", Priority: 1000, GPUs: 5, On: "node2", StartedAgo: 30},
				{Name: "alloc3", Queue: "child2", GPUs: 10},
			},
			Expect: sc.Expect{Evicted: []string{"alloc1-0", "alloc2-0"}, Nominated: []string{"alloc3"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"alloc3", "alloc4"}},
		},
		{
			Name:   "a guarantee set on the preemptor's parent only, at the grandparent's max",
			Source: yk + "TestTryPreemption_AskResTypesDifferent_GuaranteedSetOnPreemptorSide",
			Nodes:  []sc.Node{{Name: "node1", GPUs: 3}},
			Queues: ykThreeLevels(),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child2", GPUs: 1, On: "node1", StartedAgo: 3600},
				{Name: "alloc2", Queue: "child2", GPUs: 1, On: "node1", StartedAgo: 1},
				{Name: "alloc3", Queue: "child1", GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"alloc2-0"}, Nominated: []string{"alloc3"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"alloc1", "alloc3"}},
		},
		{
			Name:   "a guarantee set on the preemptor's parent only, on a full node",
			Source: yk + "TestTryPreemption_OnNode_AskResTypesDifferent_GuaranteedSetOnPreemptorSide",
			Nodes:  []sc.Node{{Name: "node1", GPUs: 2}},
			Queues: ykThreeLevels(),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child2", GPUs: 1, On: "node1", StartedAgo: 60},
				{Name: "alloc2", Queue: "child2", GPUs: 1, On: "node1", StartedAgo: 1},
				{Name: "alloc3", Queue: "child1", GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"alloc2-0"}, Nominated: []string{"alloc3"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"alloc1", "alloc3"}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}

// ykThreeLevels is parent (max 2) with parent1 (guaranteed 1; child1) and parent2
// (nothing set; child2, child3).
func ykThreeLevels() []sc.Queue {
	return []sc.Queue{
		{Name: "parent", Limit: 2},
		{Name: "parent1", Parent: "parent", Quota: 1},
		{Name: "parent2", Parent: "parent"},
		{Name: "child1", Parent: "parent1"},
		{Name: "child2", Parent: "parent2"},
		{Name: "child3", Parent: "parent2"},
	}
}

// TestCheckPreemptionQueueGuaranteesWithNoGuaranteedResources: child1 (guaranteed 5)
// runs two allocations of 5; child2 asks for 5. The source hands the preemptor a
// headroom of 0; here the parent's max of 10 stands for it.
func TestYuniKornGuaranteesWithNoGuaranteedResources(t *testing.T) {
	for _, c := range []struct {
		name                     string
		parentQuota, child2Quota float64
		preempts                 bool
		differs                  string
	}{
		{name: "NoGuaranteed"},
		{name: "ParentGuaranteed", parentQuota: 10,
			differs: "a parent's quota guarantees its subtree against other subtrees; between its children only their own quotas count, so child2, with none, reclaims only by fair share, and its ask of 5 would take it past its fair share of 2.5 (half the parent's 5 GPUs beyond child1's quota)"},
		{name: "ChildGuaranteed", child2Quota: 5, preempts: true},
		{name: "BothGuaranteed", parentQuota: 10, child2Quota: 5, preempts: true},
	} {
		s := sc.Scenario{
			Name:    c.name,
			Source:  yk + "TestCheckPreemptionQueueGuaranteesWithNoGuaranteedResources/" + c.name,
			Differs: c.differs,
			Nodes:   []sc.Node{{Name: "node1", GPUs: 20}, {Name: "node2", GPUs: 20}},
			Queues:  ykQueues(c.parentQuota, 10, 0, 5, c.child2Quota),
			Gangs: []sc.Gang{
				{Name: "alloc1", Queue: "child1", GPUs: 5, On: "node1", StartedAgo: 3600},
				{Name: "alloc2", Queue: "child1", GPUs: 5, On: "node2", StartedAgo: 60},
				{Name: "alloc3", Queue: "child2", GPUs: 5},
			},
			Expect: sc.Expect{Pending: map[string]scheduler.PendingKind{"alloc3": scheduler.PendingQueueLimit}},
		}
		if c.preempts {
			s.Expect = sc.Expect{Evicted: []string{"alloc2-0"}, Nominated: []string{"alloc3"}}
		}
		t.Run(c.name, func(t *testing.T) { sc.Run(t, s) })
	}
}
