package scheduler

// A drain's first cycle may find 100,000 pending pods. Placing them all in one cycle
// holds the cache's lock for seconds (informer handlers and bind results wait behind
// it), delays the first bind until the last pod is placed, and allocates the whole
// plan at once. ScheduleWithin bounds a cycle instead: once the queue-order loop has
// placed maxPods pods, the gangs left wait for the next cycle, whole, and the plan's
// binds start while they wait. The bound is in pods, so that a cycle stays a pure
// function of its snapshot; the caller (pkg/kube/dispatch) sizes it from the time its
// cycles take.
//
// A caller may also end the loop sooner (Bound.Stop, asked after each gang tried):
// pkg/kube/dispatch stops a cycle that has run past its time, which on a machine
// whose CPUs are busy with the API server takes ten times as long for the same pods
// as on an idle one (issue 21). What such a cycle decides is a prefix of what the
// cycle with the pods bound alone would decide: the same gangs in the same order,
// placed the same way, only fewer of them. The simulator and the benchmarks give no
// Stop, and stay pure.
//
// The bound counts pods placed, not pods tried: gangs that do not fit are tried and
// reported as before (the caller skips them until something changes), so gangs at
// the head of a queue that do not fit never starve the gangs behind them. Only the queue-order loop is bounded. Nominated gangs, which go before
// every queue, are few and are all tried; elastic members of the gangs placed in the
// cycle are offered what is left as before. A gang is never split by the bound: the
// one that reaches it is placed whole, so a gang larger than maxPods still binds.
//
// With an Order kept across cycles (ScheduleOrdered), the gangs past the bound are
// not even read: Plan.Deferred is then the pending pods of the gangs the cycle did
// not reach, including those it would have skipped or reported, and the gangs that
// must wait whatever happens (missing pods, a pod that cannot be read) are reported
// when a cycle reaches them, not by every cycle.

// Bound ends a cycle's queue-order loop before it reaches every pending gang.
type Bound struct {
	// Pods ends it once this many pods are placed (0: no bound).
	Pods int
	// Stop, when set, is asked after each gang tried, the first excepted, so that
	// every cycle tries at least one gang; true ends the loop.
	Stop func() bool
}

// spent reports whether the cycle has reached its bound.
func (c *cycle) spent(b Bound) bool {
	return b.Pods > 0 && c.placed >= b.Pods || c.tried > 0 && b.Stop != nil && b.Stop()
}
