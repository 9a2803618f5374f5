package kube

import (
	"strings"
	"testing"
	"time"
)

func TestLivenessFailsOnlyWhenTheLoopStallsWithWork(t *testing.T) {
	t0 := time.Unix(1000, 0)
	l := NewLiveness(time.Minute)
	if err := l.Check(t0.Add(time.Hour)); err != nil {
		t.Fatalf("a loop that never started (a standby replica) failed: %v", err)
	}
	waiting := 0
	l.started(t0, func() int { return waiting })
	if err := l.Check(t0.Add(time.Hour)); err != nil {
		t.Fatalf("an idle loop (no pod waits) failed: %v", err)
	}
	waiting = 3
	if err := l.Check(t0.Add(30 * time.Second)); err != nil {
		t.Fatalf("failed within the stall timeout: %v", err)
	}
	err := l.Check(t0.Add(2 * time.Minute))
	if err == nil || !strings.Contains(err.Error(), "3 pods wait") || !strings.Contains(err.Error(), "2m0s") {
		t.Fatalf("stalled loop with 3 waiting pods: %v, want an error naming the stall and the pods", err)
	}
	l.cycled(t0.Add(2 * time.Minute))
	if err := l.Check(t0.Add(2*time.Minute + time.Second)); err != nil {
		t.Fatalf("failed right after a cycle completed: %v", err)
	}
	var none *Liveness
	if err := none.Check(t0); err != nil {
		t.Fatalf("nil Liveness: %v", err)
	}
}
