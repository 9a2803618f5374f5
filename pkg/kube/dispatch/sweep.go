package dispatch

import (
	"hash/fnv"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
)

// reasonKey is what a gang's pending reason was last written for: the reason and
// the pods it went to.
type reasonKey struct {
	reason string
	pods   uint64
	n      int
}

func pendingKey(pd cache.PendingGang) reasonKey {
	k := reasonKey{reason: pd.Reason, n: len(pd.Pods)}
	for _, p := range pd.Pods {
		h := fnv.New64a()
		h.Write([]byte(p.UID))
		h.Write([]byte(p.ID))
		k.pods += h.Sum64() // order-independent
	}
	return k
}

// The runner's memos: what it wrote or did for each gang, and their sweep.

// nomination is a node the runner nominated a pod for, and the pod's gang.
type nomination struct {
	node string
	gang model.GangID
}

// sweepEvery is how many cycles pass between two sweeps of the runner's memos.
const sweepEvery = 256

// sweepSometimes sweeps the runner's memos every sweepEvery cycles.
func (r *Runner) sweepSometimes() {
	r.cycles++
	if r.cycles%sweepEvery == 0 {
		r.sweep()
		r.sweepWarned()
	}
}

// sweepWarned forgets the share-conflict warnings (warned, by pod UID, or ID for a
// pod without one) of pods the cache no longer has. A pod is forgotten when it is
// bound; one deleted before it bound (a Ray worker scaled away while pending) was
// kept for good.
func (r *Runner) sweepWarned() {
	r.mu.Lock()
	n := len(r.warned)
	r.mu.Unlock()
	if n == 0 {
		return
	}
	known := map[string]bool{}
	r.cache.View(func(s *model.Snapshot) {
		for id, p := range s.Pods {
			known[string(id)] = true
			if p.UID != "" {
				known[p.UID] = true
			}
		}
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	for key := range r.warned {
		if !known[key] {
			delete(r.warned, key)
		}
	}
}

// sweep forgets what the runner remembers of gangs that have no pending member left:
// the reason last written (lastReason) and why they wait (pending), the failed bind
// rounds (bindFailures), the nominations of their pods (nominated). Those are dropped
// when a gang binds or, having been pending, goes; but a gang deleted while nominated
// or in bind backoff, or whose bind finished before its reason was remembered, was
// kept for good: a map growing with the churn, over a soak's hours. A gang that waits
// again later starts afresh: its reason is written again, once.
func (r *Runner) sweep() {
	r.mu.Lock()
	var gangs []model.GangID
	seen := map[model.GangID]bool{}
	add := func(g model.GangID) {
		if !seen[g] {
			seen[g] = true
			gangs = append(gangs, g)
		}
	}
	for g := range r.lastReason {
		add(g)
	}
	for g := range r.pending {
		add(g)
	}
	for g := range r.bindFailures {
		add(g)
	}
	for _, n := range r.nominated {
		add(n.gang)
	}
	r.mu.Unlock()
	if len(gangs) == 0 {
		return
	}
	waiting := r.cache.Waiting(gangs)
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, g := range gangs {
		if !waiting[g] {
			delete(r.lastReason, g)
			delete(r.pending, g)
			delete(r.bindFailures, g)
		}
	}
	for id, n := range r.nominated {
		if !waiting[n.gang] {
			delete(r.nominated, id)
		}
	}
}
