package cache

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	resourcehelper "k8s.io/component-helpers/resource"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/podspec"
)

// claimInput is what a pod's ResourceClaims say about its GPUs: for a pending pod of
// this scheduler, its resolved claims (viaAllocator when the structured allocator
// chooses their devices); for a bound pod, the gpu.gantry.dev devices its allocated
// claims hold.
type claimInput struct {
	pending      []dra.Claim
	viaAllocator bool
	held         []model.GPUBinding
}

// podDemand is a pod's GPU demand: the one function that reads it, from the first of
// DESIGN.md's sources that applies ("How a pod's GPU demand is known"):
//
//  1. DRA ResourceClaims asking for gpu.gantry.dev devices: count whole devices, or
//     shares of capacity.requests.memory (for a bound pod: the devices its claims
//     hold);
//  2. the gantry.dev/gpu-memory or gantry.dev/gpu-fraction annotation: a share of one
//     GPU per requested GPU;
//  3. the nvidia.com/gpu extended resource: whole GPUs.
//
// gantry.dev/gpu-model restricts the models whichever source applies. A pod whose
// claims the structured allocator places has its GPUs named by device (ByDevice) even
// when they come from another source. The one thing added later is the gang's
// start-free fraction (a vLLM engine's gpu_memory_utilization, from the gang's
// owner), stamped by withStartFree when the gang is regrouped. An error says what to
// change on the pod.
func podDemand(pod *corev1.Pod, requests corev1.ResourceList, claims claimInput) (model.GPUDemand, error) {
	var models []string
	if v, ok := pod.Annotations[names.AnnotationGPUModel]; ok && strings.TrimSpace(v) != "" {
		for _, m := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == '|' }) {
			models = append(models, model.CanonicalGPUModel(m))
		}
	}
	// 1. Claims.
	var d model.GPUDemand
	switch {
	case len(claims.held) > 0:
		d = model.GPUDemand{Count: len(claims.held), ByDevice: true}
	case claims.viaAllocator:
		d = dra.StructuredDemand(pod, claims.pending, model.GPUDemand{})
	case len(claims.pending) > 0:
		d = dra.Demand(claims.pending, model.GPUDemand{})
	}
	if d.Count > 0 {
		d.Models = models
		return d, nil
	}
	// 2 and 3. Annotations, then the extended resource.
	d, err := annotatedDemand(pod, requests)
	d.Models = models
	d.ByDevice = claims.viaAllocator
	return d, err
}

// AnnotatedDemand is the GPU demand a pod's gantry.dev/gpu-memory or
// gantry.dev/gpu-fraction annotation asks for (with its nvidia.com/gpu count), read
// exactly as the scheduler reads it; the error says what to change. The pod webhook
// calls it, so that admission and scheduling cannot disagree on an annotation.
func AnnotatedDemand(pod *corev1.Pod) (model.GPUDemand, error) {
	return annotatedDemand(pod, podRequests(pod))
}

