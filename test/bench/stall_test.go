package bench

import (
	"testing"
	"time"
)

// The stall clock does not run while the scheduler syncs a large backlog: a drain
// of 100,000 pods is not given up before its first cycle. It starts when the
// scheduler is ready, or binds its first pod, and then ends a run that binds
// nothing for the limit.
func TestStallClockStartsWhenReady(t *testing.T) {
	t0 := time.Unix(0, 0)
	at := func(d time.Duration) time.Time { return t0.Add(d) }
	ready := false
	c := newStallClock(time.Minute, func() bool { return ready }, t0)
	for m := 1; m <= 10; m++ {
		if c.stalled(at(time.Duration(m)*time.Minute), 0) {
			t.Fatalf("stalled %d min into the first sync", m)
		}
	}
	ready = true
	if c.stalled(at(10*time.Minute+time.Second), 0) {
		t.Fatal("stalled the moment the scheduler became ready")
	}
	if c.stalled(at(11*time.Minute), 0) {
		t.Fatal("stalled before a minute had passed since ready")
	}
	if !c.stalled(at(11*time.Minute+2*time.Second), 0) {
		t.Fatal("not stalled a minute after ready with nothing bound")
	}

	// A first bind starts the clock too, and each bind resets it.
	c = newStallClock(time.Minute, func() bool { return false }, t0)
	if c.stalled(at(5*time.Minute), 3) || c.stalled(at(5*time.Minute+50*time.Second), 3) {
		t.Fatal("stalled less than a minute after the first binds")
	}
	if c.stalled(at(6*time.Minute+40*time.Second), 4) {
		t.Fatal("stalled right after a bind")
	}
	if !c.stalled(at(7*time.Minute+41*time.Second), 4) {
		t.Fatal("not stalled a minute after the last bind")
	}

	// Without a readiness check (kube-scheduler, the floor) the clock runs from the start.
	c = newStallClock(time.Minute, nil, t0)
	if c.stalled(at(30*time.Second), 0) || !c.stalled(at(61*time.Second), 0) {
		t.Fatal("a scheduler without a readiness check is not timed from its start")
	}
}
