// Which pods need the structured allocator, and what their claims are estimated to
// take before it answers.

package dra

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// NeedsAllocator reports whether a pod's claims are beyond what Demand
// places by itself: anything but selector-free, exact-count requests on
// gpu.gantry.dev, all of one kind (whole GPUs or shares of one size), in claims of
// the pod's own that are not allocated yet.
func NeedsAllocator(pod *corev1.Pod, pcs []Claim) bool {
	kind := int64(-1)
	for _, pc := range pcs {
		c := pc.Claim
		if c.Status.Allocation != nil && !reservedOnlyFor(c, pod.UID) {
			return true // shared with other pods, or allocated ahead of the pod
		}
		if len(c.Spec.Devices.Constraints) > 0 || len(c.Spec.Devices.Config) > 0 {
			return true
		}
		for _, r := range c.Spec.Devices.Requests {
			e := r.Exactly
			if e == nil || e.DeviceClassName != names.DriverName || len(e.Selectors) > 0 ||
				e.AllocationMode == resourceapi.DeviceAllocationModeAll || len(e.Tolerations) > 0 ||
				(e.AdminAccess != nil && *e.AdminAccess) {
				return true
			}
			mem := RequestedMemory(e)
			if mem < 0 || (kind >= 0 && mem != kind) {
				// A negative share (fuzz finding) is the structured allocator's
				// to refuse, with its words as the pod's reason.
				return true
			}
			kind = mem
		}
	}
	return false
}

// reservedOnlyFor reports whether every consumer of an allocated claim is pod: an
// allocation left from this pod's own failed binding, which is redone.
func reservedOnlyFor(c *resourceapi.ResourceClaim, uid types.UID) bool {
	if len(c.Status.ReservedFor) == 0 {
		return false
	}
	for _, r := range c.Status.ReservedFor {
		if r.Resource != "pods" || r.UID != uid {
			return false
		}
	}
	return true
}

// StructuredDemand estimates, for messages, ordering and queue charges, the
// gpu.gantry.dev GPUs a pod's claims ask for; the allocator decides the devices.
// Claims allocated already (shared) take no new GPU.
func StructuredDemand(pod *corev1.Pod, pcs []Claim, d model.GPUDemand) model.GPUDemand {
	unallocated, _ := toAllocate(pod, pcs)
	for _, cl := range unallocated {
		for _, r := range cl.Spec.Devices.Requests {
			e := r.Exactly
			if e == nil && len(r.FirstAvailable) > 0 {
				s := r.FirstAvailable[0]
				e = &resourceapi.ExactDeviceRequest{DeviceClassName: s.DeviceClassName, Count: s.Count, Capacity: s.Capacity}
			}
			if e == nil || e.DeviceClassName != names.DriverName {
				continue
			}
			d.Count += requestedCount(e.Count)
			d.MemoryBytes = max(d.MemoryBytes, RequestedMemory(e))
		}
	}
	d.ByDevice = true
	return d
}

// toAllocate returns the claims of a pod the allocator must allocate (copies without
// a stale allocation of the pod's own) and the allocated claims it must share.
func toAllocate(pod *corev1.Pod, pcs []Claim) (unallocated, shared []*resourceapi.ResourceClaim) {
	for _, pc := range pcs {
		c := pc.Claim
		switch {
		case c.Status.Allocation == nil:
			unallocated = append(unallocated, c)
		case reservedOnlyFor(c, pod.UID):
			cp := c.DeepCopy()
			cp.Status.Allocation, cp.Status.ReservedFor = nil, nil
			unallocated = append(unallocated, cp)
		default:
			shared = append(shared, c)
		}
	}
	return unallocated, shared
}
