package informers

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/podspec"
)

// slimPodOnce is the informer transform for pods: slimPod, for pods not slimmed yet.
//
// The transform runs twice on every pod of the first list: client-go's watch-list
// (on by default since 0.35) slims each pod into a temporary store as it streams in,
// then hands the whole store to the informer's queue, whose Replace runs the
// transform again. A second slimPod made a second copy of all 100,000 pods while the
// first were still held, at the very moment the sync peaks (issue 21). A pod the API
// server serves always has a restart policy (defaulted, then required by validation)
// and slimPod drops it, so a pod without one is already slim and is kept as it is.
func slimPodOnce(obj any) (any, error) {
	if pod, ok := obj.(*corev1.Pod); ok && pod.Spec.RestartPolicy == "" {
		return obj, nil
	}
	return slimPod(obj)
}

// slimPod keeps only what the scheduler reads of a pod, so that pods with large
// environments, volumes or probes do not grow the heap with the cluster (PITFALLS:
// heap growth to 3 GiB from whole Pod objects).
func slimPod(obj any) (any, error) {
	pod, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	out := &corev1.Pod{TypeMeta: pod.TypeMeta}
	out.ObjectMeta = pod.ObjectMeta
	out.ManagedFields = nil
	delete(out.Annotations, corev1.LastAppliedConfigAnnotation)
	out.Spec = corev1.PodSpec{
		SchedulerName:     pod.Spec.SchedulerName,
		NodeName:          pod.Spec.NodeName,
		NodeSelector:      pod.Spec.NodeSelector,
		Affinity:          slimAffinity(pod.Spec.Affinity),
		Tolerations:       pod.Spec.Tolerations,
		Priority:          pod.Spec.Priority,
		PriorityClassName: pod.Spec.PriorityClassName,
		PreemptionPolicy:  pod.Spec.PreemptionPolicy,
		Overhead:          pod.Spec.Overhead,
		ResourceClaims:    pod.Spec.ResourceClaims,
		SchedulingGates:   pod.Spec.SchedulingGates,
		Resources:         pod.Spec.Resources,
		Containers:        slimContainers(pod.Spec.Containers),
		InitContainers:    slimContainers(pod.Spec.InitContainers),
	}
	out.Status = corev1.PodStatus{
		Phase:                 pod.Status.Phase,
		NominatedNodeName:     pod.Status.NominatedNodeName,
		Conditions:            pod.Status.Conditions,
		ResourceClaimStatuses: pod.Status.ResourceClaimStatuses,
	}
	// What the constraints (pod affinity, spread, host ports, volumes) read.
	podspec.KeepForConstraints(out, pod)
	// Last: the interned container slice must not be written after it is shared.
	shared.pod(out)
	return out, nil
}

// slimContainers keeps names, requests and claims (and the restart policy that marks
// a sidecar, which changes how init containers count). Limits go: the scheduler reads
// requests only (the API server has already copied a limit without a request into
// the request), and a second ResourceList per container was a third of a slim pod.
func slimContainers(cs []corev1.Container) []corev1.Container {
	if len(cs) == 0 {
		return nil
	}
	out := make([]corev1.Container, len(cs))
	for i, c := range cs {
		out[i] = corev1.Container{Name: c.Name, RestartPolicy: c.RestartPolicy,
			Resources: corev1.ResourceRequirements{Requests: c.Resources.Requests, Claims: c.Resources.Claims}}
	}
	return out
}

func slimAffinity(a *corev1.Affinity) *corev1.Affinity {
	if a == nil || a.NodeAffinity == nil {
		return nil
	}
	return &corev1.Affinity{NodeAffinity: a.NodeAffinity}
}

// slimNode keeps labels, taints, allocatable, declared features and the
// unschedulable flag.
func slimNode(obj any) (any, error) {
	n, ok := obj.(*corev1.Node)
	if !ok {
		return obj, nil
	}
	out := &corev1.Node{TypeMeta: n.TypeMeta, ObjectMeta: n.ObjectMeta}
	out.ManagedFields = nil
	out.Annotations = nil
	out.Spec = corev1.NodeSpec{Taints: n.Spec.Taints, Unschedulable: n.Spec.Unschedulable}
	out.Status = corev1.NodeStatus{Allocatable: n.Status.Allocatable, DeclaredFeatures: n.Status.DeclaredFeatures}
	return out, nil
}
