package cache

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

func commitAt(c *Cache, s *scheduler.Scheduler, now time.Time) *Decisions {
	prep := c.Prepare(context.Background(), now, s.ScheduleSkipping)
	return c.Commit(prep.Plan, now)
}

func member(name, node string) *corev1.Pod {
	p := gpuPod(name, 1, 10, node)
	p.Annotations = map[string]string{names.AnnotationPodGroup: "job", names.AnnotationMinMember: "2"}
	if node != "" {
		p.Status.Phase = corev1.PodRunning
	}
	return p
}

// wholeGang is a gang of two (minimum 2) running whole on nodes a and b, seen by a
// cycle; t0 is the cache's clock.
func wholeGang(t *testing.T) (*Cache, *scheduler.Scheduler, time.Time) {
	t.Helper()
	c, s := gpuCluster(t, 1, "a", "b")
	t0 := time.Unix(5000, 0)
	c.clock = func() time.Time { return t0 }
	c.UpsertPod(member("w1", "a"))
	c.UpsertPod(member("w2", "b"))
	if d := commitAt(c, s, t0.Add(time.Hour)); len(d.Evictions) != 0 {
		t.Fatalf("a whole gang was evicted: %+v", d.Evictions)
	}
	return c, s, t0
}

// loseW2 deletes w2 with its node b at t and checks that w1, left below the gang's
// minimum, is not evicted within the 10-second grace and is evicted once after it.
func loseW2(t *testing.T, c *Cache, s *scheduler.Scheduler, at time.Time) {
	t.Helper()
	c.DeleteNode("b")
	c.DeletePod("ns", "w2")
	if d := commitAt(c, s, at.Add(5*time.Second)); len(d.Evictions) != 0 {
		t.Fatalf("evicted within the grace: %+v", d.Evictions)
	}
	d := commitAt(c, s, at.Add(11*time.Second))
	if len(d.Evictions) != 1 || d.Evictions[0].Pod.ID != "ns/w1" || d.Evictions[0].Kind != KindBelowMinimum {
		t.Fatalf("evictions after losing w2 = %+v, want w1 (gang below minimum)", d.Evictions)
	}
}

func TestAGangBelowItsMinimumIsEvictedAfterTheGrace(t *testing.T) {
	c, s, t0 := wholeGang(t)
	// w2 goes with its node; nothing can take its place (b is gone).
	loseW2(t, c, s, t0)
	if d := commitAt(c, s, t0.Add(20*time.Second)); len(d.Evictions) != 0 {
		t.Fatalf("evicted twice: %+v", d.Evictions)
	}
}

func TestAGangIncompleteTooLongIsToldOnce(t *testing.T) {
	c, s := gpuCluster(t, 2, "a")
	t0 := time.Unix(5000, 0)
	c.clock = func() time.Time { return t0 }
	c.SetTimeouts(Timeouts{Incomplete: time.Minute})
	c.UpsertPod(member("w1", ""))
	if d := commitAt(c, s, t0.Add(30*time.Second)); len(d.Incomplete) != 0 {
		t.Fatalf("reported before the timeout: %+v", d.Incomplete)
	}
	d := commitAt(c, s, t0.Add(2*time.Minute))
	if len(d.Incomplete) != 1 || len(d.Incomplete[0].Pods) != 1 {
		t.Fatalf("incomplete = %+v, want the gang with its one pod", d.Incomplete)
	}
	if d := commitAt(c, s, t0.Add(3*time.Minute)); len(d.Incomplete) != 0 {
		t.Fatalf("reported twice: %+v", d.Incomplete)
	}
}

// A gang whose minimum is raised while it runs whole (a RayCluster's minReplicas
// scaled up, its new workers not placeable yet) keeps running: it lost nothing. It
// is evicted only once it loses a member it ran whole with (soak4 saw running Ray
// clusters evicted 10 s after a scale-up while KubeRay created the new workers).
func TestAGangWhoseMinimumWasRaisedIsNotEvicted(t *testing.T) {
	c, s, t0 := wholeGang(t)
	// The minimum goes to 3; the third member exists but fits nowhere.
	for _, name := range []string{"w1", "w2", "w3"} {
		node := map[string]string{"w1": "a", "w2": "b"}[name]
		p := member(name, node)
		p.Annotations[names.AnnotationMinMember] = "3"
		c.UpsertPod(p)
	}
	for i, after := range []time.Duration{5 * time.Second, 11 * time.Second, time.Minute} {
		d := commitAt(c, s, t0.Add(after))
		if len(d.Evictions) != 0 {
			t.Fatalf("%s after the minimum was raised: evicted %+v", after, d.Evictions)
		}
		// Reported once; later cycles skip it while nothing changes.
		if i == 0 && len(d.Pending) != 1 {
			t.Fatalf("%s after the minimum was raised: pending %+v, want the gang waiting for its new member", after, d.Pending)
		}
	}
	// Now it loses a member it ran whole with: below what it had, it is partial.
	t1 := t0.Add(2 * time.Minute)
	c.clock = func() time.Time { return t1 }
	loseW2(t, c, s, t1)
}
