// Package preempt finds the running work to evict so that a gang that cannot be
// placed can start: preemption within a queue (a higher-priority gang evicts
// lower-priority preemptible gangs) and reclaim across queues (a queue below its fair
// share takes back what a queue above its share borrowed).
//
// The scheduling cycle calls Find when a gang does not fit. Find works on forks of the
// cycle's placement.View and never commits to it: it releases candidate victims on a
// fork and asks the same placement code the cycle uses (placement.Feasible for one
// node, Placer.PlaceGang for the whole gang) whether the gang then fits. It returns
// the cheapest victim set it found, where the gang's pods go once the victims are
// gone, and a one-line reason for an Event; the caller evicts.
//
// The rules, the cost order and the bounds on the search are written down in
// docs/preemption.md. In short:
//
//   - Never a victim: pods of other schedulers (Foreign), pods or gangs that are not
//     preemptible, gangs that started less than MinRuntimeSeconds ago.
//   - A gang is never left below its minimum: elastic members (Pod.Elastic) may go one
//     by one; a core member goes only with its whole gang, on every node it spans.
//   - Cheapest first: the lowest highest-victim priority, then the fewest gangs that
//     lose pods, then the least GPU memory, then elastic members before whole gangs,
//     then the least GPU time lost.
//   - Memory-aware: a GPU counts for the preemptor only when, once the victims are gone,
//     its booked and its measured (live) free memory both cover what the preemptor
//     needs there (model.GPUDemand.NeedsLiveFreeBytes), so victims free that much and
//     no more.
//   - Monotone reclaim: the reclaiming queue stays at or below its fair share of GPUs,
//     every victim queue at or above its own, so the next cycle cannot reverse it.
//
// Like the rest of the scheduling core it is pure: it reads pkg/model values and calls
// pkg/placement and pkg/fairshare, and must not depend on a Kubernetes client, an
// informer, the API types of pkg/apis, pkg/scheduler, or any I/O.
package preempt
