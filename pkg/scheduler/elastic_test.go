package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// Members above a gang's minimum (Ray workers scaled past minReplicas) that a cycle
// cannot place wait with a reason like any pending pod. Before, placeElastic stopped
// without reporting them, and the soak's invariant checker saw such workers neither
// bound nor pending with a reason (LostPod).
func TestElasticMembersThatDoNotFitWaitWithAReason(t *testing.T) {
	for _, s := range []sc.Scenario{
		{
			Name:   "no room for the fourth worker",
			Nodes:  []sc.Node{{Name: "n", GPUs: 3}},
			Gangs:  []sc.Gang{{Name: "ray", Pods: 4, Min: 1, GPUs: 1}},
			Expect: sc.Expect{Binds: []string{"ray", "ray+2"}, Pending: map[string]scheduler.PendingKind{"ray": scheduler.PendingNoFit}},
		},
		{
			Name:   "the queue's limit stops the third worker",
			Nodes:  []sc.Node{{Name: "n", GPUs: 8}},
			Queues: []sc.Queue{{Name: "team-a", Quota: 1, Limit: 2}},
			Gangs:  []sc.Gang{{Name: "ray", Queue: "team-a", Pods: 4, Min: 1, GPUs: 1}},
			Expect: sc.Expect{Binds: []string{"ray", "ray+1"}, Pending: map[string]scheduler.PendingKind{"ray": scheduler.PendingQueueLimit}},
		},
		{
			Name:   "a running gang's extra worker that does not fit",
			Nodes:  []sc.Node{{Name: "n", GPUs: 2}},
			Gangs:  []sc.Gang{{Name: "ray", Pods: 3, Min: 1, GPUs: 1, On: "n", Bound: 2}},
			Expect: sc.Expect{Pending: map[string]scheduler.PendingKind{"ray": scheduler.PendingNoFit}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}
