package dispatch

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// The runner's memos of gangs with no pending member left (deleted while nominated
// or in bind backoff, say) are swept; those of a gang still waiting are kept.
func TestSweepForgetsGangsThatNoLongerWait(t *testing.T) {
	c := cache.New([]string{"gantry"}, &gang.StaticLookup{}, "")
	c.UpsertPod(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "waits", UID: "u1"}, Spec: corev1.PodSpec{SchedulerName: "gantry"}})
	r := &Runner{cache: c, lastReason: map[model.GangID]reasonKey{}, pending: map[model.GangID]scheduler.Pending{},
		bindFailures: map[model.GangID]int{}, nominated: map[model.PodID]nomination{},
		warned: map[string]bool{"u1": true, "u-gone": true, "ns/gone-1": true}}
	for _, g := range []model.GangID{"ns/waits", "ns/gone"} {
		r.lastReason[g] = reasonKey{reason: "no fit"}
		r.pending[g] = scheduler.Pending{Gang: g}
		r.bindFailures[g] = 2
	}
	r.nominated["ns/waits"] = nomination{node: "a", gang: "ns/waits"}
	r.nominated["ns/gone-0"] = nomination{node: "a", gang: "ns/gone"}
	for i := 0; i < sweepEvery; i++ {
		r.sweepSometimes()
	}
	for name, n := range map[string]int{"lastReason": len(r.lastReason), "pending": len(r.pending), "bindFailures": len(r.bindFailures), "nominated": len(r.nominated)} {
		if n != 1 {
			t.Errorf("%s holds %d entries after the sweep, want 1 (the waiting gang's)", name, n)
		}
	}
	if _, ok := r.lastReason["ns/waits"]; !ok {
		t.Error("the waiting gang's reason was forgotten")
	}
	if _, ok := r.nominated["ns/waits"]; !ok {
		t.Error("the waiting gang's nomination was forgotten")
	}
	if len(r.warned) != 1 || !r.warned["u1"] {
		t.Errorf("warned %v after the sweep, want only u1 (the pods deleted unbound forgotten)", r.warned)
	}
}
