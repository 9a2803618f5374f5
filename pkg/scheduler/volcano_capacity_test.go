package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// Scenario tests of Volcano's capacity plugin (pkg/scheduler/plugins/capacity/
// capacity_test.go), the Volcano queue model closest to KAI's: per-resource deserved
// amounts that other queues may borrow and must give back, and a capability. Written
// again as Gantry scenarios. How they translate, beyond volcano_test.go's rules:
//
//   - deserved is the GPU quota, capability the GPU limit; Volcano's guarantee (never
//     lent) has no Gantry counterpart and is read as quota where a test sets it.
//   - The tests' CPUs (or nvidia.com/a100, nvidia.com/gpu) are GPUs, one for one; the
//     memory dimension is left out, since Gantry judges reclaim on GPUs.
//   - Volcano's "root" queue is the cluster: its children are top-level queues here.
//   - A PodGroup is a gang named after it; its pods are "<pg>-<i>" in the order the
//     test lists them, non-preemptible ones first (the gang's minimum).
//
// Not ported: the cases about the enqueue action alone (TestEnqueueAndAllocatable,
// OnSessionOpenWithHierarchy cases 13 to 16: Gantry has no enqueue phase), and those
// about inheriting an unset memory or scalar capability from the parent (case 5, 9:
// an unset Gantry limit is -1, and the parent's limit applies to it anyway).
const (
	vcCap  = "volcano pkg/scheduler/plugins/capacity/capacity_test.go: Test_capacityPlugin_OnSessionOpenWithoutHierarchy/"
	vcCapH = "volcano pkg/scheduler/plugins/capacity/capacity_test.go: Test_capacityPlugin_OnSessionOpenWithHierarchy/"
)

