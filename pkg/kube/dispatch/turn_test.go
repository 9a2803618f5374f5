package dispatch

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"
)

// orderLimiter records whose token each Wait handed out (the group named in the
// context), yielding between tokens so that groups waiting side by side interleave.
type orderLimiter struct {
	countingLimiter
	order []string
}

type groupKey struct{}

func (l *orderLimiter) Wait(ctx context.Context) error {
	l.mu.Lock()
	l.order = append(l.order, ctx.Value(groupKey{}).(string))
	l.mu.Unlock()
	time.Sleep(time.Millisecond)
	return nil
}

// The preemptors of a burst take their tokens one group after another, so that the
// first is evicted first instead of every group finishing at the end of the burst.
func TestEvictionGroupsTakeTokensInTurn(t *testing.T) {
	client, _ := evictionClient("")
	e := newEvictor(client, events.NewFakeRecorder(100), 100, 100)
	l := &orderLimiter{}
	e.limiter = l
	var wg sync.WaitGroup
	for _, g := range []string{"a", "b", "c"} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ctx := context.WithValue(context.Background(), groupKey{}, g)
			vs := victims(g+"1", g+"2", g+"3", g+"4")
			if _, _, err := e.evictFor(ctx, vs, func() bool { return true }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got := strings.Join(l.order, "")
	for _, g := range []string{"a", "b", "c"} {
		if !strings.Contains(got, strings.Repeat(g, 4)) {
			t.Errorf("tokens handed out in the order %s: group %s's four are not together", got, g)
		}
	}
}
