package kube

import (
	"context"

	"github.com/gantry-dev/gantry/pkg/names/gvr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
)

// ensureDefaultQueue creates the queue that pods with no queue label are charged to,
// if it does not exist: a top-level queue with unlimited quota and no limit, as KAI
// Scheduler's default queue, so that an unlabelled pod, preemptible or not, is held
// back neither by a missing queue nor by a quota of 0 (non-preemptible work may not
// borrow). It is
// idempotent: a queue that exists, whatever its spec, is left alone, and a scheduler
// that races another to create it takes AlreadyExists as success. Failure is logged,
// not fatal: the scheduler works without it, charging such pods nowhere.
func ensureDefaultQueue(ctx context.Context, dyn dynamic.Interface, name string) {
	queues := dyn.Resource(gvr.Queue)
	if _, err := queues.Get(ctx, name, metav1.GetOptions{}); err == nil {
		return
	} else if !apierrors.IsNotFound(err) {
		klog.InfoS("Cannot read the default queue; not creating it", "queue", name, "err", err)
		return
	}
	q := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.Queue.GroupVersion().String(),
		"kind":       "Queue",
		"metadata": map[string]any{
			"name": name,
		},
		"spec": map[string]any{
			"displayName": "Default",
			"resources":   map[string]any{"gpu": map[string]any{"quota": int64(-1), "limit": int64(-1)}},
		},
	}}
	_, err := queues.Create(ctx, q, metav1.CreateOptions{})
	switch {
	case err == nil:
		klog.InfoS("Created the default queue", "queue", name)
	case apierrors.IsAlreadyExists(err):
	default:
		klog.InfoS("Cannot create the default queue; pods with no queue are charged nowhere", "queue", name, "err", err)
	}
}
