package dispatch

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/tools/events"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/names"
)

// A pod evicted twice reaches the API as one events.k8s.io Event whose series
// counts 2, written when the second eviction happens (client-go writes counts past
// 2 only when the series ends, minutes later): what test/invariant's double-eviction
// check reads. A gang's member evicted below its minimum gets a Warning of its own.
// Through client-go's real broadcaster, over a fake clientset.
func TestASecondEvictionOfAPodReachesTheAPIAsASeries(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	client, _ := evictionClient("")
	b := events.NewBroadcaster(&events.EventSinkImpl{Interface: client.EventsV1()})
	if err := b.StartRecordingToSinkWithContext(ctx); err != nil {
		t.Fatal(err)
	}
	defer b.Shutdown()
	e := newEvictor(client, b.NewRecorder(scheme.Scheme, "gantry-scheduler"), 100, 100)
	twice := victims("v1")
	for i := 0; i < 2; i++ {
		if _, _, err := e.evictFor(ctx, twice, func() bool { return true }); err != nil {
			t.Fatal(err)
		}
	}
	below := victims("v2")
	below[0].Kind = cache.KindBelowMinimum
	if _, _, err := e.evictFor(ctx, below, func() bool { return true }); err != nil {
		t.Fatal(err)
	}

	var got []eventsv1.Event
	// Generous: a series patch that overtakes its Event's creation is retried after
	// client-go's 10 s sleep.
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		l, err := client.EventsV1().Events("ns").List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, err
		}
		got = l.Items
		for _, ev := range got {
			if ev.Regarding.Name == "v1" && ev.Series != nil && ev.Series.Count == 2 {
				return len(got) == 2, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("Events %+v: want v1's with series.count 2 and v2's", got)
	}
	for _, ev := range got {
		want := [4]string{corev1.EventTypeNormal, names.EventPreempted, ActionPreempting, "uid-v1"}
		if ev.Regarding.Name == "v2" {
			want = [4]string{corev1.EventTypeWarning, names.EventGangBelowMinimum, ActionEvicting, "uid-v2"}
		}
		if have := [4]string{ev.Type, ev.Reason, ev.Action, string(ev.Regarding.UID)}; have != want || ev.Regarding.Kind != "Pod" {
			t.Errorf("Event on %s: %v about a %s, want %v about a Pod", ev.Regarding.Name, have, ev.Regarding.Kind, want)
		}
	}
}

// A note is cut to the API server's limit on a rune boundary, ending " ...".
func TestTruncateNote(t *testing.T) {
	if s := strings.Repeat("a", NoteLimit); truncateNote(s) != s {
		t.Error("a note at the limit was cut")
	}
	// The cut falls in the first é (2 bytes, at NoteLimit-5 and -4): it goes whole.
	long := strings.Repeat("a", NoteLimit-5) + "ééé"
	if got, want := truncateNote(long), strings.Repeat("a", NoteLimit-5)+" ..."; got != want {
		t.Errorf("cut to %d bytes ending %q, want %d ending %q", len(got), got[len(got)-8:], len(want), want[len(want)-8:])
	}
}
