package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	"github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// A gang whose pods say preemptionPolicy: Never evicts nothing to make room, however
// high its priority, as kube-scheduler's DefaultPreemption skips such a preemptor;
// the same gang without it evicts the low-priority pod in its way.
func TestPreemptionPolicyNeverEvictsNothing(t *testing.T) {
	for _, never := range []bool{true, false} {
		low := scenario.Gang{Name: "low", GPUs: 8, On: "n1"}
		high := scenario.Gang{Name: "high", GPUs: 8, Priority: 100, NonPreemptible: true, NeverPreempts: never}
		want := scenario.Expect{Evicted: []string{"low-0"}, Nominated: []string{"high"}}
		if never {
			want = scenario.Expect{Pending: map[string]scheduler.PendingKind{"high": scheduler.PendingNoFit}}
		}
		scenario.Run(t, scenario.Scenario{Nodes: hostNodes("n1"), Gangs: []scenario.Gang{low, high}, Expect: want})
	}
}
