package webhook

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/names"
)

// ShareClaimRef is the entry the pod webhook adds to spec.resourceClaims of a pod
// whose gantry.dev/gpu-memory annotation it turns into a DRA claim.
const ShareClaimRef = "gantry-gpu-share"

// ShareTemplateName is the ResourceClaimTemplate for a share of this many bytes: one
// per size and namespace, its content fixed by its name, so that creating it twice,
// or from two scheduler replicas, creates the same object.
func ShareTemplateName(bytes int64) string { return fmt.Sprintf("gantry-gpu-memory-%d", bytes) }

// ShareTemplate is the template behind ShareTemplateName: one gpu.gantry.dev device
// with that much of its consumable memory, the claim any DRA user would write.
func ShareTemplate(namespace string, bytes int64) *resourceapi.ResourceClaimTemplate {
	return &resourceapi.ResourceClaimTemplate{
		TypeMeta: metav1.TypeMeta{APIVersion: resourceapi.SchemeGroupVersion.String(), Kind: "ResourceClaimTemplate"},
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: ShareTemplateName(bytes),
			Labels: map[string]string{"app.kubernetes.io/managed-by": "gantry"}},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: names.DriverName,
				Capacity: &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
					names.MemoryCapacity: *resource.NewQuantity(bytes, resource.BinarySI)}},
			}}},
		}}},
	}
}

// TemplateEnsurer creates a ResourceClaimTemplate unless it exists.
type TemplateEnsurer func(ctx context.Context, t *resourceapi.ResourceClaimTemplate) error

// DynamicTemplateEnsurer creates templates with a dynamic client (the scheduler's
// webhook client). It needs create on resourceclaimtemplates.
func DynamicTemplateEnsurer(dyn dynamic.Interface) TemplateEnsurer {
	gvr := schema.GroupVersionResource{Group: resourceapi.GroupName, Version: "v1", Resource: "resourceclaimtemplates"}
	return func(ctx context.Context, t *resourceapi.ResourceClaimTemplate) error {
		obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(t)
		if err != nil {
			return err
		}
		_, err = dyn.Resource(gvr).Namespace(t.Namespace).Create(ctx, &unstructured.Unstructured{Object: obj}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			return nil
		}
		return err
	}
}

// shareClaimPatch turns a pod's gantry.dev/gpu-memory annotation into a DRA claim:
// spec.resourceClaims gets ShareClaimRef from the share's template, and every
// container lists it, so that the node agent prepares the share (device node,
// driver libraries, MPS) for each of them. It returns nil for a pod it leaves alone:
// no gpu-memory annotation, a gpu-fraction one (a fraction's bytes depend on the GPU
// the scheduler picks, and a claim must name them), an nvidia.com/gpu request (the
// device plugin serves it; the annotation then shares each of those GPUs), or a pod
// that already has the entry. The annotation stays: the scheduler reads claims first
// (DESIGN.md's first-match-wins order), so the share is counted once, as a claim.
func shareClaimPatch(pod *corev1.Pod) ([]jsonPatchOp, *resourceapi.ResourceClaimTemplate) {
	v, ok := pod.Annotations[names.AnnotationGPUMemory]
	if !ok || len(pod.Spec.Containers) == 0 {
		return nil, nil
	}
	if _, frac := pod.Annotations[names.AnnotationGPUFraction]; frac {
		return nil, nil
	}
	bytes, err := cache.ParseGPUMemory(v)
	if err != nil {
		return nil, nil
	}
	if q, ok := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[names.ExtendedGPUResource]; ok && !q.IsZero() {
		return nil, nil
	}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.Name == ShareClaimRef {
			return nil, nil
		}
	}
	tmpl := ShareTemplate(pod.Namespace, bytes)
	entry := map[string]any{"name": ShareClaimRef, "resourceClaimTemplateName": tmpl.Name}
	var ops []jsonPatchOp
	if len(pod.Spec.ResourceClaims) == 0 {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/resourceClaims", Value: []any{entry}})
	} else {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/spec/resourceClaims/-", Value: entry})
	}
	ref := map[string]any{"name": ShareClaimRef}
	for i, c := range pod.Spec.Containers {
		if len(c.Resources.Claims) == 0 {
			ops = append(ops, jsonPatchOp{Op: "add", Path: fmt.Sprintf("/spec/containers/%d/resources/claims", i), Value: []any{ref}})
		} else {
			ops = append(ops, jsonPatchOp{Op: "add", Path: fmt.Sprintf("/spec/containers/%d/resources/claims/-", i), Value: ref})
		}
	}
	return ops, tmpl
}
