package dispatch

import (
	"context"
	"sync/atomic"
)

// workerPool runs functions on goroutines that outlive them: a goroutine that is
// done waits for the next function instead of exiting, until the context it was
// last given ends; no more than max wait at once. The binds ran each batch and each
// gang member on a goroutine of its own, whose stack grew through client-go's call
// chain on every Binding: at 100 pods/s the stack copies were 3 % of
// gantry-scheduler's CPU (issue 21). run never blocks: with no goroutine waiting it
// starts one, so a function may hand work to the pool and wait for it.
type workerPool struct {
	handoff chan poolTask
	waiting atomic.Int64
	max     int64
}

type poolTask struct {
	ctx context.Context
	f   func()
}

func newWorkerPool(max int) *workerPool {
	return &workerPool{handoff: make(chan poolTask), max: int64(max)}
}

// run calls f on a waiting goroutine or a new one; the goroutine then waits for
// more work until ctx ends.
func (p *workerPool) run(ctx context.Context, f func()) {
	t := poolTask{ctx: ctx, f: f}
	select {
	case p.handoff <- t:
	default:
		go p.work(t)
	}
}

func (p *workerPool) work(t poolTask) {
	for {
		t.f()
		if p.waiting.Add(1) > p.max {
			p.waiting.Add(-1)
			return
		}
		done := t.ctx.Done()
		select {
		case t = <-p.handoff:
			p.waiting.Add(-1)
		case <-done:
			p.waiting.Add(-1)
			return
		}
	}
}