// annotatedDemand reads the gantry.dev/gpu-memory or gantry.dev/gpu-fraction
// annotation (a share of one GPU per requested GPU, one GPU when none is requested),
// else the nvidia.com/gpu count.
func annotatedDemand(pod *corev1.Pod, requests corev1.ResourceList) (model.GPUDemand, error) {
	var d model.GPUDemand
	if q, ok := requests[names.ExtendedGPUResource]; ok {
		d.Count = int(q.Value())
	}
	mem, hasMem := pod.Annotations[names.AnnotationGPUMemory]
	frac, hasFrac := pod.Annotations[names.AnnotationGPUFraction]
	switch {
	case hasMem && hasFrac:
		return d, fmt.Errorf("pod sets both %s and %s: keep one", names.AnnotationGPUMemory, names.AnnotationGPUFraction)
	case hasMem:
		b, err := ParseGPUMemory(mem)
		if err != nil {
			return d, err
		}
		d.MemoryBytes = b
	case hasFrac:
		milli, err := ParseGPUFraction(frac)
		if err != nil {
			return d, err
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

// ParseGPUMemory reads gantry.dev/gpu-memory: a quantity with a unit ("20Gi"), or a
// plain number, which is MiB as in KAI Scheduler, where the annotation comes from
// ("20480" is 20 GiB). The error says what to write instead.
func ParseGPUMemory(v string) (int64, error) {
	s := strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(s, 64); err == nil {
		// f*(1<<20) < 1: less than a byte, which would be read as 0 (fuzz finding).
		if math.IsNaN(f) || math.IsInf(f, 0) || f*(1<<20) < 1 || f*(1<<20) >= math.MaxInt64 {
			return 0, fmt.Errorf("%s=%q is not a positive amount of memory: write MiB as a plain number (20480) or a quantity with a unit (20Gi)", names.AnnotationGPUMemory, v)
		}
		return int64(f * (1 << 20)), nil
	}
	q, err := resource.ParseQuantity(s)
	if err != nil || q.Value() <= 0 {
		return 0, fmt.Errorf("%s=%q is not a positive amount of memory: write MiB as a plain number (20480) or a quantity with a unit (20Gi)", names.AnnotationGPUMemory, v)
	}
	return q.Value(), nil
}

// ParseGPUFraction reads gantry.dev/gpu-fraction, a number above 0 and at most 1,
// in thousandths of a GPU (at least 1). NaN and infinities are refused.
func ParseGPUFraction(v string) (int64, error) {
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) || f <= 0 || f > 1 {
		return 0, fmt.Errorf("%s=%q is not a fraction of one GPU: use a number above 0 and at most 1, e.g. 0.25", names.AnnotationGPUFraction, v)
	}
	return max(int64(f*model.MilliPerGPU+0.5), 1), nil
}

// withStartFree stamps a gang's start-free fraction on a member's demand: the share
// of each GPU's memory that must be free when it starts.
func withStartFree(d model.GPUDemand, fraction float64) model.GPUDemand {
	if fraction > 0 && d.Count > 0 {
		d.StartFreeFraction = fraction
	}
	return d
}

// podRequests is the pod's effective requests as the kubelet admits it (containers,
// init containers, sidecars and overhead).
//
// A pod of one container, with no init containers, overhead or pod-level resources,
// requests what its container does: its list is returned as it is, not summed into a
// new one (the helper's lists were 5.5 % of gantry-scheduler's allocations at 100
// pods/s, session 17). Callers only read it.
func podRequests(pod *corev1.Pod) corev1.ResourceList {
	if s := &pod.Spec; len(s.Containers) == 1 && len(s.InitContainers) == 0 && s.Overhead == nil && s.Resources == nil {
		return s.Containers[0].Resources.Requests
	}
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

// FormatGPUs renders GPU bindings for names.AnnotationGPUs.
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

// ParseGPUs reads names.AnnotationGPUs ("0,3:21474836480": whole GPU indices, or
// INDEX:BYTES for a share). Any malformed entry is an error naming it, with the
// entries that could be read: a booking read in part would book fewer GPUs than the
// pod holds, so callers must not use a part (see bookedGPUs).
func ParseGPUs(s string) ([]model.GPUBinding, error) {
	if s == "" {
		return nil, nil
	}
	var out []model.GPUBinding
	var bad []string
	for _, part := range strings.Split(s, ",") {
		idx, bytes, share := strings.Cut(part, ":")
		i, err := strconv.Atoi(idx)
		if err != nil || i < 0 {
			bad = append(bad, strconv.Quote(part))
			continue
		}
		b := model.GPUBinding{Index: i, Whole: !share}
		if share {
			n, err := strconv.ParseInt(bytes, 10, 64)
			if err != nil || n <= 0 {
				bad = append(bad, strconv.Quote(part))
				continue
			}
			b.MemoryBytes = n
		}
		out = append(out, b)
	}
	if len(bad) > 0 {
		return out, fmt.Errorf("%s=%q has unreadable entries %s: each entry is a GPU index (3) or INDEX:BYTES (3:21474836480); the scheduler writes this annotation when it binds the pod, so remove it rather than edit it", names.AnnotationGPUs, s, strings.Join(bad, ", "))
	}
	return out, nil
}

// bookedGPUs is the GPUs a pod's gantry.dev/gpus annotation books. A corrupt booking
// (edited by hand, say) is dropped whole and logged, never used in part: the pod is
// then booked as a pod bound by another scheduler is, on as many idle GPUs as its
// demand asks (gpusFor, whole GPUs even for a share), so that it is never booked on
// fewer GPUs than it holds. A pending pod's booking is overwritten when it is bound.
func bookedGPUs(pod *corev1.Pod) []model.GPUBinding {
	gpus, err := ParseGPUs(pod.Annotations[names.AnnotationGPUs])
	if err != nil {
		if pod.Spec.NodeName != "" {
			klog.ErrorS(err, "Bound pod's GPU booking is unreadable; booking it on idle GPUs by its demand", "pod", klog.KObj(pod), "node", pod.Spec.NodeName)
		}
		return nil
	}
	return gpus
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
		// CSIAttachLimits come from the node's CSINode (rebuildNode).
		DeclaredFeatures: podspec.NodeDeclaredFeatures(n),
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
	q, ok := n.Status.Allocatable[names.ExtendedGPUResource]
	if !ok || q.Value() <= 0 {
		return out
	}
	count := int(q.Value())
	product := model.CanonicalGPUModel(n.Labels[names.LabelGFDProduct])
	var mem int64
	if mib, err := strconv.ParseInt(n.Labels[names.LabelGFDMemory], 10, 64); err == nil {
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
	gates := make([]string, len(pod.Spec.SchedulingGates))
	for i, g := range pod.Spec.SchedulingGates {
		gates[i] = g.Name
	}
	return fmt.Errorf("waiting for its scheduling gates to be removed (%s); whoever added them removes them", strings.Join(gates, ", "))
}
