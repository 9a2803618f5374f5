package cache

import (
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// TestShareConflictNoted: a pod placed with a 20 GiB share whose engine needs 75% of
// an 80 GiB GPU free is listed for a warning; one whose share covers its engine's
// need, and a whole-GPU pod, are not.
func TestShareConflictNoted(t *testing.T) {
	const GiB = int64(1) << 30
	c, _ := gpuCluster(t, 2, "n1")
	pl := placement.Placement{Node: "n1", GPUs: []model.GPUBinding{{Index: 1, MemoryBytes: 60 * GiB}}}
	for _, tc := range []struct {
		name   string
		demand model.GPUDemand
		want   bool
	}{
		{"20Gi at 0.75", model.GPUDemand{Count: 1, MemoryBytes: 20 * GiB, StartFreeFraction: 0.75}, true},
		{"60Gi at 0.75", model.GPUDemand{Count: 1, MemoryBytes: 60 * GiB, StartFreeFraction: 0.75}, false},
		{"20Gi, no engine", model.GPUDemand{Count: 1, MemoryBytes: 20 * GiB}, false},
		{"whole GPU at 0.75", model.GPUDemand{Count: 1, StartFreeFraction: 0.75}, false},
	} {
		d := &Decisions{}
		p := &model.Pod{ID: "ns/" + model.PodID(tc.name), GPU: tc.demand}
		c.mu.Lock()
		c.noteShareConflict(d, p, pl)
		c.mu.Unlock()
		if got := len(d.ShareConflicts) == 1; got != tc.want {
			t.Errorf("%s: noted %v, want %v", tc.name, d.ShareConflicts, tc.want)
			continue
		}
		if tc.want && !strings.Contains(d.ShareConflicts[0].Message, "60 GiB free on a GPU of 80 GiB") {
			t.Errorf("%s: message %q does not say what the engine needs", tc.name, d.ShareConflicts[0].Message)
		}
	}
}
