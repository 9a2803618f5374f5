package bootstrap

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynamicfake "k8s.io/client-go/dynamic/fake"
	clienttesting "k8s.io/client-go/testing"
)

func newClient(objs ...runtime.Object) *dynamicfake.FakeDynamicClient {
	return dynamicfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(),
		map[schema.GroupVersionResource]string{gvr.Queue: "QueueList"}, objs...)
}

func queueObj(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "scheduling.gantry.dev/v1alpha1", "kind": "Queue",
		"metadata": map[string]any{"name": name}, "spec": spec,
	}}
}

func TestEnsureQueueCreatesMissing(t *testing.T) {
	client := newClient()
	q := Queue{Name: "default", Labels: map[string]string{"app.kubernetes.io/part-of": "gantry"},
		Spec: map[string]any{"displayName": "Default"}}
	if err := EnsureQueue(context.Background(), client, q, time.Second); err != nil {
		t.Fatal(err)
	}
	got, err := client.Resource(gvr.Queue).Get(context.Background(), "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if name, _, _ := unstructured.NestedString(got.Object, "spec", "displayName"); name != "Default" || got.GetLabels()["app.kubernetes.io/part-of"] != "gantry" {
		t.Errorf("created %v", got.Object)
	}
}

func TestEnsureQueueLeavesExistingAlone(t *testing.T) {
	client := newClient(queueObj("default", map[string]any{"displayName": "Edited by the admin"}))
	if err := EnsureQueue(context.Background(), client, Queue{Name: "default", Spec: map[string]any{"displayName": "Default"}}, time.Second); err != nil {
		t.Fatal(err)
	}
	got, _ := client.Resource(gvr.Queue).Get(context.Background(), "default", metav1.GetOptions{})
	if name, _, _ := unstructured.NestedString(got.Object, "spec", "displayName"); name != "Edited by the admin" {
		t.Errorf("an existing queue was changed: %v", got.Object)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("unexpected %s", a.GetVerb())
		}
	}
}

// While no replica serves the Queue webhook, the API server refuses the create
// (failurePolicy Fail); EnsureQueue tries again.
func TestEnsureQueueRetriesWhileWebhookDown(t *testing.T) {
	client := newClient()
	fails := 2
	client.PrependReactor("create", "queues", func(clienttesting.Action) (bool, runtime.Object, error) {
		if fails == 0 {
			return false, nil, nil
		}
		fails--
		return true, nil, apierrors.NewInternalError(errorString(`failed calling webhook "queues.scheduling.gantry.dev": connection refused`))
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := EnsureQueue(ctx, client, Queue{Name: "default", Spec: map[string]any{}}, 10*time.Millisecond); err != nil {
		t.Fatal(err)
	}
	if fails != 0 {
		t.Errorf("%d refusals left", fails)
	}
}

func TestEnsureQueueInvalidSpecIsReported(t *testing.T) {
	client := newClient()
	client.PrependReactor("create", "queues", func(clienttesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewInvalid(schema.GroupKind{Group: names.GroupScheduling, Kind: "Queue"}, "default", nil)
	})
	err := EnsureQueue(context.Background(), client, Queue{Name: "default"}, time.Millisecond)
	if err == nil || !apierrors.IsInvalid(err) {
		t.Fatalf("got %v, want the Invalid error", err)
	}
}

func TestQueueFromEnv(t *testing.T) {
	t.Setenv(EnvDefaultQueue, "")
	if _, ok, err := QueueFromEnv(); ok || err != nil {
		t.Errorf("unset: ok=%v err=%v", ok, err)
	}
	t.Setenv(EnvDefaultQueue, `{"name":"default","spec":{"resources":{"gpu":{"quota":0}}}}`)
	q, ok, err := QueueFromEnv()
	if !ok || err != nil || q.Name != "default" || q.Spec["resources"] == nil {
		t.Errorf("got %+v %v %v", q, ok, err)
	}
	t.Setenv(EnvDefaultQueue, `{"spec":{}}`)
	if _, _, err := QueueFromEnv(); err == nil {
		t.Error("a queue without a name was accepted")
	}
	t.Setenv(EnvDefaultQueue, `not json`)
	if _, _, err := QueueFromEnv(); err == nil {
		t.Error("garbage was accepted")
	}
}

type errorString string

func (e errorString) Error() string { return string(e) }
