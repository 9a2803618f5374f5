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
func (r *Runner) queueBinds(ctx context.Context, batches []cache.Batch) {
	if len(batches) == 0 {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, b := range batches {
		r.binds = append(r.binds, queuedBatch{ctx: ctx, batch: b})
		r.queuedPods += len(b.Reqs)
	}
	if !r.pumping {
		r.pumping = true
		go r.pumpBinds()
	}
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
		go func() {
			defer r.batchSlots.Release(1)
			r.bindBatch(q.ctx, q.batch)
		}()
	}
}
