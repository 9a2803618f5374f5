package cache

import (
	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/model"
)

// --- pods ---

// UpsertPod records a pod: pending pods this scheduler serves, and every bound pod
// (other schedulers' too, so their resources count as used).
func (c *Cache) UpsertPod(pod *corev1.Pod) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.upsertPodLocked(pod)
}

func (c *Cache) upsertPodLocked(pod *corev1.Pod) {
	id := gang.PodID(pod)
	ours := c.names[pod.Spec.SchedulerName]
	terminal := pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed
	if !ours && (terminal || pod.Spec.NodeName == "") {
		c.removePod(id)
		return
	}
	if terminal {
		c.finished(pod, id)
		return
	}
	claims, claimErr := c.claimInput(pod, id, ours)
	reqs := podRequests(pod)
	demand, demandErr := podDemand(pod, reqs, claims)
	p := c.podFromAPI(pod, id, ours, reqs, demand)
	if len(claims.held) > 0 {
		p.GPUs = claims.held
	}
	if claims.viaAllocator {
		// The structured allocator chooses the devices each cycle; until it has,
		// no node qualifies.
		p.DeviceChoices = map[string][]model.GPUBinding{}
	}
	if demandErr == nil && pod.Spec.NodeName == "" && len(pod.Spec.SchedulingGates) > 0 {
		// The API server refuses to bind a gated pod; a gang with a gated member
		// waits whole rather than binding the others and rolling them back.
		demandErr = schedulingGated(pod)
	}
	if demandErr == nil {
		demandErr = claimErr
	}
	old := c.snap.Pods[id]
	// The echo of this scheduler's own binding, bound where the cycle assumed it:
	// every cycle since has seen the pod there, so it wakes none. In a drain the
	// echoes are one event per pod, and each woke a cycle that found nothing to do
	// at a cost that grows with the cluster (docs/benchmarks.md, Scale).
	echo := old != nil && c.assumed[id] && pod.Spec.NodeName != "" && pod.Spec.NodeName == old.Node && demandErr == nil
	if old != nil {
		c.carryOver(old, p, pod)
		c.unbook(old)
	}
	if pod.Spec.NodeName != "" {
		delete(c.assumed, id)
	}
	c.keepNomination(p, pod)
	if old != nil {
		keepNominationOrder(old, p)
	}
	if demandErr != nil {
		c.podErrors[id] = demandErr.Error()
	} else {
		delete(c.podErrors, id)
	}
	c.snap.Pods[id] = p
	c.apiPods[id] = pod
	c.book(p)
	if ours {
		prev := c.gangOf[id]
		c.setGang(id, gang.Identify(pod, c.lookup).Gang)
		if prev != "" && prev != c.gangOf[id] {
			c.regroup(prev)
		}
		c.regroup(c.gangOf[id])
	}
	c.refreshOrphansOf(pod)
	if !echo {
		c.poke()
	}
}

// DeletePod forgets a pod and frees what it held.
func (c *Cache) DeletePod(namespace, name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.removePod(model.PodID(namespace + "/" + name))
	c.freed()
}

func (c *Cache) removePod(id model.PodID) {
	if old := c.snap.Pods[id]; old != nil {
		c.unbook(old)
	}
	delete(c.snap.Pods, id)
	gone := c.apiPods[id]
	delete(c.apiPods, id)
	if gone != nil {
		c.passClaims(gone)
	}
	delete(c.assumed, id)
	delete(c.podErrors, id)
	c.alloc.DropInflight(c.podClaims[id])
	delete(c.podClaims, id)
	delete(c.structured, id)
	c.cycle.forgetPod(id)
	unindex := func(key string) {
		if users := c.claimUsers[key]; users != nil {
			delete(users, id)
			if len(users) == 0 {
				delete(c.claimUsers, key)
			}
		}
	}
	if gone != nil {
		for _, key := range claimKeys(gone) {
			unindex(key)
		}
		c.refreshOrphansOf(gone)
	} else {
		for key := range c.claimUsers {
			unindex(key)
		}
	}
	if prev := c.gangOf[id]; prev != "" {
		c.setGang(id, "")
		c.regroup(prev)
	}
}

