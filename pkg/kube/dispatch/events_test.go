package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

func bindReq(id, node string) cache.BindRequest {
	return cache.BindRequest{Pod: &model.Pod{ID: model.PodID(id), UID: "uid-" + id}, Placement: placement.Placement{Pod: model.PodID(id), Node: node}}
}

// flush writes the queued Events as Run does, without its pacing.
func flush(e *Events) {
	for len(e.queue) > 0 {
		e.write(<-e.queue)
	}
}

func drain(c chan string) []string {
	var out []string
	for {
		select {
		case e := <-c:
			out = append(out, e)
		default:
			return out
		}
	}
}

// Each pod bound gets kube-scheduler's Scheduled Event; a gang with a PodGroup
// gets one more when bound whole, none when a member failed; a nil *Events
// writes nothing.
func TestScheduledEvents(t *testing.T) {
	pg := &schedulingv1alpha1.PodGroup{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "duo", UID: "uid-duo"}}
	lookup, err := gang.NewStaticLookup(pg)
	if err != nil {
		t.Fatal(err)
	}
	rec := events.NewFakeRecorder(10)
	e := NewEvents(rec, lookup, nil)
	b := cache.Batch{Gang: "podgroup:ns/duo", Min: 2, Reqs: []cache.BindRequest{bindReq("ns/a", "n2"), bindReq("ns/b", "n1")}}
	e.bound(b, []result{{req: b.Reqs[0], outcome: bound}, {req: b.Reqs[1], outcome: bound}})
	want := []string{
		"Normal Scheduled Successfully assigned ns/a to n2",
		"Normal Scheduled Successfully assigned ns/b to n1",
		"Normal Scheduled Successfully assigned 2 pods to n1, n2",
	}
	flush(e)
	if got := drain(rec.Events); len(got) != len(want) || got[0] != want[0] || got[1] != want[1] || got[2] != want[2] {
		t.Fatalf("events %q, want %q", got, want)
	}

	e.bound(b, []result{{req: b.Reqs[0], outcome: bound}, {req: b.Reqs[1], outcome: failed}})
	flush(e)
	if got := drain(rec.Events); len(got) != 1 || got[0] != want[0] {
		t.Fatalf("gang bound in part: events %q, want only %q", got, want[0])
	}
	lone := cache.Batch{Gang: "ns/c", Min: 1, Reqs: []cache.BindRequest{bindReq("ns/c", "n1")}}
	e.bound(lone, []result{{req: lone.Reqs[0], outcome: bound}})
	flush(e)
	if got := drain(rec.Events); len(got) != 1 {
		t.Fatalf("lone pod: events %q, want its own only", got)
	}
	var none *Events
	none.bound(b, []result{{req: b.Reqs[0], outcome: bound}})
}

// A burst of binds larger than the queue keeps EventQueue Events and drops and
// counts the rest; Run then writes every queued one.
func TestScheduledEventsBounded(t *testing.T) {
	rec := events.NewFakeRecorder(EventQueue + 10)
	dropped := 0
	e := NewEvents(rec, nil, func() { dropped++ })
	for i := range EventQueue + 7 {
		e.scheduled(bindReq(fmt.Sprintf("ns/p%d", i), "n1"))
	}
	if dropped != 7 || len(e.queue) != EventQueue {
		t.Fatalf("%d dropped, %d queued; want 7 and %d", dropped, len(e.queue), EventQueue)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	e.limiter = flowcontrol.NewFakeAlwaysRateLimiter()
	go e.Run(ctx)
	for i := range EventQueue {
		want := fmt.Sprintf("Normal Scheduled Successfully assigned ns/p%d to n1", i)
		if got := <-rec.Events; got != want {
			t.Fatalf("event %d: %q, want %q", i, got, want)
		}
	}
}

// While batches are being bound, Events are spaced at EventBusyQPS; once no batch
// was bound for BindQuiet they go at the client's rate.
func TestEventsYieldToBinds(t *testing.T) {
	e := NewEvents(events.NewFakeRecorder(1), nil, nil)
	now := time.Now()
	e.lastWrite = now
	if w := e.busyWait(now); w != 0 {
		t.Fatalf("no bind yet: wait %v, want 0", w)
	}
	e.bound(cache.Batch{}, nil)
	bindAt := time.Unix(0, e.lastBind.Load())
	e.lastWrite = bindAt
	if w := e.busyWait(bindAt); w != time.Second/EventBusyQPS {
		t.Fatalf("binds under way, an Event just written: wait %v, want %v", w, time.Second/EventBusyQPS)
	}
	if w := e.busyWait(bindAt.Add(time.Second / EventBusyQPS)); w > 0 {
		t.Fatalf("binds under way, the last Event 1/EventBusyQPS ago: wait %v, want none", w)
	}
	if w := e.busyWait(bindAt.Add(BindQuiet)); w != 0 {
		t.Fatalf("no bind for BindQuiet: wait %v, want 0", w)
	}
}
