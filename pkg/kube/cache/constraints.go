package cache

import (
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/podspec"
)

// storageState is what a pod's constraints (pkg/podspec) are translated with: the
// claims, volumes and classes its volumes refer to, the namespaces' labels (for
// affinity terms with a namespaceSelector), and each node's CSI attach limits. A
// pod's translation depends on them, so their events translate the pods they may
// change again (retranslate).
type storageState struct {
	// lookup reads claims, volumes, classes and CSI drivers' topology keys (the
	// informers' listers); nil until SetVolumeLookup, when every claim is missing.
	lookup podspec.Lookup
	// nsLabels are namespace labels by name; replaced, never changed in place, since
	// the snapshot shares it.
	nsLabels map[string]map[string]string
	// csiLimits are each node's per-driver attach limits, from its CSINode.
	csiLimits map[string]map[string]int
}

// constraintsOf translates a pod's constraints. Caller holds mu.
func (c *Cache) constraintsOf(pod *corev1.Pod) *model.Constraints {
	return podspec.Constraints(pod, c.storage.lookup, c.storage.nsLabels)
}

// SetVolumeLookup sets what pods' claims, volumes and storage classes are read from,
// and translates the pods with volumes again.
func (c *Cache) SetVolumeLookup(l podspec.Lookup) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.storage.lookup = l
	c.retranslate("", usesVolumes)
}

// VolumesChanged translates again the pods with volumes in namespace ("" for all):
// a claim, volume, storage class or CSI driver changed, and with it whether (and
// where) they can be placed.
func (c *Cache) VolumesChanged(namespace string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.retranslate(namespace, usesVolumes)
}

// UpsertNamespace records a namespace's labels and translates again the pods whose
// affinity terms select namespaces by label.
func (c *Cache) UpsertNamespace(ns *corev1.Namespace) { c.setNamespace(ns.Name, ns.Labels, true) }

// DeleteNamespace forgets a namespace's labels.
func (c *Cache) DeleteNamespace(ns *corev1.Namespace) { c.setNamespace(ns.Name, nil, false) }

func (c *Cache) setNamespace(name string, labels map[string]string, present bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if old, ok := c.storage.nsLabels[name]; ok == present && sameLabels(old, labels) {
		return
	}
	next := make(map[string]map[string]string, len(c.storage.nsLabels)+1)
	for k, v := range c.storage.nsLabels {
		next[k] = v
	}
	if present {
		next[name] = labels
	} else {
		delete(next, name)
	}
	c.storage.nsLabels = next
	c.snap.NamespaceLabels = next
	c.retranslate("", selectsNamespaces)
	c.freed()
}

// UpsertCSINode records a node's CSI attach limits, rebuilds the node, and translates
// the pods with volumes again (the drivers' topology keys may have changed).
func (c *Cache) UpsertCSINode(n *storagev1.CSINode) {
	c.setCSINode(n.Name, podspec.CSIAttachLimits(n))
}

// DeleteCSINode forgets a node's CSI attach limits.
func (c *Cache) DeleteCSINode(n *storagev1.CSINode) { c.setCSINode(n.Name, nil) }

func (c *Cache) setCSINode(name string, limits map[string]int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.storage.csiLimits == nil {
		c.storage.csiLimits = map[string]map[string]int{}
	}
	if limits == nil {
		delete(c.storage.csiLimits, name)
	} else {
		c.storage.csiLimits[name] = limits
	}
	c.rebuildNode(name)
	c.retranslate("", usesVolumes)
	c.freed()
}

// retranslate translates again, as an update of the pod would, the pods in namespace
// ("" for all) for which affected holds: pending pods this scheduler serves, and
// bound pods whose translation was refused (their claim not seen yet, say), whose
// volumes then count on their node. Caller holds mu.
func (c *Cache) retranslate(namespace string, affected func(*corev1.Pod) bool) {
	for id, pod := range c.apiPods {
		if namespace != "" && pod.Namespace != namespace {
			continue
		}
		p := c.snap.Pods[id]
		if p == nil || c.assumed[id] || !affected(pod) {
			continue
		}
		pending := !p.Bound() && c.names[pod.Spec.SchedulerName]
		refused := p.Bound() && p.Constraints != nil && len(p.Constraints.Refusals) > 0
		if pending || refused {
			c.upsertPodLocked(pod)
		}
	}
}

// usesVolumes: the pod has a volume whose translation reads claims, volumes, classes
// or CSI drivers.
func usesVolumes(pod *corev1.Pod) bool {
	for i := range pod.Spec.Volumes {
		v := &pod.Spec.Volumes[i]
		if v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil {
			return true
		}
	}
	return false
}

// selectsNamespaces: one of the pod's affinity terms selects namespaces by label.
func selectsNamespaces(pod *corev1.Pod) bool {
	a := pod.Spec.Affinity
	if a == nil {
		return false
	}
	var terms []corev1.PodAffinityTerm
	if pa := a.PodAffinity; pa != nil {
		terms = append(terms, pa.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	if pa := a.PodAntiAffinity; pa != nil {
		terms = append(terms, pa.RequiredDuringSchedulingIgnoredDuringExecution...)
		for _, w := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, w.PodAffinityTerm)
		}
	}
	for i := range terms {
		if terms[i].NamespaceSelector != nil {
			return true
		}
	}
	return false
}

func sameLabels(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
