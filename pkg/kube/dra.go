package kube

import (
	"context"
	"fmt"
	"slices"
	"strconv"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/pkg/model"
)

// DeviceName is the name the node agent gives a GPU's device in its ResourceSlice.
func DeviceName(index int) string { return "gpu-" + strconv.Itoa(index) }

// memoryCapacity is the consumable capacity of a gpu.gantry.dev device.
const memoryCapacity resourceapi.QualifiedName = "memory"

// podClaim is one of a pod's ResourceClaims as the scheduler needs it.
type podClaim struct {
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

// claimsOf resolves a pod's spec.resourceClaims to claim objects. waiting says which
// claim does not exist yet (kube-controller-manager creates claims from templates).
func claimsOf(pod *corev1.Pod, claims map[string]*resourceapi.ResourceClaim) (out []podClaim, waiting string) {
	for _, pc := range pod.Spec.ResourceClaims {
		name := ClaimName(pod, pc)
		if name == "" {
			return nil, fmt.Sprintf("waiting for the ResourceClaim of %q to be created from its template", pc.Name)
		}
		c := claims[pod.Namespace+"/"+name]
		if c == nil {
			return nil, fmt.Sprintf("waiting for ResourceClaim %s to be created", name)
		}
		out = append(out, podClaim{Name: name, Ref: pc.Name, Claim: c})
	}
	return out, ""
}

// claimDemand adds the GPUs a pod's claims ask of class gpu.gantry.dev to d, for
// claims that needsAllocator leaves to pkg/placement: each request takes count whole
// GPUs, or, with capacity.requests.memory, a share of that much memory on each.
func claimDemand(pcs []podClaim, d model.GPUDemand) model.GPUDemand {
	for _, pc := range pcs {
		for _, r := range pc.Claim.Spec.Devices.Requests {
			d.Count += max(int(r.Exactly.Count), 1)
			d.MemoryBytes = requestedMemory(r.Exactly)
			d.ByDevice = true
		}
	}
	return d
}

// requestedMemory is the memory share a request asks for, or 0 for whole devices.
func requestedMemory(e *resourceapi.ExactDeviceRequest) int64 {
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

// allocateClaims writes, for each of the pod's claims, the devices the placement
// chose and reserves the claim for the pod: the kubelet's DRA driver then prepares
// exactly those devices (or shares). It runs before the Binding.
func allocateClaims(ctx context.Context, client kubernetes.Interface, pod *model.Pod, pcs []podClaim, node string, gpus []model.GPUBinding) error {
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
		var results []resourceapi.DeviceRequestAllocationResult
		for _, r := range c.Spec.Devices.Requests {
			count := int(r.Exactly.Count)
			if count == 0 {
				count = 1
			}
			for i := 0; i < count && next < len(gpus); i++ {
				g := gpus[next]
				next++
				res := resourceapi.DeviceRequestAllocationResult{Request: r.Name, Driver: DriverName, Pool: node, Device: DeviceName(g.Index)}
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

// gpuOfResult is the GPU binding one gpu.gantry.dev allocation result on node
// stands for: a share of the memory it consumes, or the whole GPU (also when the
// share is all of the GPU's memory, gpuMemory, where known). ok is false for
// another driver's device or another node's.
func gpuOfResult(r resourceapi.DeviceRequestAllocationResult, node string, gpuMemory int64) (b model.GPUBinding, ok bool) {
	index, err := deviceIndex(r.Device)
	if r.Driver != DriverName || r.Pool != node || err != nil {
		return b, false
	}
	if q, ok := r.ConsumedCapacity[memoryCapacity]; ok && r.ShareID != nil && (gpuMemory <= 0 || q.Value() < gpuMemory) {
		return model.GPUBinding{Index: index, MemoryBytes: q.Value()}, true
	}
	return model.GPUBinding{Index: index, MemoryBytes: gpuMemory, Whole: true}, true
}

func podName(id model.PodID) string {
	_, name := splitID(id)
	return name
}

// claimedGPUs returns the gpu.gantry.dev devices on a bound pod's node held by the
// pod's allocated claims of which it is the holder: whole GPUs, or shares of the
// memory they consume. Caller holds mu.
func (c *Cache) claimedGPUs(pod *corev1.Pod) []model.GPUBinding {
	pcs, _ := claimsOf(pod, c.claims)
	var out []model.GPUBinding
	for _, pc := range pcs {
		a := pc.Claim.Status.Allocation
		if a == nil || !c.holds(pc.Claim, pod) {
			continue
		}
		for _, r := range a.Devices.Results {
			if b, ok := gpuOfResult(r, pod.Spec.NodeName, 0); ok {
				out = append(out, b)
			}
		}
	}
	return out
}

// holds reports whether pod is the one pod on which a claim's devices are booked:
// its first consumer that is bound and running. A claim shared by several pods is
// booked once, and passes to the next consumer when its holder ends. Caller holds
// mu.
func (c *Cache) holds(cl *resourceapi.ResourceClaim, pod *corev1.Pod) bool {
	for _, r := range cl.Status.ReservedFor {
		if r.Resource != "pods" {
			continue
		}
		if r.UID == pod.UID {
			return true
		}
		if other := c.apiPods[model.PodID(cl.Namespace+"/"+r.Name)]; other != nil && other.UID == r.UID && live(other) {
			return false
		}
	}
	return true
}

// live reports whether a pod is bound and has not finished.
func live(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// mergeGPUs adds to gpus the bindings of more on GPUs not in gpus already.
func mergeGPUs(gpus, more []model.GPUBinding) []model.GPUBinding {
	for _, b := range more {
		if !slices.ContainsFunc(gpus, func(g model.GPUBinding) bool { return g.Index == b.Index }) {
			gpus = append(gpus, b)
		}
	}
	return gpus
}
