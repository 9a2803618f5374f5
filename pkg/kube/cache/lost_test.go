package cache

import (
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/model"
)

// pendingPods lists the pods d reports pending, of gang g.
func pendingPods(d *Decisions, g model.GangID) []model.PodID {
	var out []model.PodID
	for _, pd := range d.Pending {
		if pd.Gang == g {
			out = append(out, pd.Pending.Pods...)
		}
	}
	return out
}

// A gang evicted below its minimum, whose owner re-creates a member while the
// evicted ones are still terminating, is pending with a reason on the new member
// (the soak's LostPods were Ray workers re-created right after such an eviction).
func TestAMemberRecreatedAfterABelowMinimumEvictionIsPending(t *testing.T) {
	c, s := gpuCluster(t, 1, "a", "b")
	t0 := time.Unix(5000, 0)
	c.clock = func() time.Time { return t0 }
	c.UpsertPod(member("w1", "a"))
	c.UpsertPod(member("w2", "b"))
	commitAt(c, s, t0)
	c.DeletePod("ns", "w2")
	commitAt(c, s, t0.Add(time.Second))
	d := commitAt(c, s, t0.Add(11*time.Second))
	if len(d.Evictions) != 1 {
		t.Fatalf("evictions = %+v, want w1", d.Evictions)
	}
	c.UpsertPod(member("w3", ""))
	for i, at := range []time.Duration{12 * time.Second, 13 * time.Second, 30 * time.Second} {
		d := commitAt(c, s, t0.Add(at))
		got := pendingPods(d, "podgroup:ns/job")
		if i == 0 && (len(got) != 1 || got[0] != "ns/w3") {
			t.Fatalf("pending after the re-creation = %v (all: %+v), want ns/w3", got, d.Pending)
		}
	}
}
