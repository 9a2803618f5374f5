package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
