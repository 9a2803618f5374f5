package cache

import (
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
)

// Orphaned claims: an allocated ResourceClaim whose gpu.gantry.dev devices no live
// pod holds (its pods ended or were deleted before kube-controller-manager
// deallocated it; a claim allocated ahead of its pods; its pods not seen yet after a
// restart). Pods book a claim's devices only while one of them runs on the
// allocation's node (claimedGPUs), so without this such a claim's devices looked idle
// and could be given to another pod while the API still had them allocated: the same
// GPU twice (chaos finding, docs/reliability.md). kube-scheduler likewise counts every
// allocated claim as in use. The devices are booked on the node, without a pod, until
// the claim is deallocated, deleted, or held by a live pod again.
//
// One exception: an allocation reserved only for a pending pod of this scheduler is
// that pod's own stale allocation from a failed binding, which the allocator redoes
// (dra.Allocator.Choose); booked, it would keep the pod from its own devices.

// orphanClaim is where an orphaned claim's devices are booked.
type orphanClaim struct {
	node string
	gpus []model.GPUBinding
}

// refreshOrphansOf re-reads whether the claims a pod references are orphaned. Caller
// holds mu.
func (c *Cache) refreshOrphansOf(pod *corev1.Pod) {
	if len(pod.Spec.ResourceClaims) == 0 {
		return
	}
	for _, key := range claimKeys(pod) {
		c.refreshOrphan(key)
	}
}

// refreshOrphan books or unbooks one claim's devices as orphaned, rebuilding the
// nodes whose booking changed. Caller holds mu.
func (c *Cache) refreshOrphan(key string) {
	old, had := c.orphans[key]
	now, is := c.orphaned(key)
	if had == is && (!is || sameOrphan(old, now)) {
		return
	}
	if is {
		if c.orphans == nil {
			c.orphans, c.orphansOnNode = map[string]orphanClaim{}, map[string]map[string]struct{}{}
		}
		c.orphans[key] = now
	} else {
		delete(c.orphans, key)
	}
	if had {
		delete(c.orphansOnNode[old.node], key)
		if len(c.orphansOnNode[old.node]) == 0 {
			delete(c.orphansOnNode, old.node)
		}
		c.rebuildNode(old.node)
	}
	if is {
		if c.orphansOnNode[now.node] == nil {
			c.orphansOnNode[now.node] = map[string]struct{}{}
		}
		c.orphansOnNode[now.node][key] = struct{}{}
		if !had || old.node != now.node {
			c.rebuildNode(now.node)
		}
	} else {
		c.freed() // devices given back
	}
}

// orphaned returns where a claim's gpu.gantry.dev devices must be booked when it is
// allocated and no pod holds them. Caller holds mu.
func (c *Cache) orphaned(key string) (orphanClaim, bool) {
	cl := c.claims[key]
	if cl == nil || cl.Status.Allocation == nil {
		return orphanClaim{}, false
	}
	var o orphanClaim
	for _, r := range cl.Status.Allocation.Devices.Results {
		if b, ok := dra.GPUOfResult(r, r.Pool, 0); ok && (o.node == "" || o.node == r.Pool) {
			o.node, o.gpus = r.Pool, append(o.gpus, b)
		}
	}
	if len(o.gpus) == 0 {
		return o, false
	}
	for id := range c.claimUsers[key] {
		p := c.apiPods[id]
		switch {
		case p == nil:
		case live(p) && p.Spec.NodeName == o.node:
			return o, false // booked on it (claimedGPUs)
		case p.Spec.NodeName == "" && c.names[p.Spec.SchedulerName] && reservedOnlyFor(cl, p):
			return o, false // its own stale allocation, redone by the allocator
		}
	}
	return o, true
}

// reservedOnlyFor reports whether a claim is reserved for pod and nothing else.
func reservedOnlyFor(cl *resourceapi.ResourceClaim, pod *corev1.Pod) bool {
	for _, r := range cl.Status.ReservedFor {
		if r.Resource != "pods" || r.UID != pod.UID {
			return false
		}
	}
	return len(cl.Status.ReservedFor) > 0
}

func sameOrphan(a, b orphanClaim) bool {
	if a.node != b.node || len(a.gpus) != len(b.gpus) {
		return false
	}
	for i := range a.gpus {
		if a.gpus[i] != b.gpus[i] {
			return false
		}
	}
	return true
}

// bookOrphans books on n, which rebuildNode is making, the devices of the orphaned
// claims on it, as Node.Book books a pod's GPUs but with no pod. Caller holds mu.
func (c *Cache) bookOrphans(n *model.Node) {
	for key := range c.orphansOnNode[n.Name] {
		for _, b := range c.orphans[key].gpus {
			g := n.GPUByIndex(b.Index)
			if g == nil {
				continue
			}
			bytes := b.MemoryBytes
			if b.Whole {
				bytes = g.MemoryBytes
				g.Exclusive = true
			} else {
				g.Sharers++
			}
			g.AllocatedBytes += bytes
			if g.LiveFreeBytes != model.UnknownBytes {
				g.LiveFreeBytes = max(0, g.LiveFreeBytes-bytes)
			}
		}
	}
}
