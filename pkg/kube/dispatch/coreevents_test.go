package dispatch

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
	clocktesting "k8s.io/utils/clock/testing"
)

// seenSink hands every Event the broadcaster writes to a channel.
type seenSink struct{ seen chan *corev1.Event }

func (s seenSink) Create(e *corev1.Event) (*corev1.Event, error) { s.seen <- e; return e, nil }
func (s seenSink) Update(e *corev1.Event) (*corev1.Event, error) { s.seen <- e; return e, nil }
func (s seenSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	s.seen <- e
	return e, nil
}

// The correlator forgets an object once CoreEventCache others were evented after
// it: a pod whose Events the spam filter had stopped (its burst of 25 spent) is
// heard again after CoreEventCache other pods, where client-go's default cache
// (4,096) still remembers and drops it. That per-object state is what grew the
// soak's heap for 25 minutes.
func TestCoreEventCorrelatorForgetsAfterCoreEventCacheObjects(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := newCoreBroadcaster(ctx, clocktesting.NewFakeClock(time.Unix(1e9, 0)))
	defer b.Shutdown()
	sink := seenSink{seen: make(chan *corev1.Event, 4*CoreEventCache)}
	b.StartRecordingToSink(sink)
	rec := b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: "gantry-scheduler"})
	pod := func(name string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID(name)}}
	}
	// wait reads Events until one about name with reason arrives; the broadcaster
	// writes in order, so every Event sent before it has been decided by then.
	wait := func(name, reason string) (others []string) {
		t.Helper()
		deadline := time.After(2 * time.Minute)
		for {
			select {
			case e := <-sink.seen:
				if e.InvolvedObject.Name == name && e.Reason == reason {
					return others
				}
				others = append(others, e.InvolvedObject.Name+"/"+e.Reason)
			case <-deadline:
				t.Fatalf("no Event %s for %s", reason, name)
			}
		}
	}
	a := pod("a")
	for i := 0; i < 26; i++ { // distinct reasons: no aggregation; the 26th is over the burst
		rec.Event(a, corev1.EventTypeWarning, fmt.Sprintf("R%d", i), "m")
	}
	rec.Event(pod("marker"), corev1.EventTypeWarning, "Marker", "m")
	if got := wait("marker", "Marker"); len(got) != 25 {
		t.Fatalf("%d Events about a before the marker, want its burst of 25", len(got))
	}
	// CoreEventCache other pods, in batches the broadcaster's queue (1,000) holds.
	for i := 0; i < CoreEventCache; i++ {
		name := fmt.Sprintf("p%d", i)
		rec.Event(pod(name), corev1.EventTypeWarning, "Other", "m")
		if i%200 == 199 || i == CoreEventCache-1 {
			wait(name, "Other")
		}
	}
	rec.Event(a, corev1.EventTypeWarning, "Again", "m")
	rec.Event(pod("marker"), corev1.EventTypeWarning, "Marker2", "m")
	got := wait("marker", "Marker2")
	if len(got) != 1 || got[0] != "a/Again" {
		t.Fatalf("after %d other pods, a's Event gave %v before the marker: want it written (a forgotten)", CoreEventCache, got)
	}
}

// blockingSink records each write and holds it until released.
type blockingSink struct {
	arrived chan string
	release chan struct{}
	missing map[string]bool // Patches of these names answer NotFound
}

func (s *blockingSink) write(op string, e *corev1.Event) (*corev1.Event, error) {
	s.arrived <- op + " " + e.Name
	<-s.release
	if op == "patch" && s.missing[e.Name] {
		return nil, apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, e.Name)
	}
	return e, nil
}
func (s *blockingSink) Create(e *corev1.Event) (*corev1.Event, error) { return s.write("create", e) }
func (s *blockingSink) Update(e *corev1.Event) (*corev1.Event, error) { return s.write("update", e) }
func (s *blockingSink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	return s.write("patch", e)
}

// Events are written CoreEventWorkers at a time, not one round trip after another;
// one Event's writes stay in order, and a Patch of an Event that is gone creates it.
func TestCoreEventsAreWrittenInParallel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &blockingSink{arrived: make(chan string, 64), release: make(chan struct{}), missing: map[string]bool{}}
	s := newParallelSink(ctx, inner, CoreEventWorkers)
	// One Event per worker: all their Creates are under way before any returns.
	names := map[int]string{}
	for i := 0; len(names) < CoreEventWorkers; i++ {
		if i == 100000 {
			t.Fatalf("names reach only %d of %d workers", len(names), CoreEventWorkers)
		}
		n := fmt.Sprintf("pod-%d.17", i)
		if _, ok := names[s.worker(n)]; !ok {
			names[s.worker(n)] = n
		}
	}
	next := func() string {
		t.Helper()
		select {
		case op := <-inner.arrived:
			return op
		case <-time.After(2 * time.Minute):
			t.Fatal("a write never reached the API while others were under way")
		}
		return ""
	}
	for _, n := range names {
		if _, err := s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: n}}); err != nil {
			t.Fatal(err)
		}
	}
	for range names {
		next() // every worker's Create is in flight, none released
	}
	for range names {
		inner.release <- struct{}{}
	}
	// Create, Patch, Patch of one Event: one worker, in order; its second Patch finds
	// it gone and creates it again.
	e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "a.1", ResourceVersion: "7"}}
	inner.missing["a.1"] = true
	_, _ = s.Create(e)
	_, _ = s.Patch(e, []byte("{}"))
	var got []string
	for i := 0; i < 3; i++ {
		got = append(got, next())
		inner.release <- struct{}{}
	}
	if want := []string{"create a.1", "patch a.1", "create a.1"}; fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("writes %v, want %v", got, want)
	}
}

// flakySink answers each write with the next of errs (nil when they run out).
type flakySink struct {
	arrived chan string
	errs    []error
}

func (s *flakySink) write(op string, e *corev1.Event) (*corev1.Event, error) {
	var err error
	if len(s.errs) > 0 {
		err, s.errs = s.errs[0], s.errs[1:]
	}
	s.arrived <- fmt.Sprintf("%s %s %v", op, e.Name, err != nil)
	return e, err
}
func (s *flakySink) Create(e *corev1.Event) (*corev1.Event, error) { return s.write("create", e) }
func (s *flakySink) Update(e *corev1.Event) (*corev1.Event, error) { return s.write("update", e) }
func (s *flakySink) Patch(e *corev1.Event, _ []byte) (*corev1.Event, error) {
	return s.write("patch", e)
}

// A write the API server could not take (no answer, 429, 503) is tried again; one it
// refused (invalid) is not: an Event survives an API server restart, a bad one is
// not retried forever.
func TestCoreEventWriteIsRetriedWhileTheAPIServerCannotTakeIt(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	inner := &flakySink{arrived: make(chan string, 16), errs: []error{
		errors.New("connection refused"), apierrors.NewTooManyRequests("slow down", 1),
		apierrors.NewServiceUnavailable("restarting"), nil,
		apierrors.NewBadRequest("invalid"),
	}}
	s := newParallelSink(ctx, inner, 1)
	s.retryWait = time.Millisecond
	_, _ = s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "a.1"}})
	_, _ = s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "b.1"}})
	_, _ = s.Create(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "c.1"}})
	var got []string
	for len(got) < 6 {
		select {
		case op := <-inner.arrived:
			got = append(got, op)
		case <-time.After(2 * time.Minute):
			t.Fatalf("writes %v, then none", got)
		}
	}
	want := []string{"create a.1 true", "create a.1 true", "create a.1 true", "create a.1 false", "create b.1 true", "create c.1 false"}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("writes %v, want %v", got, want)
	}
}
