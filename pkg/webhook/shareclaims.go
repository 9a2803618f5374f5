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
// whose gantry.dev/gpu-memory or gantry.dev/gpu-fraction annotation it turns into a
// DRA claim.
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

// shareTemplate decides what a pod's annotation share becomes: the template of its
// claim, or nil with a warning saying why it stays an annotation, or a refusal.
//   - gantry.dev/gpu-memory: ShareTemplate, any GPU with that much memory free;
//   - gantry.dev/gpu-fraction: FractionTemplate over the cluster's GPU sizes;
//   - nothing, silently, for a pod without either or one that has the entry already;
//   - nothing, with a warning, while no node publishes a Gantry GPU (no node agent:
//     the scheduler books the share from the annotation, as before, on nodes whose GPUs
//     it knows from their labels) or when the sizes cannot be read;
//   - a refusal for a pod that also requests nvidia.com/gpu, as KAI Scheduler refuses
//     it: the device plugin would give the container whole GPUs beside the claim.
//
// The annotation stays on the pod: the scheduler reads claims first (DESIGN.md's
// first-match-wins order), so the share is counted once, as a claim.
func (p PodDefaulter) shareTemplate(ctx context.Context, pod *corev1.Pod) (tmpl *resourceapi.ResourceClaimTemplate, warning, refusal string) {
	mem, hasMem := pod.Annotations[names.AnnotationGPUMemory]
	frac, hasFrac := pod.Annotations[names.AnnotationGPUFraction]
	if (!hasMem && !hasFrac) || len(pod.Spec.Containers) == 0 {
		return nil, "", ""
	}
	for _, pc := range pod.Spec.ResourceClaims {
		if pc.Name == ShareClaimRef {
			return nil, "", ""
		}
	}
	key := names.AnnotationGPUMemory
	if !hasMem {
		key = names.AnnotationGPUFraction
	}
	var sizes []int64
	var err error
	if p.Sizes != nil {
		sizes, err = p.Sizes(ctx)
	}
	switch {
	case err != nil:
		return nil, fmt.Sprintf("gantry could not read the cluster's GPU sizes (%v): the %s share stays an annotation, which no container receives", err, key), ""
	case len(sizes) == 0:
		return nil, fmt.Sprintf("no node publishes %s GPUs (no node agent): the %s share stays an annotation, which the scheduler books but no container receives", names.DriverName, key), ""
	}
	if q, ok := resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})[names.ExtendedGPUResource]; ok && !q.IsZero() {
		return nil, "", fmt.Sprintf("pod requests %s and sets %s: the node agent serves %s as a DRA claim, and the device plugin would give the container whole GPUs beside it (KAI Scheduler refuses this too); "+
			"drop the %s request, or drop the annotation for whole GPUs, or write a ResourceClaim of class %s with count and capacity.requests.memory for shares of several GPUs",
			names.ExtendedGPUResource, key, key, names.ExtendedGPUResource, names.DriverName)
	}
	if hasMem {
		bytes, err := cache.ParseGPUMemory(mem)
		if err != nil {
			return nil, "", "" // gpuAnnotationProblem refuses it first
		}
		return ShareTemplate(pod.Namespace, bytes), "", ""
	}
	milli, err := cache.ParseGPUFraction(frac)
	if err != nil {
		return nil, "", ""
	}
	return FractionTemplate(pod.Namespace, milli, sizes), "", ""
}

// shareClaimOps adds ShareClaimRef from template tmpl to spec.resourceClaims and to
// every container's resources.claims, so that the node agent prepares the share
// (device node, driver libraries, MPS) for each of them, and labels the pod
// LabelGPUShareClaim, so that TemplateOwners makes it an owner of the template.
func shareClaimOps(pod *corev1.Pod, tmpl string) []jsonPatchOp {
	entry := map[string]any{"name": ShareClaimRef, "resourceClaimTemplateName": tmpl}
	var ops []jsonPatchOp
	if len(pod.Labels) == 0 {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels", Value: map[string]string{names.LabelGPUShareClaim: "true"}})
	} else {
		ops = append(ops, jsonPatchOp{Op: "add", Path: "/metadata/labels/" + escapeJSONPointer(names.LabelGPUShareClaim), Value: "true"})
	}
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
	return ops
}
