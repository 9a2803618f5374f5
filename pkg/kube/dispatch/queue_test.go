package dispatch

import (
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
)

// A cycle's batches are bound in plan order, at most BindWorkers at once, the rest
// waiting in the queue rather than in a goroutine each.
func TestBindsQueueInPlanOrder(t *testing.T) {
	r, order, release := heldBinds(t, 100)
	// newFake's binder has 8 slots: leave one, so that binds go one at a time.
	if err := r.binder.slots.Acquire(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	var batches []cache.Batch
	for i := range 50 {
		b := cache.Batch{Min: 1, Reqs: []cache.BindRequest{req(fmt.Sprintf("p%02d", i), "n")}}
		batches = append(batches, b)
	}
	r.queueBinds(context.Background(), batches)
	if got := <-order; got != "p00" {
		t.Fatalf("first bind %s, want p00", got)
	}
	// One is binding and the pump takes one more off the queue to wait for a batch
	// slot, so the queue settles at 48. The pump runs on its own goroutine and may
	// take its batch after the first bind reaches the API: wait for 48 rather than
	// read it once. A runner that started a goroutine per batch never shows 48.
	queued := func() int {
		r.mu.Lock()
		defer r.mu.Unlock()
		return len(r.binds)
	}
	for deadline := time.Now().Add(10 * time.Second); queued() != 48; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%d batches queued while the first binds, want 48", queued())
		}
	}
	close(release)
	for i := 1; i < 50; i++ {
		select {
		case got := <-order:
			if want := fmt.Sprintf("p%02d", i); got != want {
				t.Fatalf("bind %d was %s, want %s", i, got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("only %d of 50 batches bound", i)
		}
	}
}

// A batch that finds a batch slot free while nothing is queued starts at once, with
// no pump; one that comes while earlier batches are queued waits behind them, so
// that a later cycle's bind never overtakes an earlier cycle's.
func TestBindStartsAtOnceOnlyBehindNothing(t *testing.T) {
	r, order, release := heldBinds(t, 10)
	one := func(name string) []cache.Batch {
		return []cache.Batch{{Min: 1, Reqs: []cache.BindRequest{req(name, "n")}}}
	}
	r.queueBinds(context.Background(), one("first"))
	r.mu.Lock()
	pumping := r.pumping
	r.mu.Unlock()
	if pumping {
		t.Fatal("a batch with a free slot went through the pump")
	}
	if got := <-order; got != "first" {
		t.Fatalf("bound %s, want first", got)
	}
	// The slot is taken: these queue, in order, behind nothing but the slot.
	r.queueBinds(context.Background(), append(one("second"), one("third")...))
	r.queueBinds(context.Background(), one("fourth"))
	close(release)
	for _, want := range []string{"second", "third", "fourth"} {
		select {
		case got := <-order:
			if got != want {
				t.Fatalf("bound %s, want %s", got, want)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("%s never bound", want)
		}
	}
}

// heldBinds is a runner with one batch slot whose binds report their pod's name on
// order, in the order they reach the API, and return only once release is closed.
func heldBinds(t *testing.T, n int) (r *Runner, order chan string, release chan struct{}) {
	release = make(chan struct{})
	order = make(chan string, n)
	api := &fakeAPI{bind: func(name string, _ int) error {
		order <- name
		<-release
		return nil
	}}
	r = New(cache.New([]string{"s"}, &gang.StaticLookup{}, ""), nil, nil, events.NewFakeRecorder(10), nil, Options{BindWorkers: 1})
	r.binder = newFake(t, api)
	return r, order, release
}

// Batches bound one after another reuse the goroutines that bound the last, their
// gangs' members included: a goroutine per batch and per member grew a new stack
// through client-go on every Binding. The goroutines waiting for work leave when the
// context of their last batch ends.
func TestBindWorkersAreReused(t *testing.T) {
	for _, members := range []int{1, 4} {
		t.Run(fmt.Sprintf("%d pods a batch", members), func(t *testing.T) {
			goroutines := make(chan string, members)
			api := &fakeAPI{bind: func(string, int) error {
				goroutines <- goroutineID()
				return nil
			}}
			r := New(cache.New([]string{"s"}, &gang.StaticLookup{}, ""), nil, nil, events.NewFakeRecorder(10), nil, Options{BindWorkers: 4})
			r.binder = newFake(t, api)
			ctx, cancel := context.WithCancel(context.Background())
			seen := map[string]bool{}
			const batches = 100
			for i := range batches {
				b := cache.Batch{Min: members}
				for m := range members {
					b.Reqs = append(b.Reqs, req(fmt.Sprintf("p%03d-%d", i, m), "n"))
				}
				r.queueBinds(ctx, []cache.Batch{b})
				for range members {
					seen[<-goroutines] = true
				}
				// Wait until the batch has let its slot go, as the next cycle would come.
				for deadline := time.Now().Add(10 * time.Second); !r.batchSlots.TryAcquire(4); time.Sleep(100 * time.Microsecond) {
					if time.Now().After(deadline) {
						t.Fatalf("batch %d never let its slot go", i)
					}
				}
				r.batchSlots.Release(4)
			}
			// A worker between finishing and waiting for the next function misses
			// it, and one more starts; a goroutine per batch and member would be
			// 100 × (members - 1) and more.
			if len(seen) > 10+members {
				t.Errorf("%d batches of %d bound one after another on %d goroutines, want a few", batches, members, len(seen))
			}
			cancel()
			for deadline := time.Now().Add(10 * time.Second); r.binder.pool.waiting.Load() != 0; time.Sleep(time.Millisecond) {
				if time.Now().After(deadline) {
					t.Fatalf("%d workers still wait after their context ended", r.binder.pool.waiting.Load())
				}
			}
		})
	}
}

// goroutineID is the calling goroutine's number, from its stack's first line.
func goroutineID() string {
	buf := make([]byte, 64)
	buf = buf[:runtime.Stack(buf, false)]
	id, _, _ := strings.Cut(strings.TrimPrefix(string(buf), "goroutine "), " ")
	return id
}