func TestVolcanoCapacity(t *testing.T) {
	worker := map[string]string{"selector": "worker"}
	twoNodes := []sc.Node{{Name: "n1", GPUs: 2, Labels: worker}, {Name: "n2", GPUs: 2}}
	for _, s := range []sc.Scenario{
		{
			Name: "a pod binds while its queue is within its capability", Source: vcCap + "case0: Pod allocatable when queue has not exceed capability",
			Nodes: twoNodes, Queues: []sc.Queue{{Name: "q1", Limit: 2}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", GPUs: 1, On: "n1"},
				{Name: "pg2", Queue: "q1", GPUs: 1, NodeSelector: worker},
			},
			Expect: sc.Expect{Binds: []string{"pg2"}, Placed: map[string][]string{"pg2": {"n1"}}},
		},
		{
			Name: "a pod waits when it would take its queue past its capability", Source: vcCap + "case1: Pod not allocatable when queue exceed queue capability",
			Nodes: twoNodes, Queues: []sc.Queue{{Name: "q2", Limit: 1.5}},
			Gangs: []sc.Gang{
				{Name: "pg3", Queue: "q2", GPUs: 1, On: "n1"},
				{Name: "pg4", Queue: "q2", GPUs: 1},
			},
			Expect: sc.Expect{Pending: pending("pg4", string(scheduler.PendingQueueLimit))},
		},
		{
			Name: "a queue below its deserved reclaims from another queue", Source: vcCap + "case2: Can reclaim from other queues when allocated < deserved",
			Nodes: twoNodes, Queues: []sc.Queue{{Name: "q3", Quota: 2}, {Name: "q4", Quota: 2}},
			Gangs: []sc.Gang{
				{Name: "pg5", Queue: "q3", Pods: 2, Min: 1, NonPreemptiblePods: []int{0}, GPUs: 2, OnNodes: []string{"n1", "n2"}},
				{Name: "pg6", Queue: "q4", GPUs: 2},
			},
			Expect: sc.Expect{Evicted: []string{"pg5-1"}, Nominated: []string{"pg6"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"pg5", "pg6"}},
		},
		{
			Name:   "a queue over its CPU deserved still reclaims GPUs it is owed",
			Source: vcCap + "case3: CPU & Memory are overused, scalar resource is not overused, but candidate pod has not request CPU & Memory, reclaim should happen",
			Nodes: []sc.Node{
				{Name: "n3", GPUs: 10, CPU: 2000, Memory: 4 * sc.GiB, Labels: worker},
				{Name: "n4", GPUs: 10, CPU: 2000, Memory: 4 * sc.GiB},
			},
			Queues: []sc.Queue{
				{Name: "q5", Quota: 10, CPU: &model.QueueResource{Quota: 2000, Limit: model.Unlimited, OverQuotaWeight: 1}},
				{Name: "q6", Quota: 10, CPU: &model.QueueResource{Quota: 2000, Limit: model.Unlimited, OverQuotaWeight: 1}},
			},
			Gangs: []sc.Gang{
				{Name: "pg7", Queue: "q5", Pods: 2, Min: 1, NonPreemptiblePods: []int{0}, GPUs: 10, BestEffort: true, OnNodes: []string{"n3", "n4"}},
				{Name: "pg8", Queue: "q6", Pods: 2, Min: 1, CPU: 2000, Memory: 4 * sc.GiB, OnNodes: []string{"n3", "n4"}},
				{Name: "pg9", Queue: "q6", GPUs: 10, BestEffort: true},
			},
			Expect: sc.Expect{Evicted: []string{"pg7-1"}, Nominated: []string{"pg9"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"pg7", "pg8", "pg9"}},
		},
		{
			Name: "queues are served in the order of their priority", Source: vcCap + "case4: Pods are assigned according to the order of Queue Priority in which PGs are placed",
			Nodes: []sc.Node{{Name: "n5", GPUs: 2}, {Name: "n6", GPUs: 2}},
			Queues: []sc.Queue{
				{Name: "q7", Priority: 5, Limit: 2}, {Name: "q8", Priority: 1, Limit: 2}, {Name: "q9", Priority: 10, Limit: 2},
			},
			Gangs: []sc.Gang{
				{Name: "pg10", Queue: "q7", GPUs: 2, On: "n5"},
				{Name: "pg11", Queue: "q8", GPUs: 2},
				{Name: "pg12", Queue: "q9", GPUs: 2},
			},
			Expect: sc.Expect{Binds: []string{"pg12"}, Placed: map[string][]string{"pg12": {"n6"}},
				Pending: pending("pg11", noFit)},
		},
		{
			Name: "a queue that stays within its deserved reclaims", Source: vcCap + "case5: Can reclaim from other queues when allocated + req <= deserved on one dimension",
			Nodes: []sc.Node{{Name: "n1", GPUs: 2}}, Queues: []sc.Queue{{Name: "q10", Quota: 2, Limit: 4}, {Name: "q11", Quota: 0, Limit: 2}},
			Gangs: []sc.Gang{
				{Name: "pg16", Queue: "q10", GPUs: 1, On: "n1"},
				{Name: "pg17", Queue: "q10", GPUs: 1},
				{Name: "pg18", Queue: "q11", GPUs: 1, On: "n1"},
			},
			Expect: sc.Expect{Evicted: []string{"pg18-0"}, Nominated: []string{"pg17"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"pg16", "pg17"}},
		},
		{
			Name: "a queue that would pass its deserved does not reclaim", Source: vcCap + "case6: Can not reclaim from other queues when allocated + req > deserved",
			Nodes: []sc.Node{{Name: "n1", GPUs: 2}}, Queues: []sc.Queue{{Name: "q12", Quota: 1, Limit: 4}, {Name: "q13", Quota: 0, Limit: 2}},
			Gangs: []sc.Gang{
				{Name: "pg19", Queue: "q12", GPUs: 1, On: "n1"},
				{Name: "pg20", Queue: "q12", GPUs: 1},
				{Name: "pg21", Queue: "q13", GPUs: 1, On: "n1"},
			},
			Expect: sc.Expect{Pending: pending("pg20", noFit)},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}

func TestVolcanoCapacityHierarchy(t *testing.T) {
	n1 := []sc.Node{{Name: "n1", GPUs: 8}}
	tree1 := []sc.Queue{
		{Name: "q1", Limit: 4}, {Name: "q2", Limit: 4},
		{Name: "q11", Parent: "q1", Limit: 1}, {Name: "q12", Parent: "q1", Limit: 3},
	}
	tree3 := []sc.Queue{
		{Name: "q3", Quota: 4, Limit: 4}, {Name: "q4", Quota: 2, Limit: 4},
		{Name: "q31", Parent: "q3", Quota: 2, Limit: 4}, {Name: "q32", Parent: "q3", Quota: 2, Limit: 4},
		{Name: "q33", Parent: "q3", Quota: 0, Limit: 4},
	}
	for _, s := range []sc.Scenario{
		{
			Name: "a pod of a leaf queue binds", Source: vcCapH + "case0: Pod allocatable when queue is leaf queue",
			Nodes: n1, Queues: tree1,
			Gangs:  []sc.Gang{{Name: "pg1", Queue: "q11", GPUs: 1}},
			Expect: sc.Expect{Binds: []string{"pg1"}},
		},
		{
			Name: "a pod of a parent queue waits", Source: vcCapH + "case1: Pod not allocatable when queue is not leaf queue",
			Nodes: n1, Queues: tree1,
			Gangs:  []sc.Gang{{Name: "pg2", Queue: "q1", GPUs: 1}},
			Expect: sc.Expect{Pending: pending("pg2", string(scheduler.PendingQueueNotLeaf))},
		},
		{
			Name: "a gang within its queue's capability binds whole", Source: vcCapH + "case2: Pod allocatable when queue has not exceed capability",
			Nodes: n1, Queues: tree3,
			Gangs:  []sc.Gang{{Name: "pg3", Queue: "q31", Pods: 2, GPUs: 2}},
			Expect: sc.Expect{Binds: []string{"pg3"}, Placed: map[string][]string{"pg3": {"n1", "n1"}}},
		},
		{
			Name: "a child below its deserved reclaims from its sibling, not from another parent's child", Source: vcCapH + "case3: Can reclaim from other queues when allocated < deserved",
			Nodes: n1, Queues: tree3,
			Gangs: []sc.Gang{
				{Name: "pg4", Queue: "q4", GPUs: 4, On: "n1"},
				{Name: "pg5", Queue: "q31", Pods: 2, Min: 1, NonPreemptiblePods: []int{0}, GPUs: 2, On: "n1"},
				{Name: "pg6", Queue: "q32", GPUs: 2},
			},
			Expect: sc.Expect{Evicted: []string{"pg5-1"}, Nominated: []string{"pg6"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"pg4", "pg5", "pg6"}},
		},
		{
			Name: "a pod waits when an ancestor is at its capability", Source: vcCapH + "case4: Pod is not allocatable when ancestor queue's real capability not enough",
			Nodes: n1, Queues: tree3,
			Gangs: []sc.Gang{
				{Name: "pg5", Queue: "q31", NonPreemptible: true, GPUs: 2, On: "n1"},
				{Name: "pg7", Queue: "q32", GPUs: 2, On: "n1"},
				{Name: "pg8", Queue: "q33", GPUs: 3},
			},
			Expect: sc.Expect{Pending: pending("pg8", string(scheduler.PendingQueueLimit))},
		},
		{
			Name: "children without a capability share their parent's", Source: vcCapH + "case6: podgroup can't be enqueued when any ancestor queue's capability is not enough",
			Nodes: n1, Queues: []sc.Queue{{Name: "q6", Limit: 2}, {Name: "q61", Parent: "q6"}, {Name: "q62", Parent: "q6"}},
			Gangs: []sc.Gang{
				{Name: "pg10", Queue: "q61", GPUs: 2},
				{Name: "pg11", Queue: "q62", GPUs: 2},
			},
			Expect: sc.Expect{Binds: []string{"pg10"}, Pending: pending("pg11", string(scheduler.PendingQueueLimit))},
		},
		{
			Name: "children whose guarantees add up past their parent's capability", Source: vcCapH + "case7: the sum of sub queue 71 and 72's guarantee exceeds the capacity of queue7, but should not panic",
			Nodes: n1, Queues: []sc.Queue{{Name: "q7", Limit: 6}, {Name: "q71", Parent: "q7", Quota: 4, Limit: 6}, {Name: "q72", Parent: "q7", Quota: 4, Limit: 6}},
		},
		{
			Name: "a GPU deserved on every level admits a GPU pod", Source: vcCapH + "case8: When the queue's deserved value has a scalar resource set, the check can pass",
			Nodes: []sc.Node{{Name: "n-gpu", GPUs: 8}}, Queues: []sc.Queue{{Name: "q8", Quota: 8}, {Name: "q81", Parent: "q8", Quota: 4}, {Name: "q82", Parent: "q8", Quota: 4}},
			Gangs:  []sc.Gang{{Name: "pg12", Queue: "q81", GPUs: 1, CPU: 2000, Memory: 2 * sc.GiB}},
			Expect: sc.Expect{Binds: []string{"pg12"}},
		},
		{
			Name: "a parent with no capability leaves its children's own", Source: vcCapH + "case11: If the capability scalar resources is not specified, the value should be inherited from parent queue",
			Nodes: []sc.Node{{Name: "n2", GPUs: 8}}, Queues: []sc.Queue{{Name: "case11-queue1"}, {Name: "case11-queue11", Parent: "case11-queue1", Limit: 4}, {Name: "case11-queue12", Parent: "case11-queue1", Limit: 4}},
			Gangs: []sc.Gang{
				{Name: "pg14", Queue: "case11-queue11", GPUs: 4},
				{Name: "pg15", Queue: "case11-queue12", GPUs: 4},
			},
			Expect: sc.Expect{Binds: []string{"pg14", "pg15"}},
		},
		{
			Name: "a child within its deserved reclaims from a sibling with none", Source: vcCapH + "case12: Can reclaim from other queues when allocated <= deserved on a single scalar dimension",
			Nodes: []sc.Node{{Name: "n3", GPUs: 5}},
			Queues: []sc.Queue{
				{Name: "case12-queue1", Quota: 2},
				{Name: "case12-queue11", Parent: "case12-queue1", Quota: 2}, {Name: "case12-queue12", Parent: "case12-queue1"},
			},
			Gangs: []sc.Gang{
				{Name: "pg17", Queue: "case12-queue12", GPUs: 2, On: "n3", StartedAgo: 60},
				{Name: "pg18", Queue: "case12-queue12", NonPreemptible: true, GPUs: 2, On: "n3"},
				{Name: "pg16", Queue: "case12-queue11", GPUs: 2},
			},
			Expect: sc.Expect{Evicted: []string{"pg17-0"}, Nominated: []string{"pg16"}},
			Cycles: 5,
			Final:  &sc.Final{Running: []string{"pg16", "pg18"}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}
