package dra

import (
	"context"
	"fmt"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// Take returns, for a pod the cycle placed on node, whether the
// structured allocator chose its devices and, if so, the allocation of its
// unallocated claims there. ok is false when another pod of the same plan already
// took one of the other drivers' devices in them (the core books only GPUs, so it
// cannot see that clash).
func (a *Allocator) Take(id model.PodID, node string, taken sets.Set[structured.DeviceID]) (allocs []resourceapi.AllocationResult, viaAllocator, ok bool) {
	perNode, viaAllocator := a.choices[id]
	if !viaAllocator {
		return nil, false, true
	}
	// Pods alike share their answers (Choose): each gets its own copy, with share
	// ids of its own.
	for _, res := range perNode[node] {
		res := *res.DeepCopy()
		for i := range res.Devices.Results {
			if res.Devices.Results[i].ShareID != nil {
				res.Devices.Results[i].ShareID = ptr.To(types.UID(uuid.NewString()))
			}
		}
		allocs = append(allocs, res)
	}
	var ids []structured.DeviceID
	for _, res := range allocs {
		for _, r := range res.Devices.Results {
			if r.Driver == names.DriverName || r.ShareID != nil {
				continue
			}
			did := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if taken.Has(did) {
				return nil, true, false
			}
			ids = append(ids, did)
		}
	}
	taken.Insert(ids...)
	return allocs, true, true
}

// MarkInflight records allocations about to be written, so the next cycle's
// allocator counts them before the informer shows them.
func (a *Allocator) MarkInflight(api *corev1.Pod, pcs []Claim, allocs []resourceapi.AllocationResult) {
	if api == nil {
		return
	}
	unallocated, _ := toAllocate(api, pcs)
	for i, cl := range unallocated {
		if i < len(allocs) {
			a.inflight[cl.Namespace+"/"+cl.Name] = allocs[i]
		}
	}
}

// DropInflight forgets the in-flight allocations of a pod's claims (its binding
// failed, or it went away).
func (a *Allocator) DropInflight(pcs []Claim) {
	for _, pc := range pcs {
		delete(a.inflight, pc.Claim.Namespace+"/"+pc.Name)
	}
}

// Write writes the structured allocator's results into the pod's
// unallocated claims (redoing a stale allocation of the pod's own) and reserves
// every claim, shared ones included, for the pod. It runs before the Binding.
func Write(ctx context.Context, client kubernetes.Interface, pod *model.Pod, pcs []Claim, allocs []resourceapi.AllocationResult) error {
	uid := types.UID(pod.UID)
	next := 0
	for _, pc := range pcs {
		c := pc.Claim.DeepCopy()
		switch {
		case c.Status.Allocation == nil || reservedOnlyFor(c, uid):
			if next >= len(allocs) {
				return fmt.Errorf("ResourceClaim %s/%s: no allocation was chosen for it", c.Namespace, c.Name)
			}
			if c.Status.Allocation != nil {
				var err error
				if c, err = releaseAllocation(ctx, client, c); err != nil {
					return err
				}
			}
			var err error
			if c, err = protect(ctx, client, c); err != nil {
				return err
			}
			a := allocs[next].DeepCopy()
			next++
			if a.AllocationTimestamp == nil {
				now := metav1.Now()
				a.AllocationTimestamp = &now
			}
			c.Status.Allocation = a
		case reservedFor(c, uid):
			continue
		case len(c.Status.ReservedFor) >= resourceapi.ResourceClaimReservedForMaxSize:
			return fmt.Errorf("ResourceClaim %s/%s is shared by %d consumers already, the most it can have", c.Namespace, c.Name, len(c.Status.ReservedFor))
		}
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
			Resource: "pods", Name: podName(pod.ID), UID: uid,
		})
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("allocate ResourceClaim %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	return nil
}
