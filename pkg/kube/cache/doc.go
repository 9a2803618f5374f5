// Package cache is the scheduler's picture of the cluster: nodes, pods, gangs and
// devices, kept current from informer events one object at a time (no cycle
// rebuilds it), and the decisions of this scheduler that the API has not shown yet.
//
// A pod's GPU demand is read in one function, podDemand (demand.go), in DESIGN.md's
// first-match-wins order: DRA claims, then the gantry.dev/gpu-memory or
// gantry.dev/gpu-fraction annotation, then nvidia.com/gpu.
//
// A cycle goes through two calls, and the cache's mutex never leaves the package:
//
//   - Prepare(ctx, now, schedule) readies the snapshot (the structured allocator's
//     device choices, unreadable pods held back) and runs the core's pure schedule
//     on it under the lock;
//   - Commit(plan, now) records the plan before any of it reaches the API, and
//     returns what to bind, allocate and evict (Decisions). The next cycle sees it
//     all at once, before any informer echo.
//
// Life of a pod in the cache (compare kube-scheduler's backend/cache/interface.go):
//
//	            Commit(bind)               informer shows it bound (where the API says)
//	pending ---------------------> assumed -----------------------------------> bound
//	 |  ^                            |                                            |
//	 |  +--------- Forget -----------+                                            |
//	 |      (Binding certainly failed)                             Commit(evict)  |
//	 |                                                                            v
//	 +-- Commit(nominate) --> nominated (pending, NominatedNode     terminating by us
//	                          kept until the informer shows it)     (UnmarkTerminating
//	                                                                 if refused: bound)
//
//	DRA in flight: a structured allocation chosen at Commit, counted as taken from
//	assumed until the informer shows the claim allocated.
//	forgotten: any state, when the informer says the pod is deleted.
//
// Assumptions the cache makes:
//
//   - An assumed pod keeps its node and GPUs while the informer still shows it
//     unbound (the informer lags our own Binding). It leaves the assumed state only
//     when the informer shows it bound (anywhere: the API's word wins), when
//     dispatch calls Forget (the Binding certainly failed), or when it is deleted. A
//     Binding whose reply was lost is neither: the pod stays assumed until the API
//     answers, so its GPUs are never given to another pod meanwhile.
//   - A victim marked terminating by Commit stays terminating across informer
//     updates of the same pod (UID) until the API sets deletionTimestamp and the pod
//     goes, or dispatch calls UnmarkTerminating (eviction refused or cancelled).
//   - A nomination made by Commit is kept on the pod until the informer shows it,
//     or the pod is bound.
//   - DRA in flight: the structured allocator's allocations for assumed pods count
//     as taken until the informer shows the claim allocated (or the pod is
//     forgotten).
//   - Forgotten: a deleted pod frees what it held, and its gang is regrouped.
//
// Nodes and pods in the snapshot are replaced, never changed in place, so a
// placement View and the Placer's per-node caches can hold them by pointer.
//
// It must not import the informers, the dispatcher, the reporters or a client: it
// is fed events and asked questions.
package cache
