package cache

import (
	"context"
	"slices"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
)

// UpsertDeviceClass records a DeviceClass.
func (c *Cache) UpsertDeviceClass(dc *resourceapi.DeviceClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alloc.UpsertClass(dc)
	c.freed()
}

// DeleteDeviceClass forgets a DeviceClass.
func (c *Cache) DeleteDeviceClass(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alloc.DeleteClass(name)
	c.freed()
}

// chooseDevices runs the structured allocator for the pending pods that need it
// (reporting whether there were any) and records, on each pod, the nodes where its
// claims can be allocated and the GPUs they would take there. A claim the allocator
// rejects as invalid holds the pod back with the allocator's words. Pods for which
// skip is true (gangs the cycle will not try) keep last cycle's choices. Caller
// holds mu.
func (c *Cache) chooseDevices(ctx context.Context, skip func(model.GangID) bool) (asked bool) {
	previous := c.draFailed
	for id := range previous {
		delete(c.podErrors, id)
	}
	c.draFailed = map[model.PodID]bool{}
	defer func() {
		// A gang held back by an allocator error that is gone now (its DeviceClass
		// was created, say) is read afresh, without the error as its reason.
		for id := range previous {
			if !c.draFailed[id] && c.gangOf[id] != "" {
				c.regroup(c.gangOf[id])
			}
		}
	}()
	var reqs []dra.Request
	for id := range c.structured {
		p, api := c.snap.Pods[id], c.apiPods[id]
		if p == nil || api == nil || p.Bound() || c.podErrors[id] != "" {
			continue
		}
		reqs = append(reqs, dra.Request{ID: id, Gang: p.Gang, CreatedAt: p.CreatedAt, Pod: api, Claims: c.podClaims[id],
			Skip: skip != nil && skip(p.Gang), StartFreeFraction: p.GPU.StartFreeFraction})
	}
	choices := c.alloc.Choose(ctx, dra.Input{Snap: c.snap, Nodes: c.apiNodes, Claims: c.claims}, reqs)
	for id, ch := range choices {
		p := *c.snap.Pods[id]
		p.DeviceChoices, p.PreemptionDeviceChoices = ch.Devices, ch.IfPreempted
		if ch.Err != nil {
			c.podErrors[id] = "ResourceClaims cannot be allocated: " + ch.Err.Error()
			c.draFailed[id] = true
		}
		c.snap.Pods[id] = &p
	}
	return len(choices) > 0
}

// claimedGPUs returns the gpu.gantry.dev devices on a bound pod's node held by the
// pod's allocated claims of which it is the holder: whole GPUs, or shares of the
// memory they consume. Caller holds mu.
func (c *Cache) claimedGPUs(pod *corev1.Pod) []model.GPUBinding {
	pcs, _ := dra.Resolve(pod, c.claims)
	var out []model.GPUBinding
	for _, pc := range pcs {
		a := pc.Claim.Status.Allocation
		if a == nil || !c.holds(pc.Claim, pod) {
			continue
		}
		for _, r := range a.Devices.Results {
			if b, ok := dra.GPUOfResult(r, pod.Spec.NodeName, 0); ok {
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
