package kube

import (
	"context"
	"fmt"
	"sync"

	"golang.org/x/sync/semaphore"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// bindRequest is one pod's binding within a gang's batch.
type bindRequest struct {
	pod       *model.Pod
	placement placement.Placement
	// claims are the pod's ResourceClaims, allocated before the Binding.
	claims []podClaim
	// structured is set when the structured allocator chose the devices:
	// allocations are its results for the pod's unallocated claims on the
	// placement's node, in claim order.
	structured  bool
	allocations []resourceapi.AllocationResult
}

// binder issues pods/binding calls, at most `workers` at once: the API server handles
// them in parallel, and one cycle's binds would otherwise queue behind each other's
// round trips. Slots are taken first come, first served and a gang takes all of its
// members' slots together, so gangs are bound one after another, each in about one
// round trip, rather than interleaved member by member.
type binder struct {
	client  kubernetes.Interface
	workers int
	slots   *semaphore.Weighted
}

func newBinder(client kubernetes.Interface, workers int) *binder {
	return &binder{client: client, workers: workers, slots: semaphore.NewWeighted(int64(workers))}
}

// bind posts one Binding. The GPUs the pod got travel as an annotation of the Binding,
// which the API server copies onto the pod together with spec.nodeName.
func (b *binder) bind(ctx context.Context, r bindRequest) error {
	ns, name := splitID(r.pod.ID)
	switch {
	case r.structured:
		if err := writeAllocations(ctx, b.client, r.pod, r.claims, r.allocations); err != nil {
			return err
		}
	case len(r.claims) > 0:
		if err := allocateClaims(ctx, b.client, r.pod, r.claims, r.placement.Node, r.placement.GPUs); err != nil {
			return err
		}
	}
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: typesUID(r.pod.UID)},
		Target:     corev1.ObjectReference{Kind: "Node", Name: r.placement.Node},
	}
	if len(r.placement.GPUs) > 0 {
		binding.Annotations = map[string]string{AnnotationGPUs: FormatGPUs(r.placement.GPUs)}
	}
	err := b.client.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("bind %s to %s: %w", r.pod.ID, r.placement.Node, err)
	}
	return nil
}

// bindAll binds a gang's batch in parallel and returns one error per request (nil for
// success). It waits for all of them.
func (b *binder) bindAll(ctx context.Context, reqs []bindRequest) []error {
	errs := make([]error, len(reqs))
	for start := 0; start < len(reqs); start += b.workers {
		chunk := reqs[start:min(start+b.workers, len(reqs))]
		if err := b.slots.Acquire(ctx, int64(len(chunk))); err != nil {
			for i := start; i < len(reqs); i++ {
				errs[i] = err
			}
			return errs
		}
		var wg sync.WaitGroup
		for i := range chunk {
			wg.Add(1)
			go func(i int) {
				defer wg.Done()
				defer b.slots.Release(1)
				errs[start+i] = b.bind(ctx, chunk[i])
			}(i)
		}
		wg.Wait()
	}
	return errs
}

// bindGang binds a gang all-or-nothing as far as the API allows: a Binding cannot be
// undone, so when some members fail after retries, the members already bound are
// deleted (their controllers recreate them) so that the gang is never left running
// below its minimum. It returns the pods that ended up bound and the first error.
func (b *binder) bindGang(ctx context.Context, reqs []bindRequest, minimum int) (bound []bindRequest, failed []bindRequest, err error) {
	pending := reqs
	for attempt := 0; attempt < 3 && len(pending) > 0; attempt++ {
		errs := b.bindAll(ctx, pending)
		var retry []bindRequest
		for i, e := range errs {
			switch {
			case e == nil:
				bound = append(bound, pending[i])
			case apierrors.IsNotFound(e) || apierrors.IsConflict(e) || apierrors.IsInvalid(e):
				// The pod is gone or already bound: retrying cannot help.
				failed = append(failed, pending[i])
				if err == nil {
					err = e
				}
			default:
				retry = append(retry, pending[i])
				if err == nil {
					err = e
				}
			}
		}
		pending = retry
	}
	failed = append(failed, pending...)
	if len(failed) == 0 {
		return bound, nil, nil
	}
	if len(reqs) == 1 {
		return nil, failed, err
	}
	if len(bound) >= minimum {
		// Above the minimum the gang runs; the failed members go back to pending.
		return bound, failed, err
	}
	for _, r := range bound {
		ns, name := splitID(r.pod.ID)
		grace := int64(0)
		if derr := b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace}); derr != nil && !apierrors.IsNotFound(derr) {
			klog.ErrorS(derr, "Roll back partly bound gang", "pod", r.pod.ID)
		}
	}
	return nil, reqs, fmt.Errorf("gang bound only %d of its minimum %d; rolled back: %w", len(bound), minimum, err)
}

func splitID(id model.PodID) (string, string) {
	s := string(id)
	for i := 0; i < len(s); i++ {
		if s[i] == '/' {
			return s[:i], s[i+1:]
		}
	}
	return "", s
}
