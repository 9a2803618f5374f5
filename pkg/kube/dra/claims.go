// Package dra is Gantry's side of Dynamic Resource Allocation: it resolves a pod's
// ResourceClaims, translates what they ask of gpu.gantry.dev, runs the structured
// allocator (k8s.io/dynamic-resource-allocation/structured) for the claims the core
// cannot place itself, and writes allocations to claims before a Binding.
//
// It must not import the cache, the dispatch loop or anything that holds scheduler
// state: its callers pass what it reads. The Allocator is not safe for concurrent use;
// the cache calls it under its own lock.
package dra

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// DeviceName is the name the node agent gives a device in its ResourceSlice: a
// GPU's ("gpu-<index>"), or a MIG device's for an index MIGIndex made
// ("gpu-<parent>-mig-<gpu instance>-<compute instance>").
func DeviceName(index int) string {
	if index >= migIndexBase {
		i := index - migIndexBase
		return fmt.Sprintf("gpu-%d-mig-%d-%d", i>>12, (i>>6)&63, i&63)
	}
	return "gpu-" + strconv.Itoa(index)
}

// migIndexBase starts the indexes that stand for MIG devices in the core's model:
// the core knows a node's devices by index, so each MIG device gets one that
// encodes its name, above any GPU's NVML index.
const migIndexBase = 1 << 20

// MIGIndex is the model index of MIG device (gpu instance gi, compute instance
// ci) of the GPU at parent; ok is false for ids out of range.
func MIGIndex(parent, gi, ci int) (index int, ok bool) {
	if parent < 0 || parent >= 256 || gi < 0 || gi >= 64 || ci < 0 || ci >= 64 {
		return 0, false
	}
	return migIndexBase + parent<<12 + gi<<6 + ci, true
}

// memoryCapacity is the consumable capacity of a gpu.gantry.dev device.
const memoryCapacity resourceapi.QualifiedName = names.MemoryCapacity

// Claim is one of a pod's ResourceClaims as the scheduler needs it.
type Claim struct {
	// Name is the ResourceClaim's name; Ref is the entry in pod.spec.resourceClaims.
	Name, Ref string
	Claim     *resourceapi.ResourceClaim
}

// ClaimName is the name of the ResourceClaim behind one entry of a pod's
// spec.resourceClaims: the claim it names, or the one kube-controller-manager
// created from its template (empty until then).
func ClaimName(pod *corev1.Pod, pc corev1.PodResourceClaim) string {
	if pc.ResourceClaimName != nil {
		return *pc.ResourceClaimName
	}
	for _, st := range pod.Status.ResourceClaimStatuses {
		if st.Name == pc.Name && st.ResourceClaimName != nil {
			return *st.ResourceClaimName
		}
	}
	return ""
}

// Resolve resolves a pod's spec.resourceClaims to claim objects. waiting says which
// claim does not exist yet (kube-controller-manager creates claims from templates).
func Resolve(pod *corev1.Pod, claims map[string]*resourceapi.ResourceClaim) (out []Claim, waiting string) {
	for _, pc := range pod.Spec.ResourceClaims {
		name := ClaimName(pod, pc)
		if name == "" {
			return nil, fmt.Sprintf("waiting for the ResourceClaim of %q to be created from its template", pc.Name)
		}
		c := claims[pod.Namespace+"/"+name]
		if c == nil {
			return nil, fmt.Sprintf("waiting for ResourceClaim %s to be created", name)
		}
		out = append(out, Claim{Name: name, Ref: pc.Name, Claim: c})
	}
	return out, ""
}

// Demand adds the GPUs a pod's claims ask of class gpu.gantry.dev to d, for
// claims that NeedsAllocator leaves to pkg/placement: each request takes count whole
// GPUs, or, with capacity.requests.memory, a share of that much memory on each.
func Demand(pcs []Claim, d model.GPUDemand) model.GPUDemand {
	for _, pc := range pcs {
		for _, r := range pc.Claim.Spec.Devices.Requests {
			d.Count += requestedCount(r.Exactly.Count)
			d.MemoryBytes = RequestedMemory(r.Exactly)
			d.ByDevice = true
		}
	}
	return d
}

// maxRequestCount bounds one request's device count as the scheduler reads it. The
// API server bounds it by nothing but int64; a count above any node's GPUs never fits
// anyway, and summing two near 2^62 would wrap to a negative demand (fuzz finding).
const maxRequestCount = 1 << 20

// requestedCount is a request's count as a number of GPUs: at least 1 (the API's
// default), at most maxRequestCount.
func requestedCount(n int64) int {
	return int(min(max(n, 1), maxRequestCount))
}

// RequestedMemory is the memory share a request asks for, or 0 for whole devices.
func RequestedMemory(e *resourceapi.ExactDeviceRequest) int64 {
	if e.Capacity != nil {
		if q, ok := e.Capacity.Requests[memoryCapacity]; ok {
			return q.Value()
		}
	}
	return 0
}

