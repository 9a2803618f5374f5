package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// Scenario tests of a peer scheduler, Volcano (volcano-sh/volcano,
// pkg/scheduler/actions/{allocate,preempt,reclaim}), written again as Gantry
// scenarios. How they translate:
//
//   - A PodGroup is a gang; its pods are "<gang>-<i>" in the order Volcano lists them,
//     except that a gang's non-preemptible pods come first, as its minimum. A
//     minMember of 0 becomes 1 (Gantry has no gang of zero), the rest elastic.
//   - Volcano's preemptable=false label is a non-preemptible pod; priority classes keep
//     their values (low 10, high 100000 unless the test says otherwise).
//   - A queue's capability is its limit, its weight its overQuotaWeight, with no quota
//     (Volcano's proportion plugin divides by weight alone).
//   - Reclaim in Gantry is judged on GPUs, so reclaim tests count GPUs where Volcano
//     counts CPUs ("1" CPU becomes 1 GPU).
//
// Where Gantry decides otherwise on purpose, Differs says why and the expectation is
// Gantry's.
const (
	vcPreempt  = "volcano pkg/scheduler/actions/preempt/preempt_test.go: TestPreempt/"
	vcReclaim  = "volcano pkg/scheduler/actions/reclaim/reclaim_test.go: TestReclaim/"
	vcReclaimN = "volcano pkg/scheduler/actions/reclaim/reclaim_test.go: TestReclaimWithNodeSelector/"
	vcAllocate = "volcano pkg/scheduler/actions/allocate/allocate_test.go: TestAllocate/"
	vcFair     = "volcano pkg/scheduler/actions/allocate/allocate_test.go: TestFareShareAllocate/"
	vcFIFO     = "volcano pkg/scheduler/actions/allocate/allocate_priority_fifo_test.go: TestPriorityFIFO/"
	vcGuar     = "volcano pkg/scheduler/actions/allocate/allocate_guaranteequota_test.go: TestAllocateGuaranteeQuota/"

	g     = int64(1e9)
	low   = 10
	high  = 100000
	noFit = string(scheduler.PendingNoFit)
)

func cpuNode(name string, cpus, gigabytes int64) sc.Node {
	return sc.Node{Name: name, CPU: cpus * 1000, Memory: gigabytes * g}
}

func cpuLimit(cpus int64) *model.QueueResource {
	return &model.QueueResource{Quota: model.Unlimited, Limit: float64(cpus * 1000), OverQuotaWeight: 1}
}

func pending(kinds ...string) map[string]scheduler.PendingKind {
	out := map[string]scheduler.PendingKind{}
	for i := 0; i+1 < len(kinds); i += 2 {
		out[kinds[i]] = scheduler.PendingKind(kinds[i+1])
	}
	return out
}

