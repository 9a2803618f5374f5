// Package fairshare divides the cluster between hierarchical queues, the way KAI
// Scheduler's queues do, and answers the questions the scheduling cycle asks of that
// division: is the queue tree valid, what is each queue's fair share, which leaf queue
// goes next, and would an allocation take a queue past its limit.
//
// It is pure: it reads model.Queue values and amounts, and must not depend on a
// Kubernetes client, an informer, the API types of pkg/apis or any I/O. Amounts are in
// the units of model.QueueResource: GPUs for "gpu" and "gpu/<model>", millicores for
// "cpu", bytes for "memory". Messages for people show memory in megabytes (10^6 bytes)
// and cpu in millicores, the units a Queue's spec is written in.
//
// # The API
//
//   - Validate(queues) checks the tree: unknown parents, cycles, a negative quota or
//     limit other than -1, a limit below its quota, a negative overQuotaWeight. The
//     *ValidationError lists every problem with the queues it involves and the field to
//     change. Warnings(queues) lists what is legal but likely a mistake.
//   - ValidatePodQueue(queues, name) says whether pods may be sent to a queue: it must
//     exist and be a leaf.
//   - Compute(queues, capacity, usage) returns *Shares: for every queue and resource,
//     its bounds, what its pods ask for and hold, and its fair share.
//   - (*Shares).Order / Next pick the leaf queue that goes next; Allocate and Release
//     keep the Shares current while a cycle places and evicts pods.
//   - (*Shares).WouldExceedLimit(queue, addition) and AtLimit(queue) check limits of the
//     queue and every ancestor, and return a *LimitError whose message a user can act on,
//     such as "queue team-a is at its GPU limit (8 of 8)".
//
// # How a fair share is computed
//
// For each resource, top-down from the roots (which divide the cluster's capacity) to
// the leaves (a parent's fair share is exactly what its children divide):
//
//  1. Demand. A leaf's demand is what its pods ask for (bound or pending), capped at its
//     limit; a parent's demand is the sum of its children's, capped at its own limit.
//     Nothing is ever given beyond demand, so a limit is never exceeded and idle
//     capacity flows to queues that can use it (borrowing).
//  2. Quota first. Each sibling gets min(quota, demand); a quota of -1 entitles it to all
//     its demand. If the siblings' quotas exceed what their parent has, higher priority
//     queues are served in full first and queues of equal priority in proportion to
//     their guarantees.
//  3. Spare capacity by priority, then weight. What is left goes to the siblings of the
//     highest priority first, divided in proportion to overQuotaWeight (water-filling:
//     a queue that needs less than its part returns the rest to the others); a queue of
//     weight 0 gets nothing beyond its quota. Lower priorities get what remains.
//
// A per-model resource "gpu/<model>" is divided over that model's capacity. A queue with
// no entry for the model has quota 0 there, its gpu limit and its gpu overQuotaWeight.
// Queues that are part of a problem Validate reports, and their descendants, are left
// out of Compute (it still returns Shares for the rest, with the error), so one bad
// Queue does not stop scheduling for everyone.
//
// # Which queue goes next
//
// Order compares two leaf queues where their paths from the root part: of the two
// sibling subtrees, the one with the lower dominant share (the largest
// allocated/fairShare over gpu, cpu, memory and the GPU models the queue declares) goes
// first; then the higher priority; then the name. A queue is so judged against its
// siblings at every level, as KAI Scheduler does.
package fairshare
