package kube

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/model"
)

// evictor evicts preemption victims through the Eviction API, so that
// PodDisruptionBudgets are respected, at a bounded rate. It is idempotent: a pod it
// has already asked to evict, or one already terminating, is not asked again, and a
// restarted scheduler sees terminating victims in the cache and does not evict anew.
type evictor struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	limiter  flowcontrol.RateLimiter

	mu       sync.Mutex
	inFlight map[model.PodID]bool
}

func newEvictor(client kubernetes.Interface, recorder record.EventRecorder, qps float32, burst int) *evictor {
	return &evictor{
		client:   client,
		recorder: recorder,
		limiter:  flowcontrol.NewTokenBucketRateLimiter(qps, burst),
		inFlight: map[model.PodID]bool{},
	}
}

// evict marks the victim with a DisruptionTarget condition and an Event that name the
// preemptor and the reason, then asks the API server to evict it. A PDB refusal
// (429) is returned so the caller can retry in a later cycle.
func (e *evictor) evict(ctx context.Context, victim *model.Pod, preemptor model.GangID, kind, reason string) error {
	e.mu.Lock()
	if e.inFlight[victim.ID] {
		e.mu.Unlock()
		return nil
	}
	e.inFlight[victim.ID] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.inFlight, victim.ID)
		e.mu.Unlock()
	}()
	e.limiter.Accept()

	ns, name := splitID(victim.ID)
	// The reason names the preemptor, the victim's gang and what is freed.
	message := reason
	cond := corev1.PodCondition{
		Type:               corev1.DisruptionTarget,
		Status:             corev1.ConditionTrue,
		Reason:             "PreemptionByScheduler",
		Message:            message,
		LastTransitionTime: metav1.Now(),
	}
	if err := patchPodCondition(ctx, e.client, ns, name, cond); err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "Mark preemption victim", "pod", victim.ID)
	}
	ref := &corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: name, UID: types.UID(victim.UID), APIVersion: "v1"}
	e.recorder.Event(ref, corev1.EventTypeNormal, "Preempted", message)

	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if victim.UID != "" {
		uid := types.UID(victim.UID)
		ev.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	}
	err := e.client.PolicyV1().Evictions(ns).Evict(ctx, ev)
	switch {
	case err == nil, apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil
	default:
		return fmt.Errorf("evict %s for %s: %w", victim.ID, preemptor, err)
	}
}

// patchPodCondition sets one condition on a pod's status (strategic merge by type).
func patchPodCondition(ctx context.Context, client kubernetes.Interface, ns, name string, cond corev1.PodCondition) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// patchNominatedNode sets status.nominatedNodeName ("" clears it).
func patchNominatedNode(ctx context.Context, client kubernetes.Interface, ns, name, node string) error {
	var v any = node
	if node == "" {
		v = nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"nominatedNodeName": v}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

func typesUID(uid string) types.UID { return types.UID(uid) }