func (c *Cache) setGang(id model.PodID, g model.GangID) {
	if cur, ok := c.gangOf[id]; ok {
		if cur == g {
			return
		}
		members := c.gangPods[cur]
		members.remove(id)
		if members.len() == 0 {
			delete(c.gangPods, cur)
		} else {
			c.gangPods[cur] = members
		}
		delete(c.gangOf, id)
	}
	if g == "" {
		return
	}
	c.gangOf[id] = g
	members := c.gangPods[g]
	members.add(id)
	c.gangPods[g] = members
}

// book counts a bound pod on its node (copy-on-write). Caller holds mu.
func (c *Cache) book(p *model.Pod) {
	if !p.Bound() {
		return
	}
	if c.podsOnNode[p.Node] == nil {
		c.podsOnNode[p.Node] = map[model.PodID]struct{}{}
	}
	c.podsOnNode[p.Node][p.ID] = struct{}{}
	n := c.snap.Node(p.Node)
	if n == nil {
		return
	}
	n = n.Clone()
	p.GPUs = gpusFor(n, p)
	n.Book(p, p.GPUs)
	c.snap.AddNode(n)
}

func (c *Cache) unbook(p *model.Pod) {
	if !p.Bound() {
		return
	}
	delete(c.podsOnNode[p.Node], p.ID)
	if len(c.podsOnNode[p.Node]) == 0 {
		delete(c.podsOnNode, p.Node)
	}
	n := c.snap.Node(p.Node)
	if n == nil {
		return
	}
	n = n.Clone()
	n.Unbook(p, p.GPUs)
	c.snap.AddNode(n)
}

// finished records a pod that succeeded or failed: it frees its node but stays known
// to its gang (succeeded members count towards the gang's minimum). Caller holds mu.
func (c *Cache) finished(pod *corev1.Pod, id model.PodID) {
	if old := c.snap.Pods[id]; old != nil {
		c.unbook(old)
	}
	delete(c.snap.Pods, id)
	delete(c.assumed, id)
	c.apiPods[id] = pod
	c.passClaims(pod)
	c.refreshOrphansOf(pod)
	c.setGang(id, gang.Identify(pod, c.lookup).Gang)
	c.regroup(c.gangOf[id])
	c.freed()
}

// carryOver keeps, on the new translation p of a pod, what this scheduler decided and
// the informer has not shown yet: a victim stays terminating, an assumed pod keeps
// its node and GPUs while the informer lags its Binding. Caller holds mu.
func (c *Cache) carryOver(old, p *model.Pod, pod *corev1.Pod) {
	id := p.ID
	if old.Terminating && old.UID == p.UID {
		// Marked by our eviction: an update that arrives before the API server
		// sets deletionTimestamp (our own DisruptionTarget patch, say) must not
		// bring the victim back to life, or its gang would count it as running.
		p.Terminating = true
	}
	if old.Bound() && (p.Terminating || p.Node != old.Node) && !(c.assumed[id] && pod.Spec.NodeName == "") {
		c.capacityVersion++
	}
	if c.assumed[id] && pod.Spec.NodeName == "" {
		// The informer lags our own binding: keep the assumed placement.
		p.Node, p.GPUs, p.StartedAt = old.Node, old.GPUs, old.StartedAt
	} else if old.Bound() && old.Node == p.Node {
		if len(p.GPUs) == 0 {
			p.GPUs = old.GPUs
		}
		if p.StartedAt == 0 {
			p.StartedAt = old.StartedAt
		}
	}
}

// keepNomination keeps a nomination this scheduler made on the pod until the
// informer shows it or the pod is bound. Caller holds mu.
func (c *Cache) keepNomination(p *model.Pod, pod *corev1.Pod) {
	node, ok := c.cycle.nominated[p.ID]
	switch {
	case !ok:
	case p.Bound() || pod.Status.NominatedNodeName == node:
		delete(c.cycle.nominated, p.ID) // bound, or the informer shows it now
	default:
		p.NominatedNode = node // the informer lags our own nomination
	}
}

// keepNominationOrder carries over the order of this scheduler's nomination of the
// pod, which the API does not hold, while the nomination stays the same. Caller holds mu.
func keepNominationOrder(old, p *model.Pod) {
	if p.NominatedNode != "" && p.NominatedNode == old.NominatedNode {
		p.NominationOrder = old.NominationOrder
	}
}
