package bench

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
)

func fastRetries(t *testing.T) {
	base, maxPause := retryBase, retryMax
	retryBase, retryMax = time.Millisecond, 2*time.Millisecond
	t.Cleanup(func() { retryBase, retryMax = base, maxPause })
}

// A pod creation answered with a timeout (the quota admission's "resource quota
// evaluation timed out" on a loaded API server) is tried again; one whose first try
// reached etcd, found there on the next, counts as created. A broken HTTP/2 stream
// is tried again too.
func TestCreatePodsRetriesTimeouts(t *testing.T) {
	fastRetries(t)
	client := fake.NewClientset()
	calls := map[string]int{}
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.CreateAction).GetObject().(*corev1.Pod).Name
		calls[name]++
		switch {
		case name == "pod-00000" && calls[name] <= 2:
			return true, nil, apierrors.NewInternalError(errors.New("resource quota evaluation timed out"))
		case name == "pod-00001" && calls[name] == 1:
			// stored, but the answer was a timeout
			if err := client.Tracker().Create(schema.GroupVersionResource{Version: "v1", Resource: "pods"}, a.(k8stesting.CreateAction).GetObject(), Namespace); err != nil {
				t.Error(err)
			}
			return true, nil, apierrors.NewServerTimeout(schema.GroupResource{Resource: "pods"}, "create", 1)
		case name == "pod-00002" && calls[name] == 1:
			// the HTTP/2 stream broke under load (drain-100k, pod 45,973)
			return true, nil, errors.New(`Post "https://127.0.0.1:44221/api/v1/namespaces/bench/pods": stream error: stream ID 111987; INTERNAL_ERROR; received from peer`)
		}
		return false, nil, nil
	})
	s := Scenario{Name: "t", Nodes: 1, GPUsPerNode: 8, Pods: 3}
	if err := createPods(context.Background(), client, s, Gantry, 1); err != nil {
		t.Fatalf("createPods: %v", err)
	}
	pods, err := client.CoreV1().Pods(Namespace).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(pods.Items) != 3 || calls["pod-00000"] != 3 || calls["pod-00001"] != 2 || calls["pod-00002"] != 2 {
		t.Fatalf("%d pods created after %v calls; want 3, pod-00000 tried 3 times, pod-00001 and pod-00002 twice", len(pods.Items), calls)
	}
}

// An error that another try cannot fix fails at once, and a timeout that persists
// fails after retryAttempts tries, saying so.
func TestCreateGivesUp(t *testing.T) {
	fastRetries(t)
	tries := 0
	err := create(context.Background(), "pod 7", func(context.Context) error {
		tries++
		return apierrors.NewForbidden(schema.GroupResource{Resource: "pods"}, "pod-7", errors.New("exceeded quota"))
	})
	if err == nil || tries != 1 || !strings.Contains(err.Error(), "create pod 7") {
		t.Fatalf("forbidden: %v after %d tries; want a failure after one", err, tries)
	}
	tries = 0
	err = create(context.Background(), "pod 8", func(context.Context) error {
		tries++
		return apierrors.NewTooManyRequests("slow down", 1)
	})
	if err == nil || tries != retryAttempts || !strings.Contains(err.Error(), "transient") {
		t.Fatalf("429s: %v after %d tries; want a failure after %d", err, tries, retryAttempts)
	}
}

// The API server's count of watches it closed is read by resource, summed over
// groups, and a resource with none is left out.
func TestParseClosedWatches(t *testing.T) {
	page := `# HELP apiserver_terminated_watchers_total [ALPHA] Counter of watchers closed due to unresponsiveness broken by resource type.
# TYPE apiserver_terminated_watchers_total counter
apiserver_terminated_watchers_total{group="",resource="pods"} 3
apiserver_terminated_watchers_total{group="",resource="nodes"} 0
apiserver_terminated_watchers_total{group="events.k8s.io",resource="events"} 1
apiserver_terminated_watchers_total{group="",resource="events"} 2
apiserver_request_total{resource="pods"} 9
`
	got, err := parseClosedWatches(page)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 2 || got["pods"] != 3 || got["events"] != 3 {
		t.Fatalf("got %v, want pods 3 and events 3", got)
	}
	if got, err := parseClosedWatches("apiserver_request_total 1\n"); err != nil || got != nil {
		t.Fatalf("got %v, %v from a page without the counter, want nil", got, err)
	}
}
