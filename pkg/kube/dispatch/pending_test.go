package dispatch

import (
	"context"
	"errors"
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// pendingRunner is a Runner with only what explainPending uses; its status writer has
// no workers, so drain runs the queued writes in the test's goroutine.
func pendingRunner(client *fake.Clientset) (*Runner, func()) {
	s := newStatusWriter(client, events.NewFakeRecorder(100), 0)
	r := &Runner{client: client, status: s, lastReason: map[model.GangID]reasonKey{}}
	return r, s.drain
}

func hasReason(t *testing.T, client *fake.Clientset, name string) bool {
	t.Helper()
	p, err := client.CoreV1().Pods("ns").Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse && c.Reason != "" {
			return true
		}
	}
	return false
}

func pendingGang(reason string, pods ...string) cache.PendingGang {
	pd := cache.PendingGang{Pending: scheduler.Pending{Gang: "ns/share", Reason: reason}}
	for _, n := range pods {
		pd.Pods = append(pd.Pods, &model.Pod{ID: model.PodID("ns/" + n), UID: "uid-" + n})
	}
	return pd
}

// A pending reason whose write failed (etcd restarting) is written again by the next
// cycle with the same reason; before, it was remembered as written and the pod stayed
// without a reason for good (chaos round restart-etcd, LostPod).
func TestFailedPendingReasonIsWrittenAgain(t *testing.T) {
	client := fake.NewSimpleClientset(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "share-1"}})
	fail := true
	client.PrependReactor("patch", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if fail && a.GetSubresource() == "status" {
			fail = false
			return true, nil, errors.New("etcdserver: request timed out")
		}
		return false, nil, nil
	})
	r, drain := pendingRunner(client)
	pd := pendingGang("no node has a GPU with 0.5 of its memory free", "share-1")
	r.explainPending(context.Background(), pd)
	drain()
	if hasReason(t, client, "share-1") {
		t.Fatal("the fake API refused the first write, yet the pod has a reason")
	}
	r.explainPending(context.Background(), pd)
	drain()
	if !hasReason(t, client, "share-1") {
		t.Error("the pending reason was not written again after a failed write")
	}
	// Written now: the same reason is not written a third time.
	r.explainPending(context.Background(), pd)
	if n, _ := r.status.queued(); n != 0 {
		t.Errorf("%d writes queued for a reason already written", n)
	}
}

// A member that joins a pending gang (a Ray worker re-created) gets the gang's reason
// although the reason did not change.
func TestNewMemberOfPendingGangGetsTheReason(t *testing.T) {
	client := fake.NewSimpleClientset(
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-1"}},
		&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "w-2"}})
	r, drain := pendingRunner(client)
	r.explainPending(context.Background(), pendingGang("waits for GPUs", "w-1"))
	drain()
	r.explainPending(context.Background(), pendingGang("waits for GPUs", "w-1", "w-2"))
	drain()
	if !hasReason(t, client, "w-2") {
		t.Error("the member created later has no pending reason")
	}
}

// A pod's writes land in the order they were made, with every worker running: the
// last reason written is the last one the cycles gave.
func TestStatusWritesOfOnePodStayInOrder(t *testing.T) {
	rec := events.NewFakeRecorder(1000)
	s := newStatusWriter(fake.NewSimpleClientset(), rec, 8)
	p := &model.Pod{ID: "ns/p", UID: "u"}
	for i := 0; i < 1000; i++ {
		s.event(p, corev1.EventTypeNormal, "R", fmt.Sprint(i))
	}
	for i := 0; i < 1000; i++ {
		if got, want := <-rec.Events, fmt.Sprintf("Normal R %d", i); got != want {
			t.Fatalf("event %d is %q, want %q: a pod's writes were reordered", i, got, want)
		}
	}
}

// A reason that changes faster than the API takes the writes is written once, the
// latest: a pod's queued reason is replaced, not queued behind. Before, every reason
// of every cycle was queued, the lanes ran minutes behind, and a new pod's first
// reason waited behind them (the soak's LostPods: pods without a reason after 2 min).
func TestANewerReasonReplacesAQueuedOne(t *testing.T) {
	var objs []runtime.Object
	for i := 0; i < 11; i++ {
		objs = append(objs, &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: fmt.Sprint("p-", i)}})
	}
	client := fake.NewSimpleClientset(objs...)
	patches := 0
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) {
		patches++
		return false, nil, nil
	})
	s := newStatusWriter(client, events.NewFakeRecorder(10000), 0)
	for cycle := 0; cycle < 100; cycle++ {
		for i := 0; i < 10; i++ {
			s.pending(context.Background(), &model.Pod{ID: model.PodID(fmt.Sprint("ns/p-", i))}, corev1.PodReasonUnschedulable, "FailedScheduling", fmt.Sprintf("at most %d fit", cycle), nil)
		}
	}
	s.pending(context.Background(), &model.Pod{ID: "ns/p-10"}, corev1.PodReasonUnschedulable, "FailedScheduling", "new", nil)
	if n, _ := s.queued(); n != 11 {
		t.Fatalf("%d condition writes queued for 11 pods, want one each", n)
	}
	s.drain()
	if patches != 11 {
		t.Errorf("%d patches for 11 pods, want 11", patches)
	}
	p, err := client.CoreV1().Pods("ns").Get(context.Background(), "p-3", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Status.Conditions) != 1 || p.Status.Conditions[0].Message != "at most 99 fit" {
		t.Errorf("conditions %+v, want the last reason only", p.Status.Conditions)
	}
	if !hasReason(t, client, "p-10") {
		t.Error("the new pod has no reason")
	}
}