func TestVolcanoPreempt(t *testing.T) {
	q1 := []sc.Queue{{Name: "q1"}}
	for _, s := range []sc.Scenario{
		{
			Name: "do not preempt if there are enough idle resources", Source: vcPreempt + "do not preempt if there are enough idle resources",
			Nodes: []sc.Node{cpuNode("n1", 10, 10)}, Queues: q1,
			Gangs:  []sc.Gang{{Name: "pg1", Queue: "q1", Pods: 3, Bound: 2, On: "n1", Memory: g}},
			Expect: sc.Expect{Binds: []string{"pg1"}},
		},
		{
			Name: "do not preempt if job is pipelined", Source: vcPreempt + "do not preempt if job is pipelined",
			Nodes: []sc.Node{cpuNode("n1", 3, 3)}, Queues: q1,
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Pods: 2, Min: 1, On: "n1", Memory: g},
				{Name: "pg2", Queue: "q1", Pods: 2, Min: 1, Bound: 1, On: "n1", Memory: g},
			},
			// No eviction, as in Volcano; pg2's unplaced member is reported pending.
			Expect: sc.Expect{Pending: pending("pg2", noFit)},
		},
		{
			Name: "preempt one task of different job to fit both jobs on one node", Source: vcPreempt + "preempt one task of different job to fit both jobs on one node",
			Nodes: []sc.Node{cpuNode("n1", 2, 2)}, Queues: q1,
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, Pods: 2, Min: 1, NonPreemptiblePods: []int{0}, On: "n1", Memory: g},
				{Name: "pg2", Queue: "q1", Priority: high, Pods: 2, Min: 1, Memory: g},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-1"}, Nominated: []string{"pg2"}},
		},
		{
			Name: "preempt enough tasks to fit large task of different job", Source: vcPreempt + "preempt enough tasks to fit large task of different job",
			Nodes: []sc.Node{cpuNode("n1", 6, 6)}, Queues: q1,
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, Pods: 3, Min: 1, NonPreemptiblePods: []int{0}, On: "n1", Memory: g},
				{Name: "pg2", Queue: "q1", Priority: high, CPU: 5000, Memory: 5 * g},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-1", "pg1-2"}, Nominated: []string{"pg2"}},
		},
		{
			Name: "preempt low priority job in same queue (capability 4)", Source: vcPreempt + "preempt low priority job in same queue (#3161)",
			Nodes: []sc.Node{cpuNode("n1", 12, 12)}, Queues: []sc.Queue{{Name: "q1", CPU: cpuLimit(4)}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, CPU: 3000, Memory: 3 * g, On: "n1"},
				{Name: "pg2", Queue: "q1", Priority: high, CPU: 3000, Memory: 3 * g},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-0"}, Nominated: []string{"pg2"}},
			Cycles: 4, Final: &sc.Final{Running: []string{"pg2"}},
		},
		{
			Name: "preempt low priority job in same queue: allocatable and has enough resource, don't preempt", Source: vcPreempt + "preempt low priority job in same queue: allocatable and has enough resource, don't preempt",
			Nodes: []sc.Node{cpuNode("n1", 12, 12)}, Queues: []sc.Queue{{Name: "q1", CPU: cpuLimit(6)}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, CPU: 3000, Memory: 3 * g, On: "n1"},
				{Name: "pg2", Queue: "q1", Priority: high, CPU: 3000, Memory: 3 * g},
			},
			Expect: sc.Expect{Binds: []string{"pg2"}},
		},
		{
			Name: "preempt low priority job in same queue (capability 3)", Source: vcPreempt + "preempt low priority job in same queue (#2232)",
			Differs: "a pod takes its gang's priority in Gantry, so Volcano's high-priority preemptee3 is an ordinary elastic member; the cheaper of the two by name, pg1-1 (Volcano's preemptee2), goes either way",
			Nodes:   []sc.Node{cpuNode("n1", 12, 12)}, Queues: []sc.Queue{{Name: "q1", CPU: cpuLimit(3)}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, Pods: 3, Min: 1, NonPreemptiblePods: []int{0}, On: "n1", Memory: g},
				{Name: "pg2", Queue: "q1", Priority: high, Memory: g},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-1"}, Nominated: []string{"pg2"}},
		},
		{
			Name: "unBestEffort high-priority pod preempt BestEffort low-priority pod in same queue", Source: vcPreempt + "unBestEffort high-priority pod preempt BestEffort low-priority pod in same queue",
			Nodes: []sc.Node{{Name: "n1", CPU: 12000, Memory: 12 * g, Pods: 1}}, Queues: []sc.Queue{{Name: "q1", CPU: cpuLimit(6)}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, BestEffort: true, On: "n1"},
				{Name: "pg2", Queue: "q1", Priority: high, CPU: 3000, Memory: 3 * g},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-0"}, Nominated: []string{"pg2"}},
		},
		{
			Name: "BestEffort high-priority pod preempt BestEffort low-priority pod in same queue", Source: vcPreempt + "BestEffort high-priority pod preempt BestEffort low-priority pod in same queue",
			Nodes: []sc.Node{{Name: "n1", CPU: 12000, Memory: 12 * g, Pods: 1}}, Queues: []sc.Queue{{Name: "q1", CPU: cpuLimit(6)}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, BestEffort: true, On: "n1"},
				{Name: "pg2", Queue: "q1", Priority: high, BestEffort: true},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-0"}, Nominated: []string{"pg2"}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}

func TestVolcanoReclaim(t *testing.T) {
	twoQueues := []sc.Queue{{Name: "q1", Quota: 0, Weight: 1}, {Name: "q2", Quota: 0, Weight: 1}}
	gpu := map[string]string{"nodepool": "gpu"}
	cpu := map[string]string{"nodepool": "cpu"}
	for _, s := range []sc.Scenario{
		{
			Name: "Two Queue with one Queue overusing resource, should reclaim", Source: vcReclaim + "Two Queue with one Queue overusing resource, should reclaim",
			Nodes: []sc.Node{{Name: "n1", GPUs: 3}}, Queues: twoQueues,
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, Pods: 3, Min: 1, GPUs: 1, NonPreemptiblePods: []int{0, 2}, On: "n1"},
				{Name: "pg2", Queue: "q2", Priority: high, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-1"}, Nominated: []string{"pg2"}},
			Cycles: 5, Final: &sc.Final{Running: []string{"pg1", "pg2"}},
		},
		{
			Name:   "Two Queue with one Queue overusing resource, should reclaim (all preemptable)",
			Source: vcReclaim + "Two Queue with one Queue overusing resource, should reclaim (the earlier version, commit 012c2a2, with no preemptable labels)",
			Nodes:  []sc.Node{{Name: "n1", GPUs: 3}}, Queues: twoQueues,
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, Pods: 3, Min: 1, GPUs: 1, On: "n1"},
				{Name: "pg2", Queue: "q2", Priority: high, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-1"}, Nominated: []string{"pg2"}},
			Cycles: 5, Final: &sc.Final{Running: []string{"pg1", "pg2"}},
		},
		{
			Name: "sort reclaimees when reclaiming from overusing queue", Source: vcReclaim + "sort reclaimees when reclaiming from overusing queue",
			Differs: "Gantry's fair-share reclaim never leaves a victim queue below its fair share (1.5 GPUs each for q1 and q2 here, and a victim is a whole GPU), so nothing is reclaimed: a queue that must get its GPU is given a quota",
			Nodes:   []sc.Node{{Name: "n1", GPUs: 4}},
			Queues:  []sc.Queue{{Name: "q1"}, {Name: "q2"}, {Name: "q3"}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: 500, Pods: 2, Min: 1, GPUs: 1, On: "n1"},
				{Name: "pg2", Queue: "q2", Priority: 100, Pods: 2, Min: 1, GPUs: 1, NonPreemptiblePods: []int{0}, On: "n1"},
				{Name: "pg3", Queue: "q3", Priority: 1000, GPUs: 1},
			},
			Expect: sc.Expect{Pending: pending("pg3", noFit)},
		},
		{
			Name: "sort reclaimees when reclaiming from overusing queues with different queue priority", Source: vcReclaim + "sort reclaimees when reclaiming from overusing queues with different queue priority",
			Differs: "queue priority in Gantry (as in KAI) decides who gets spare capacity first: q3, the lowest, has a fair share of 0 and reclaims nothing",
			Nodes:   []sc.Node{{Name: "n1", GPUs: 4}},
			Queues:  []sc.Queue{{Name: "q1", Priority: 5}, {Name: "q2", Priority: 10}, {Name: "q3", Priority: 1}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: 500, Pods: 2, Min: 1, GPUs: 1, NonPreemptiblePods: []int{0}, On: "n1"},
				{Name: "pg2", Queue: "q2", Priority: 500, Pods: 2, Min: 1, GPUs: 1, NonPreemptiblePods: []int{0}, On: "n1"},
				{Name: "pg3", Queue: "q3", Priority: 500, GPUs: 1},
			},
			Expect: sc.Expect{Pending: pending("pg3", noFit)},
		},
		{
			Name: "reclaim on full node with matching nodeSelector, skip non-matching node", Source: vcReclaimN + "reclaim on full node with matching nodeSelector, skip non-matching node",
			Nodes: []sc.Node{{Name: "n1", GPUs: 3, Labels: gpu}, {Name: "n2", Labels: cpu}}, Queues: twoQueues,
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, Pods: 3, Min: 1, GPUs: 1, NonPreemptiblePods: []int{0, 2}, On: "n1", NodeSelector: gpu},
				{Name: "pg2", Queue: "q2", Priority: high, GPUs: 1, NodeSelector: gpu},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-1"}, Nominated: []string{"pg2"}},
		},
		{
			Name: "no reclaim when all nodes are structurally incompatible with nodeSelector", Source: vcReclaimN + "no reclaim when all nodes are structurally incompatible with nodeSelector",
			Nodes: []sc.Node{{Name: "n1", GPUs: 3, Labels: cpu}}, Queues: twoQueues,
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, Pods: 3, Min: 1, GPUs: 1, NonPreemptiblePods: []int{0, 2}, On: "n1"},
				{Name: "pg2", Queue: "q2", Priority: high, GPUs: 1, NodeSelector: gpu},
			},
			Expect: sc.Expect{Pending: pending("pg2", noFit)},
		},
		{
			Name: "reclaim only on matching node when mixed matching and non-matching nodes are full", Source: vcReclaimN + "reclaim only on matching node when mixed matching and non-matching nodes are full",
			Nodes: []sc.Node{{Name: "n1", GPUs: 3, Labels: gpu}, {Name: "n2", GPUs: 1, Labels: cpu}}, Queues: twoQueues,
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "q1", Priority: low, Pods: 4, Min: 1, GPUs: 1, NonPreemptiblePods: []int{0, 2}, OnNodes: []string{"n1", "n1", "n1", "n2"}},
				{Name: "pg2", Queue: "q2", Priority: high, GPUs: 1, NodeSelector: gpu},
			},
			Expect: sc.Expect{Evicted: []string{"pg1-1"}, Nominated: []string{"pg2"}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}

