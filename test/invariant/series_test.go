package invariant

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	eventsv1 "k8s.io/api/events/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	ktypes "k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gantry-dev/gantry/pkg/kube/dispatch"
	"github.com/gantry-dev/gantry/pkg/names"
)

// The scheduler's Preempted Events go through the events.k8s.io pipeline
// (dispatch.NewEventBroadcaster), which folds a pod's second Preempted into a series
// on its first Event. Through a real API server: the core/v1 view of that Event is
// found with the field selectors the e2e tests use, carries the note as its message
// and the series count, and the checker reports the pod preempted twice; a pod
// preempted once is not reported.
func TestASecondPreemptedInASeriesIsADoubleEviction(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	const ns = "invariant-series"
	c := startIn(ctx, t, ns)
	defer c.Stop()
	eb, err := dispatch.NewEventBroadcaster(ctx, env.Config)
	if err != nil {
		t.Fatal(err)
	}
	eb.StartRecordingToSink(ctx.Done())
	defer eb.Shutdown()
	rec := eb.NewRecorder("gantry-scheduler")

	uids := map[string]string{}
	for _, name := range []string{"once", "twice"} {
		p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		created, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uids[name] = string(created.UID)
	}
	preempt := func(name string) {
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: ktypes.UID(uids[name])}
		rec.Eventf(ref, nil, corev1.EventTypeNormal, names.EventPreempted, dispatch.ActionPreempting, "%s", "by "+ns+"/serve")
	}
	preempt("once")
	var seen []corev1.Event
	list := func(name string) func(context.Context) (bool, error) {
		return func(ctx context.Context) (bool, error) {
			l, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Preempted,involvedObject.name=" + name})
			if err != nil {
				return false, nil
			}
			seen = l.Items
			return len(seen) == 1 && (name == "once" || seen[0].Series != nil && seen[0].Series.Count == 2), nil
		}
	}
	// Generous deadlines: a series patch that overtakes its Event's creation is
	// retried after client-go's 10 s sleep, and CI's API server is slow.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, list("once")); err != nil {
		t.Fatalf("once: core/v1 Events %+v, want one", seen)
	}
	preempt("twice")
	preempt("twice")
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, list("twice")); err != nil {
		t.Fatalf("twice: core/v1 Events %+v, want one with series.count 2", seen)
	}
	if e := seen[0]; e.Message != "by "+ns+"/serve" || string(e.InvolvedObject.UID) != uids["twice"] {
		t.Errorf("core/v1 view %+v: want the note as message, the pod's UID", e)
	}
	var violations []Violation
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		violations = c.Violations()
		for _, v := range violations {
			if v.Kind == DoubleEviction && v.Subject == "pod "+ns+"/twice" {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("violations %v: want DoubleEviction of %s/twice", violations, ns)
	}
	// The checker saw once's Event before twice's series (the watch keeps the API's order).
	for _, v := range violations {
		if strings.HasSuffix(v.Subject, "/once") {
			t.Errorf("a pod preempted once reported: %v", v)
		}
	}
}

// The API server refuses an events.k8s.io note over dispatch.NoteLimit bytes, the
// limit the scheduler cuts its notes to.
func TestNoteLimitIsTheAPIServers(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	ctx := context.Background()
	const ns = "invariant-note"
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	for _, n := range []int{dispatch.NoteLimit, dispatch.NoteLimit + 1} {
		e := &eventsv1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, GenerateName: "note-"},
			EventTime: metav1.NowMicro(), ReportingController: "gantry-scheduler", ReportingInstance: "gantry-scheduler-test",
			Action: dispatch.ActionScheduling, Reason: names.EventFailedScheduling, Type: corev1.EventTypeWarning,
			Regarding: corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: "p"}, Note: strings.Repeat("a", n)}
		_, err := env.Client.EventsV1().Events(ns).Create(ctx, e, metav1.CreateOptions{})
		if ok := n <= dispatch.NoteLimit; (err == nil) != ok {
			t.Errorf("note of %d bytes: err %v, want accepted %v", n, err, ok)
		}
	}
}
