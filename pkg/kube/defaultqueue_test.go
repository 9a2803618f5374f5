package kube

import (
	"context"
	"testing"

	"github.com/gantry-dev/gantry/pkg/names/gvr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	dynfake "k8s.io/client-go/dynamic/fake"
	k8stesting "k8s.io/client-go/testing"
)

func fakeDynamic() *dynfake.FakeDynamicClient {
	return dynfake.NewSimpleDynamicClientWithCustomListKinds(runtime.NewScheme(), map[schema.GroupVersionResource]string{gvr.Queue: "QueueList"})
}

func TestDefaultQueueIsCreatedOnceAndLeftAlone(t *testing.T) {
	dyn := fakeDynamic()
	ctx := context.Background()
	ensureDefaultQueue(ctx, dyn, "default")
	q, err := dyn.Resource(gvr.Queue).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the default queue was not created: %v", err)
	}
	// An operator's own spec is kept: a second start does not overwrite it.
	_ = unstructured.SetNestedField(q.Object, "Mine", "spec", "displayName")
	if _, err := dyn.Resource(gvr.Queue).Update(ctx, q, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	ensureDefaultQueue(ctx, dyn, "default")
	q, _ = dyn.Resource(gvr.Queue).Get(ctx, "default", metav1.GetOptions{})
	if got, _, _ := unstructured.NestedString(q.Object, "spec", "displayName"); got != "Mine" {
		t.Fatalf("displayName = %q after a restart, want the operator's", got)
	}
}

func TestDefaultQueueRaceIsTolerated(t *testing.T) {
	dyn := fakeDynamic()
	creates := 0
	dyn.PrependReactor("create", "queues", func(k8stesting.Action) (bool, runtime.Object, error) {
		creates++
		return true, nil, apierrors.NewAlreadyExists(gvr.Queue.GroupResource(), "default")
	})
	ensureDefaultQueue(context.Background(), dyn, "default") // must not panic or fail
	if creates != 1 {
		t.Fatalf("creates = %d, want one attempt", creates)
	}
}
