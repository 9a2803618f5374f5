package dispatch

import (
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/events"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// TestShareConflictWarnedOnce: a pod whose share and engine contradict gets one
// Warning Event, not one per cycle that nominates it again.
func TestShareConflictWarnedOnce(t *testing.T) {
	rec := events.NewFakeRecorder(10)
	// No workers: the queued Events stay in the queue, to be counted.
	r := &Runner{status: newStatusWriter(fake.NewSimpleClientset(), rec, 0), warned: map[string]bool{}}
	pod := &model.Pod{ID: "ns/llm-worker", UID: "uid-1"}
	conflict := []cache.ShareConflict{{Pod: pod, Message: "the pod asks for a share of 20 GiB, but ..."}}
	for i := 0; i < 3; i++ {
		r.warnShareConflicts(conflict)
	}
	if _, n := r.status.queued(); n != 1 {
		t.Fatalf("%d Events queued for one pod over three cycles, want 1", n)
	}
	r.status.drain()
	if ev := <-rec.Events; !strings.HasPrefix(ev, "Warning "+names.EventGPUShareConflict+" the pod asks") {
		t.Errorf("event %q, want a %s warning with the message", ev, names.EventGPUShareConflict)
	}
}
