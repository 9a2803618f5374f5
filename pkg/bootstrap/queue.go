// Package bootstrap creates the objects a fresh Gantry install needs that the chart
// cannot apply itself: the default Queue. The chart ships the CRDs as templates (so
// `helm upgrade` upgrades them), and Helm maps every object of a release before it
// creates any, so a Queue in the same release as its CRD fails a fresh `helm install`
// ("ensure CRDs are installed first"). Volcano and KAI Scheduler create their default
// queues from their own components for the same reason.
//
// The scheduler calls EnsureQueue once at start, on every replica. It creates the Queue
// when it is missing and never changes an existing one: after the install the queue is
// the cluster admin's (or their GitOps repository's) to edit. The create goes through
// the Queue webhook like any other; while no replica serves it yet, EnsureQueue retries.
package bootstrap

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"time"

	"github.com/gantry-dev/gantry/pkg/names/gvr"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"
)

// EnvDefaultQueue holds the default Queue as JSON ({"name": ..., "spec": {...}}); the
// chart sets it from defaultQueue when defaultQueue.create is true.
const EnvDefaultQueue = "GANTRY_DEFAULT_QUEUE"

// Queue is a Queue to create: its name, labels and spec as the chart wrote them.
type Queue struct {
	Name   string            `json:"name"`
	Labels map[string]string `json:"labels,omitempty"`
	Spec   map[string]any    `json:"spec"`
}

// QueueFromEnv reads EnvDefaultQueue; ok is false when it is unset (no default queue
// wanted).
func QueueFromEnv() (q Queue, ok bool, err error) {
	raw := os.Getenv(EnvDefaultQueue)
	if raw == "" {
		return Queue{}, false, nil
	}
	if err := json.Unmarshal([]byte(raw), &q); err != nil {
		return Queue{}, false, fmt.Errorf("%s: %w (want JSON {\"name\": ..., \"spec\": {...}})", EnvDefaultQueue, err)
	}
	if q.Name == "" {
		return Queue{}, false, fmt.Errorf("%s names no queue: set defaultQueue.name", EnvDefaultQueue)
	}
	return q, true, nil
}

// EnsureQueue creates q unless a Queue of that name exists, retrying with backoff
// (up to retryMax between tries) until it exists or ctx ends. An error that retrying
// cannot fix (the API server rejects the spec as invalid) is returned at once.
func EnsureQueue(ctx context.Context, client dynamic.Interface, q Queue, retryMax time.Duration) error {
	queues := client.Resource(gvr.Queue)
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.Queue.GroupVersion().String(),
		"kind":       "Queue",
		"metadata":   map[string]any{"name": q.Name},
		"spec":       q.Spec,
	}}
	if len(q.Labels) > 0 {
		obj.SetLabels(q.Labels)
	}
	backoff := time.Second
	for {
		_, err := queues.Get(ctx, q.Name, metav1.GetOptions{})
		if err == nil {
			return nil
		}
		if apierrors.IsNotFound(err) {
			_, err = queues.Create(ctx, obj.DeepCopy(), metav1.CreateOptions{})
			if err == nil || apierrors.IsAlreadyExists(err) {
				klog.FromContext(ctx).Info("Created the default Queue", "queue", q.Name)
				return nil
			}
			if apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) {
				return fmt.Errorf("create Queue %s: %w (fix defaultQueue.spec in the chart's values)", q.Name, err)
			}
		}
		klog.FromContext(ctx).Info("Default Queue not created yet; retrying", "queue", q.Name, "err", err.Error(), "in", backoff)
		select {
		case <-ctx.Done():
			return fmt.Errorf("create Queue %s: %w (last error: %v)", q.Name, ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, retryMax)
	}
}
