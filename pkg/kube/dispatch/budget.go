package dispatch

import (
	"time"

	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// A cycle holds the cache's lock from Prepare to the end of Commit, and its binds
// start only once it is committed. A drain's first cycle, placing the whole backlog
// at once, held the lock for 0.9 s at 5,000 pods and 26 s at 100,000 (issue 21):
// the informers waited, the first bind waited for the last placement, and the plan
// for all of it was held at once. So each cycle gets a budget of pods
// (scheduler.ScheduleWithin): it places gangs, whole, in queue order until it has
// placed that many, and leaves the rest for the next cycle. That next cycle runs as
// soon as the binds queued run low (wakeIfLow), not at the next event or resync, so
// the binder never runs dry while a backlog waits.
//
// The budget is sized from the time per pod of the bounded cycles before it, so that
// a cycle takes about Options.CycleTarget: more pods on a small or idle cluster, fewer
// on a large or loaded one, never fewer than minBudget. What every cycle costs
// whatever it places is small beside that: the cache keeps the pending gangs in order
// and the queues' charges (scheduler.Order), so a cycle reads only the gangs it
// reaches (the cost model in docs/scheduler.md). Before it did, a cycle walked and
// sorted every pending gang, and a floor of 1/32 of the backlog per cycle amortised
// that walk; with the order kept, that floor only made the first cycles of a large
// backlog take seconds, and is gone.

const (
	// firstBudget is the first cycle's budget, before any cycle was timed.
	firstBudget = 512
	// minBudget and maxBudget bound the budget (Runner.minBudget is minBudget but in
	// tests).
	minBudget = 256
	// maxBudget bounds what a cycle commits: Commit costs about 10 µs a pod on an
	// idle CPU and 70-85 µs on one the API server keeps busy (issue 21), so that 512
	// pods commit within 45 ms even then.
	maxBudget = 512
)

// cycleBudget is the budget of pods of the next cycle.
func (r *Runner) cycleBudget() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.budget
}

// resize sets the next cycle's budget from a cycle that took took. Only a cycle that
// spent its budget (it left gangs for later) says what a budget costs; the budget
// moves halfway to the size that would have taken CycleTarget.
func (r *Runner) resize(plan *scheduler.Plan, took time.Duration) {
	if plan.Deferred == 0 || took <= 0 {
		return
	}
	placed := 0
	for _, b := range plan.Binds {
		placed += len(b.Placements)
	}
	if placed == 0 {
		return
	}
	fit := int(int64(placed) * int64(r.opts.CycleTarget) / int64(took))
	r.mu.Lock()
	defer r.mu.Unlock()
	r.budget = min(max((r.budget+fit)/2, r.minBudget), maxBudget)
}

// deferred records whether the last cycle left gangs for the next, and wakes the
// loop at once if the binds queued are already low.
func (r *Runner) deferred(more bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.more = more
	r.wakeIfLow()
}

// wakeIfLow runs the next cycle when the last one left gangs for it and fewer pods
// than BindWorkers wait for a bind slot: enough to keep every slot busy while the
// next cycle places more. Caller holds mu.
func (r *Runner) wakeIfLow() {
	if !r.more || r.queuedPods >= r.opts.BindWorkers {
		return
	}
	r.more = false
	select {
	case r.ready <- struct{}{}:
	default:
	}
}
