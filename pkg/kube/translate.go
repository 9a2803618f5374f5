package kube

import (
	"fmt"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Names of what Gantry reads on pods and nodes (DESIGN.md, "Names").
const (
	ExtendedGPUResource corev1.ResourceName = "nvidia.com/gpu"

	AnnotationGPUMemory   = "gantry.dev/gpu-memory"
	AnnotationGPUFraction = "gantry.dev/gpu-fraction"
	AnnotationGPUModel    = "gantry.dev/gpu-model"
	// AnnotationGPUs records, on a bound pod, the GPUs the scheduler gave it:
	// "INDEX[:BYTES],…" (no BYTES for a whole GPU). The scheduler sets it through the
	// Binding, so it lands atomically with spec.nodeName and survives restarts.
	AnnotationGPUs = "gantry.dev/gpus"

	LabelQueue       = "gantry.dev/queue"
	LabelQueueKAI    = "kai.scheduler/queue"
	LabelPreemptible = "gantry.dev/preemptible"

	LabelGFDProduct = "nvidia.com/gpu.product"
	LabelGFDMemory  = "nvidia.com/gpu.memory"
)

// podDemand reads a pod's GPU demand from, in order: the gantry.dev/gpu-memory or
// gantry.dev/gpu-fraction annotation (a share of one GPU per requested GPU), then the
// nvidia.com/gpu extended resource (whole GPUs). DRA claims are added by the caller.
// An error says what to change on the pod.
func podDemand(pod *corev1.Pod, requests corev1.ResourceList) (model.GPUDemand, error) {
	var d model.GPUDemand
	if q, ok := requests[ExtendedGPUResource]; ok {
		d.Count = int(q.Value())
	}
	if v, ok := pod.Annotations[AnnotationGPUModel]; ok && strings.TrimSpace(v) != "" {
		for _, m := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '|' }) {
			d.Models = append(d.Models, model.CanonicalGPUModel(m))
		}
	}
	mem, hasMem := pod.Annotations[AnnotationGPUMemory]
	frac, hasFrac := pod.Annotations[AnnotationGPUFraction]
	switch {
	case hasMem && hasFrac:
		return d, fmt.Errorf("pod sets both %s and %s: keep one", AnnotationGPUMemory, AnnotationGPUFraction)
	case hasMem:
		q, err := resource.ParseQuantity(strings.TrimSpace(mem))
		if err != nil || q.Value() <= 0 {
			return d, fmt.Errorf("%s=%q is not a positive amount of memory: write bytes with a unit, e.g. 20Gi", AnnotationGPUMemory, mem)
		}
		d.MemoryBytes = q.Value()
	case hasFrac:
		f, err := strconv.ParseFloat(strings.TrimSpace(frac), 64)
		if err != nil || f <= 0 || f > 1 {
			return d, fmt.Errorf("%s=%q is not a fraction of one GPU: use a number above 0 and at most 1, e.g. 0.25", AnnotationGPUFraction, frac)
		}
		milli := int64(f*model.MilliPerGPU + 0.5)
		if milli < 1 {
			milli = 1
		}
		if milli < model.MilliPerGPU {
			d.FractionMilli = milli
		}
	default:
		return d, nil
	}
	if d.Count == 0 {
		d.Count = 1
	}
	return d, nil
}

// podRequests is the pod's effective requests as the kubelet admits it (containers,
// init containers, sidecars and overhead).
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	return resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
}

func resourcesOf(list corev1.ResourceList, pods int64) model.Resources {
	r := model.Resources{Pods: pods}
	if q, ok := list[corev1.ResourceCPU]; ok {
		r.MilliCPU = q.MilliValue()
	}
	if q, ok := list[corev1.ResourceMemory]; ok {
		r.MemoryBytes = q.Value()
	}
	return r
}

// FormatGPUs renders GPU bindings for AnnotationGPUs.
func FormatGPUs(gpus []model.GPUBinding) string {
	parts := make([]string, len(gpus))
	for i, g := range gpus {
		if g.Whole {
			parts[i] = strconv.Itoa(g.Index)
		} else {
			parts[i] = strconv.Itoa(g.Index) + ":" + strconv.FormatInt(g.MemoryBytes, 10)
		}
	}
	return strings.Join(parts, ",")
}

// ParseGPUs reads AnnotationGPUs; malformed entries are skipped.
func ParseGPUs(s string) []model.GPUBinding {
	if s == "" {
		return nil
	}
	var out []model.GPUBinding
	for _, part := range strings.Split(s, ",") {
		idx, bytes, share := strings.Cut(part, ":")
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 {
			continue
		}
		b := model.GPUBinding{Index: i, Whole: !share}
		if share {
			n, err := strconv.ParseInt(bytes, 10, 64)
			if err != nil || n <= 0 {
				continue
			}
			b.MemoryBytes = n
		}
		out = append(out, b)
	}
	return out
}

// nodeFromAPI builds the node's schedulable view: allocatable, labels, taints. GPUs come
// from the inventory (ResourceSlices) when the node agent publishes it, else from the
// nvidia.com/gpu count and the GPU Feature Discovery labels.
func nodeFromAPI(n *corev1.Node, inventory []model.GPU) *model.Node {
	out := &model.Node{
		Name:          n.Name,
		Labels:        n.Labels,
		Taints:        n.Spec.Taints,
		Unschedulable: n.Spec.Unschedulable,
	}
	pods := int64(110)
	if q, ok := n.Status.Allocatable[corev1.ResourcePods]; ok {
		pods = q.Value()
	}
	out.Allocatable = resourcesOf(n.Status.Allocatable, pods)
	if len(inventory) > 0 {
		out.GPUs = append([]model.GPU(nil), inventory...)
		return out
	}
	q, ok := n.Status.Allocatable[ExtendedGPUResource]
	if !ok || q.Value() <= 0 {
		return out
	}
	count := int(q.Value())
	product := model.CanonicalGPUModel(n.Labels[LabelGFDProduct])
	var mem int64
	if mib, err := strconv.ParseInt(n.Labels[LabelGFDMemory], 10, 64); err == nil {
		mem = mib << 20
	}
	out.GPUsByCountOnly = true
	out.GPUs = make([]model.GPU, count)
	for i := range out.GPUs {
		out.GPUs[i] = model.GPU{Index: i, Model: product, MemoryBytes: mem, LiveFreeBytes: model.UnknownBytes, Healthy: true}
	}
	return out
}

// schedulingGated says which scheduling gates hold a pod back.
func schedulingGated(pod *corev1.Pod) error {
	names := make([]string, len(pod.Spec.SchedulingGates))
	for i, g := range pod.Spec.SchedulingGates {
		names[i] = g.Name
	}
	return fmt.Errorf("waiting for its scheduling gates to be removed (%s); whoever added them removes them", strings.Join(names, ", "))
}
