package cache

import (
	"strings"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/model"
)

// defaultPreemptibleBelow is the priority under which work is preemptible unless a
// priority class or the gantry.dev/preemptible override says otherwise: train (50)
// is, build (100) and inference (125) are not.
const defaultPreemptibleBelow = 100

// podFromAPI translates a pod, with its demand from podDemand. Queue, priority and
// preemptibility are the gang's and are stamped by regroup.
func (c *Cache) podFromAPI(pod *corev1.Pod, id model.PodID, ours bool, reqs corev1.ResourceList, demand model.GPUDemand) *model.Pod {
	p := &model.Pod{
		ID:               id,
		UID:              string(pod.UID),
		Requests:         resourcesOf(reqs, 1),
		GPU:              demand,
		NodeSelector:     pod.Spec.NodeSelector,
		Tolerations:      pod.Spec.Tolerations,
		Node:             pod.Spec.NodeName,
		GPUs:             bookedGPUs(pod),
		Foreign:          !ours,
		Terminating:      pod.DeletionTimestamp != nil,
		NominatedNode:    pod.Status.NominatedNodeName,
		CreatedAt:        pod.CreationTimestamp.Unix(),
		Gang:             model.GangID(id),
		RequiredAffinity: requiredAffinity(pod),
		Labels:           pod.Labels,
		Constraints:      c.constraintsOf(pod),
	}
	if pod.DeletionTimestamp != nil {
		p.TerminatingDeadline = pod.DeletionTimestamp.Unix()
	}
	if pod.Spec.Priority != nil {
		p.Priority = *pod.Spec.Priority
	}
	p.Preemptible = p.Priority < defaultPreemptibleBelow
	if pod.Spec.NodeName != "" {
		p.StartedAt = startedAt(pod)
	}
	if !ours {
		p.Preemptible = false
	}
	return p
}

func requiredAffinity(pod *corev1.Pod) *corev1.NodeSelector {
	if a := pod.Spec.Affinity; a != nil && a.NodeAffinity != nil {
		return a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	return nil
}

// startedAt is when the pod was scheduled, from its PodScheduled condition, else
// its creation.
func startedAt(pod *corev1.Pod) int64 {
	for _, c := range pod.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
			return c.LastTransitionTime.Unix()
		}
	}
	return pod.CreationTimestamp.Unix()
}

// regroup recomputes one gang from its pods and stamps the gang's queue, priority,
// preemptibility and elasticity on its members. Caller holds mu.
func (c *Cache) regroup(id model.GangID) {
	c.gangVersion[id]++
	defer c.checkHealth(id)
	defer c.refreshPending(id)
	members := c.gangPods[id]
	if members.len() == 0 {
		delete(c.gangVersion, id)
	}
	if members.len() == 0 {
		delete(c.snap.Gangs, id)
		return
	}
	pods := make([]*corev1.Pod, 0, members.len())
	for pid := range members.all() {
		if p := c.apiPods[pid]; p != nil {
			pods = append(pods, p)
		}
	}
	gangs := gang.Group(pods, c.lookup)
	for _, g := range gangs {
		c.applyGang(g)
	}
}

func (c *Cache) applyGang(g *gang.Gang) {
	priority, preemptible := c.resolvePriority(g)
	var createdAt int64
	for _, m := range g.Members {
		if t := m.Pod.CreationTimestamp.Unix(); createdAt == 0 || t < createdAt {
			createdAt = t
		}
	}
	if old := c.snap.Gangs[g.ID]; old != nil && g.PriorityClassName == "" && (old.PriorityClassName != "" || !hasSpecPriority(g)) {
		// The owner that named the class is gone (a RayService being deleted, say):
		// keep what it said rather than drop the gang to priority 0 while its pods
		// are still on their way out. spec.priority is no guide then: a class named
		// only by a label leaves admission's default (0) there.
		priority, preemptible = old.Priority, old.Preemptible
	}
	if old := c.snap.Gangs[g.ID]; old != nil && g.Queue == "" {
		g.Queue = old.Queue
	}
	mg := g.Model(priority, preemptible, createdAt)
	mg.Succeeded = g.Counts.Succeeded
	mg.PriorityClassName = g.PriorityClassName
	for _, m := range g.Members {
		if pp := m.Pod.Spec.PreemptionPolicy; pp != nil && *pp == corev1.PreemptNever {
			mg.NeverPreempts = true
		}
	}
	if old := c.snap.Gangs[g.ID]; old != nil && mg.PriorityClassName == "" {
		mg.PriorityClassName = old.PriorityClassName
	}
	for _, m := range g.Members {
		p := c.snap.Pods[m.ID]
		if p == nil {
			continue
		}
		q := *p
		q.Gang, q.Queue, q.Priority, q.Preemptible, q.Elastic = g.ID, g.Queue, priority, preemptible, m.Elastic
		q.GPU = withStartFree(q.GPU, g.StartFreeFraction)
		c.snap.Pods[m.ID] = &q
	}
	c.snap.Gangs[g.ID] = mg
}

// resolvePriority turns the gang's priority class into a value and preemptibility.
func (c *Cache) resolvePriority(g *gang.Gang) (int32, bool) {
	var value int32
	var classPreemptible *bool
	found := false
	if g.PriorityClassName != "" {
		if pc, ok := c.priorities[g.PriorityClassName]; ok {
			value, classPreemptible, found = pc.value, pc.preemptible, true
		}
	}
	if !found {
		// The pod's own spec.priority, set at admission, when no class resolved.
		for _, m := range g.Members {
			if m.Pod.Spec.Priority != nil {
				value = *m.Pod.Spec.Priority
				break
			}
		}
	}
	preemptible := value < defaultPreemptibleBelow
	if classPreemptible != nil {
		preemptible = *classPreemptible
	}
	if g.Preemptible != nil {
		preemptible = *g.Preemptible
	}
	return value, preemptible
}

func hasSpecPriority(g *gang.Gang) bool {
	for _, m := range g.Members {
		if m.Pod.Spec.Priority != nil {
			return true
		}
	}
	return false
}

// RegroupAll recomputes every gang of a namespace ("" for all), after an owner
// (RayCluster, RayJob, RayService, PodGroup) or a PriorityClass changed.
func (c *Cache) RegroupAll(namespace string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for id := range c.gangPods {
		if namespace == "" || strings.Contains(string(id), ":"+namespace+"/") || strings.HasPrefix(string(id), namespace+"/") {
			c.regroup(id)
		}
	}
	c.poke()
}
