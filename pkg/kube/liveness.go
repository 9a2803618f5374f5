package kube

import (
	"fmt"
	"sync/atomic"
	"time"
)

// DefaultStallTimeout is how long the scheduling loop may go without completing a
// cycle, while pods wait, before liveness fails. The loop runs a cycle at least
// every second; it pauses up to a minute while the API server is unreachable
// (dispatch's MaxBindBackoff), which must not count as a stall.
const DefaultStallTimeout = 3 * time.Minute

// Liveness says whether the scheduling loop is alive: it fails when the loop has
// started and has not completed a cycle for longer than the stall timeout while pods
// wait for a node. A process that is up but no longer schedules is restarted by the
// kubelet; a standby replica (the loop never started) and an idle loop are alive.
// It is safe for concurrent use and never takes the cache's lock, so a loop stuck
// holding it cannot hang the probe too.
type Liveness struct {
	stall time.Duration
	// last is the UnixNano of the last completed cycle (or of the loop's start);
	// 0 while the loop has not started.
	last    atomic.Int64
	pending atomic.Pointer[func() int]
}

// NewLiveness returns a Liveness with the given stall timeout (DefaultStallTimeout
// when not positive).
func NewLiveness(stall time.Duration) *Liveness {
	if stall <= 0 {
		stall = DefaultStallTimeout
	}
	return &Liveness{stall: stall}
}

// started records that the loop starts now, counting waiting pods with pending.
func (l *Liveness) started(now time.Time, pending func() int) {
	l.pending.Store(&pending)
	l.last.Store(now.UnixNano())
}

// cycled records a completed cycle.
func (l *Liveness) cycled(now time.Time) { l.last.Store(now.UnixNano()) }

// Check returns an error, saying what stalled, when the loop has not completed a cycle
// for longer than the stall timeout while pods wait; nil otherwise.
func (l *Liveness) Check(now time.Time) error {
	if l == nil {
		return nil
	}
	last, pending := l.last.Load(), l.pending.Load()
	if last == 0 || pending == nil {
		return nil // not leading, or informers not synced yet
	}
	since := now.Sub(time.Unix(0, last))
	if since <= l.stall {
		return nil
	}
	if n := (*pending)(); n > 0 {
		return fmt.Errorf("the scheduling loop has not completed a cycle for %s (stall timeout %s) while %d pods wait for a node",
			since.Round(time.Second), l.stall, n)
	}
	return nil
}