func TestVolcanoAllocate(t *testing.T) {
	master := map[string]string{"nodeRole": "master"}
	worker := map[string]string{"nodeRole": "worker"}
	for _, s := range []sc.Scenario{
		{
			Name: "prepredicate failed: node selector does not match", Source: vcAllocate + "prepredicate failed: node selector does not match",
			Differs: "Gantry takes a gang's minimum in creation order and does not swap in a later member that fits, so the gang waits whole",
			Nodes:   []sc.Node{{Name: "n1", CPU: 2000, Memory: 4 * sc.GiB, Labels: worker}}, Queues: []sc.Queue{{Name: "c1"}},
			Gangs:  []sc.Gang{{Name: "pg1", Queue: "c1", Pods: 2, Min: 1, Memory: g, PodNodeSelectors: map[int]map[string]string{0: master, 1: worker}}},
			Expect: sc.Expect{Pending: pending("pg1", noFit)},
		},
		{
			Name: "prepredicate failed and tasks are not used up, continue on until min member meet", Source: vcAllocate + "prepredicate failed and tasks are not used up, continue on untill min member meet",
			Differs: "Gantry has no per-role minimum (Volcano's minTaskMember): the minimum of 2 is the first two members, both masters, which do not fit on the one 1-CPU master node",
			Nodes: []sc.Node{
				{Name: "n1", CPU: 1000, Memory: 2 * sc.GiB, Labels: master},
				{Name: "n2", CPU: 1000, Memory: 2 * sc.GiB, Labels: worker},
			},
			Queues: []sc.Queue{{Name: "c1"}},
			Gangs: []sc.Gang{{Name: "pg1", Queue: "c1", Pods: 4, Min: 2, Memory: g,
				PodNodeSelectors: map[int]map[string]string{0: master, 1: master, 2: worker, 3: worker}}},
			Expect: sc.Expect{Pending: pending("pg1", noFit)},
		},
		{
			Name: "master's min member can not be allocated, break from allocating", Source: vcAllocate + "master's min member can not be allocated, break from allocating",
			Nodes: []sc.Node{
				{Name: "n1", CPU: 1000, Memory: 2 * sc.GiB, Labels: master},
				{Name: "n2", CPU: 2000, Memory: 2 * sc.GiB, Labels: worker},
			},
			Queues: []sc.Queue{{Name: "c1"}},
			Gangs: []sc.Gang{{Name: "pg1", Queue: "c1", Pods: 4, Min: 2, Memory: g,
				PodNodeSelectors: map[int]map[string]string{0: master, 1: master, 2: worker, 3: worker}}},
			Expect: sc.Expect{Pending: pending("pg1", noFit)},
		},
		{
			Name: "one Job with two Pods on one node", Source: vcAllocate + "one Job with two Pods on one node",
			Nodes: []sc.Node{{Name: "n1", CPU: 2000, Memory: 4 * sc.GiB}}, Queues: []sc.Queue{{Name: "c1"}},
			Gangs:  []sc.Gang{{Name: "pg1", Queue: "c1", Pods: 2, Min: 1, Memory: g}},
			Expect: sc.Expect{Binds: []string{"pg1", "pg1+1"}},
		},
		{
			Name: "two Jobs on one node", Source: vcAllocate + "two Jobs on one node",
			Nodes: []sc.Node{cpuNode("n1", 2, 4)}, Queues: []sc.Queue{{Name: "c1"}, {Name: "c2"}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "c1", Pods: 2, Min: 1, Memory: g},
				{Name: "pg2", Queue: "c2", Pods: 2, Min: 1, Memory: g},
			},
			// Each job's second task stays pending, as in Volcano; Gantry also says why.
			Expect: sc.Expect{Binds: []string{"pg1", "pg2"}, Pending: pending("pg1", noFit, "pg2", noFit)},
		},
		{
			Name: "high priority queue should not block others", Source: vcAllocate + "high priority queue should not block others",
			Nodes: []sc.Node{cpuNode("n1", 2, 4)}, Queues: []sc.Queue{{Name: "c1"}, {Name: "c2"}},
			Gangs: []sc.Gang{
				{Name: "pg1", Queue: "c1", CPU: 3000, Memory: g},
				{Name: "pg2", Queue: "c2", Memory: g},
			},
			Expect: sc.Expect{Binds: []string{"pg2"}, Pending: pending("pg1", noFit)},
		},
		{
			Name: "queue with low DRF share value has high priority, should allocate first", Source: vcFair + "queue with low DRF share value has high priority, should allocate first",
			Nodes: []sc.Node{cpuNode("node-1", 5, 5)}, Queues: []sc.Queue{{Name: "q-1"}, {Name: "q-2"}},
			Gangs: []sc.Gang{
				{Name: "pg-small-1", Queue: "q-1", Memory: g, On: "node-1"},
				{Name: "pg-large-1", Queue: "q-1", CPU: 2000, Memory: 2 * g},
				{Name: "pg-large-2", Queue: "q-2", CPU: 3000, Memory: 2 * g},
			},
			Expect: sc.Expect{Binds: []string{"pg-large-2"}, Pending: pending("pg-large-1", noFit)},
		},
		{
			Name: "queue's DRF share value will be updated and its priority will change before it is put back into the priority queue", Source: vcFair + "queue’s DRF share value will be updated and its priority will change before it is put back into the priority queue",
			Nodes: []sc.Node{cpuNode("node-1", 5, 5)}, Queues: []sc.Queue{{Name: "q-1"}, {Name: "q-2"}},
			Gangs: []sc.Gang{
				{Name: "pg-small-1", Queue: "q-1", Memory: g, On: "node-1"},
				{Name: "pg-large-1", Queue: "q-1", CPU: 2000, Memory: 2 * g},
				{Name: "pg-large-2", Queue: "q-2", CPU: 2000, Memory: 2 * g},
				{Name: "pg-small-2", Queue: "q-2", Memory: g},
			},
			Expect: sc.Expect{Binds: []string{"pg-large-1", "pg-large-2"}, Pending: pending("pg-small-2", noFit)},
		},
		{
			Name: "queue's one jobs has no pending tasks, should be put back to queues for next job", Source: vcFair + "queue’s one jobs has no pending tasks, should be put back to queues for next job",
			Nodes: []sc.Node{cpuNode("node-1", 5, 5)}, Queues: []sc.Queue{{Name: "q-1"}},
			Gangs: []sc.Gang{
				{Name: "pg-1", Queue: "q-1", Memory: g, On: "node-1"},
				{Name: "pg-2", Queue: "q-1", CPU: 2000, Memory: 2 * g},
			},
			Expect: sc.Expect{Binds: []string{"pg-2"}},
		},
		{
			Name: "two share queue, use other queue guarantee resource", Source: vcGuar + "two share queue, use other queue guarantee resource",
			Differs: "a quota in Gantry (as in KAI) is lent while its queue asks for nothing, so c2 and c3 both start on c1's idle guarantee, and c1 reclaims it when it asks",
			Nodes:   []sc.Node{{Name: "n1", GPUs: 20}},
			Queues:  []sc.Queue{{Name: "c1", Quota: 15, Limit: 15}, {Name: "c2", Limit: 5}, {Name: "c3", Limit: 5}},
			Gangs: []sc.Gang{
				{Name: "pg2", Queue: "c2", GPUs: 3},
				{Name: "pg3", Queue: "c3", GPUs: 4},
			},
			Expect: sc.Expect{Binds: []string{"pg2", "pg3"}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}

func TestVolcanoPriorityFIFO(t *testing.T) {
	node := []sc.Node{{Name: "n1", CPU: 2000, Memory: 4 * sc.GiB}}
	q1 := []sc.Queue{{Name: "q1"}}
	backfills := "Gantry backfills: a gang that cannot fit never holds back smaller ones of its queue, of any priority"
	for _, s := range []sc.Scenario{
		{
			Name: "PriorityFIFO: same priority job can proceed after failure, lower priority blocked", Source: vcFIFO + "PriorityFIFO: same priority job can proceed after failure, lower priority blocked",
			Differs: backfills, Nodes: node, Queues: q1,
			Gangs: []sc.Gang{
				{Name: "pg-a", Queue: "q1", Priority: 1000, CPU: 4000, Memory: g},
				{Name: "pg-b", Queue: "q1", Priority: 1000, Memory: g},
				{Name: "pg-c", Queue: "q1", Priority: 500, Memory: g},
			},
			Expect: sc.Expect{Binds: []string{"pg-b", "pg-c"}, Pending: pending("pg-a", noFit)},
		},
		{
			Name: "PriorityFIFO: all same priority, all can proceed", Source: vcFIFO + "PriorityFIFO: all same priority, all can proceed",
			Nodes: node, Queues: q1,
			Gangs: []sc.Gang{
				{Name: "pg-a", Queue: "q1", Priority: 1000, CPU: 4000, Memory: g},
				{Name: "pg-b", Queue: "q1", Priority: 1000, Memory: g},
				{Name: "pg-c", Queue: "q1", Priority: 1000, Memory: g},
			},
			Expect: sc.Expect{Binds: []string{"pg-b", "pg-c"}, Pending: pending("pg-a", noFit)},
		},
		{
			Name: "FIFO backward compatibility: all blocked after first failure", Source: vcFIFO + "FIFO backward compatibility: all blocked after first failure",
			Differs: backfills, Nodes: node, Queues: q1,
			Gangs: []sc.Gang{
				{Name: "pg-a", Queue: "q1", Priority: 1000, CPU: 4000, Memory: g},
				{Name: "pg-b", Queue: "q1", Priority: 1000, Memory: g},
			},
			Expect: sc.Expect{Binds: []string{"pg-b"}, Pending: pending("pg-a", noFit)},
		},
		{
			Name: "FIFO: same priority and lower priority blocked after failure", Source: vcFIFO + "FIFO: same priority and lower priority blocked after failure",
			Differs: backfills, Nodes: node, Queues: q1,
			Gangs: []sc.Gang{
				{Name: "pg-a", Queue: "q1", Priority: 1000, CPU: 4000, Memory: g},
				{Name: "pg-b", Queue: "q1", Priority: 1000, Memory: g},
				{Name: "pg-c", Queue: "q1", Priority: 500, Memory: g},
			},
			Expect: sc.Expect{Binds: []string{"pg-b", "pg-c"}, Pending: pending("pg-a", noFit)},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}
