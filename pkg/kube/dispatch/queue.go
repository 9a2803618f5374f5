package dispatch

import (
	"context"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
)

// queuedBatch is a committed gang's batch waiting for a goroutine to bind it.
type queuedBatch struct {
	ctx   context.Context
	batch cache.Batch
}

// queueBinds hands a cycle's batches to the binder in plan order, without blocking
// the cycle: one goroutine per batch up to BindWorkers batches at once, the rest
// queued. A drain's first cycle commits the whole backlog; a goroutine for each of
// its batches, parked on the binder's slots, cost a stack each (8 KB and more,
// hundreds of MiB at 100,000 pods) and took the slots in whatever order the Go
// scheduler ran them.
//
// While nothing is queued, a batch that finds a slot free starts from here, not
// from the pump: under steady arrivals each cycle binds a pod or two, and a hand-off
// through the pump's goroutine was one more wake-up between the cycle and the
// Binding on a machine whose CPUs the API server keeps busy (issue 21).
func (r *Runner) queueBinds(ctx context.Context, batches []cache.Batch) {
	if len(batches) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	started := 0
	for ; started < len(batches) && !r.pumping && r.batchSlots.TryAcquire(1); started++ {
		r.startBind(queuedBatch{ctx: ctx, batch: batches[started]})
	}
	for _, b := range batches[started:] {
		r.binds = append(r.binds, queuedBatch{ctx: ctx, batch: b})
		r.queuedPods += len(b.Reqs)
	}
	if len(r.binds) > 0 && !r.pumping {
		r.pumping = true
		go r.pumpBinds()
	}
}

// bindInSlot binds a batch in a batch slot already taken, and frees the slot.
func (r *Runner) bindInSlot(ctx context.Context, b cache.Batch) {
	defer r.batchSlots.Release(1)
	r.bindBatch(ctx, b)
}

// pumpBinds starts a bindBatch for each queued batch as a batch slot frees, and
// returns when the queue is empty. A batch whose context has ended is still handed
// to bindBatch, which fails it and tells the cache, as before.
func (r *Runner) pumpBinds() {
	for {
		r.mu.Lock()
		if len(r.binds) == 0 {
			r.pumping = false
			r.binds = nil
			r.mu.Unlock()
			return
		}
		q := r.binds[0]
		r.binds[0] = queuedBatch{}
		r.binds = r.binds[1:]
		r.queuedPods -= len(q.batch.Reqs)
		r.wakeIfLow()
		r.mu.Unlock()
		// Never fails: the context is not the batch's, which may have ended.
		_ = r.batchSlots.Acquire(context.Background(), 1)
		r.startBind(q)
	}
}

// startBind hands a batch, its slot taken, to a bind worker (workerPool).
func (r *Runner) startBind(q queuedBatch) {
	r.binder.pool.run(q.ctx, func() { r.bindInSlot(q.ctx, q.batch) })
}
