package scheduler

// A drain's first cycle may find 100,000 pending pods. Placing them all in one cycle
// holds the cache's lock for seconds (informer handlers and bind results wait behind
// it), delays the first bind until the last pod is placed, and allocates the whole
// plan at once. ScheduleWithin bounds a cycle instead: once the queue-order loop has
// placed maxPods pods, the gangs left wait for the next cycle, whole, and the plan's
// binds start while they wait. The bound is in pods, not time, so that a cycle stays
// a pure function of its snapshot; the caller (pkg/kube/dispatch) sizes it from the
// time its cycles take.
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

// spent reports whether the cycle has placed its budget of pods (maxPods > 0).
func (c *cycle) spent(maxPods int) bool {
	return maxPods > 0 && c.placed >= maxPods
}