func reservedFor(c *resourceapi.ResourceClaim, uid types.UID) bool {
	for _, r := range c.Status.ReservedFor {
		if r.Resource == "pods" && r.UID == uid {
			return true
		}
	}
	return false
}

// Allocate writes, for each of the pod's claims, the devices the placement
// chose and reserves the claim for the pod: the kubelet's DRA driver then prepares
// exactly those devices (or shares). It runs before the Binding.
func Allocate(ctx context.Context, client kubernetes.Interface, pod *model.Pod, pcs []Claim, node string, gpus []model.GPUBinding) error {
	next := 0
	for _, pc := range pcs {
		c := pc.Claim.DeepCopy()
		if c.Status.Allocation != nil {
			// Left from a binding that failed, or from before a restart: the
			// placement may differ now, so give it back and allocate afresh.
			var err error
			if c, err = releaseAllocation(ctx, client, c); err != nil {
				return err
			}
		}
		c, err := protect(ctx, client, c)
		if err != nil {
			return err
		}
		var results []resourceapi.DeviceRequestAllocationResult
		for _, r := range c.Spec.Devices.Requests {
			count := int(r.Exactly.Count)
			if count == 0 {
				count = 1
			}
			for i := 0; i < count && next < len(gpus); i++ {
				g := gpus[next]
				next++
				res := resourceapi.DeviceRequestAllocationResult{Request: r.Name, Driver: names.DriverName, Pool: node, Device: DeviceName(g.Index)}
				if !g.Whole {
					// One share of a device per claim result, stable for a pod.
					share := types.UID(uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("%s/%s/%d", pod.UID, c.Name, next))).String())
					res.ShareID = &share
					res.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{
						memoryCapacity: *resource.NewQuantity(g.MemoryBytes, resource.BinarySI),
					}
				}
				results = append(results, res)
			}
		}
		now := metav1.Now()
		c.Status.Allocation = &resourceapi.AllocationResult{
			Devices: resourceapi.DeviceAllocationResult{Results: results},
			NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}},
			}}},
			AllocationTimestamp: &now,
		}
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
			Resource: "pods", Name: podName(pod.ID), UID: types.UID(pod.UID),
		})
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("allocate ResourceClaim %s/%s on %s: %w", c.Namespace, c.Name, node, err)
		}
	}
	return nil
}

// protect adds resourceapi.Finalizer (resource.kubernetes.io/delete-protection) to a
// claim about to be allocated and returns the claim as stored, as kube-scheduler
// does: kube-controller-manager clears the allocation of a claim whose pods have all
// ended only when it carries this finalizer, and keeps the claim from being deleted
// while allocated. Without it, a claim of its own (not from a template) stayed
// allocated after its pods were gone: a leaked allocation (chaos finding).
func protect(ctx context.Context, client kubernetes.Interface, c *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	if slices.Contains(c.Finalizers, resourceapi.Finalizer) {
		return c, nil
	}
	c.Finalizers = append(c.Finalizers, resourceapi.Finalizer)
	out, err := client.ResourceV1().ResourceClaims(c.Namespace).Update(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("add finalizer %s to ResourceClaim %s/%s: %w", resourceapi.Finalizer, c.Namespace, c.Name, err)
	}
	return out, nil
}

// releaseAllocation clears a claim's allocation and reservations (the API server
// allows an allocation to be replaced only through nil) and returns the claim.
func releaseAllocation(ctx context.Context, client kubernetes.Interface, c *resourceapi.ResourceClaim) (*resourceapi.ResourceClaim, error) {
	c.Status.Allocation, c.Status.ReservedFor = nil, nil
	cleared, err := client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
	if err != nil {
		return nil, fmt.Errorf("release stale allocation of ResourceClaim %s/%s: %w", c.Namespace, c.Name, err)
	}
	return cleared, nil
}

// GPUOfResult is the GPU binding one gpu.gantry.dev allocation result on node
// stands for: a share of the memory it consumes, or the whole GPU (also when the
// share is all of the GPU's memory, gpuMemory, where known, or not positive). ok is false for
// another driver's device or another node's.
func GPUOfResult(r resourceapi.DeviceRequestAllocationResult, node string, gpuMemory int64) (b model.GPUBinding, ok bool) {
	index, err := DeviceIndex(r.Device)
	if r.Driver != names.DriverName || r.Pool != node || err != nil {
		return b, false
	}
	// A share that consumes no memory, or less than none (fuzz finding), is booked as
	// the whole GPU: never as less than nothing.
	if q, ok := r.ConsumedCapacity[memoryCapacity]; ok && r.ShareID != nil && q.Value() > 0 && (gpuMemory <= 0 || q.Value() < gpuMemory) {
		return model.GPUBinding{Index: index, MemoryBytes: q.Value()}, true
	}
	return model.GPUBinding{Index: index, MemoryBytes: gpuMemory, Whole: true}, true
}

func podName(id model.PodID) string {
	_, name, _ := strings.Cut(string(id), "/")
	return name
}
