package placement

import "github.com/gantry-dev/gantry/pkg/model"

// NeedsCluster reports whether pod's fit on a node depends on the pods of other
// nodes in v: its required pod affinity or anti-affinity, its DoNotSchedule spread,
// its ReadWriteOncePod claims, or placed pods' required anti-affinity. Feasible,
// which looks at one node, cannot answer for such a pod; FitsOnNode can.
func NeedsCluster(v *View, pod *model.Pod) bool {
	if v.counts.AntiAffinity > 0 {
		return true
	}
	c := pod.Constraints
	if c == nil {
		return false
	}
	if len(c.Affinity)+len(c.AntiAffinity)+len(c.ExclusiveClaims) > 0 {
		return true
	}
	for i := range c.Spread {
		if c.Spread[i].Hard {
			return true
		}
	}
	return false
}

// FitsOnNode reports whether pod fits on the named node of v as v is now, by every
// filter PlacePod applies: inter-pod affinity, anti-affinity and topology spread
// counted over the whole view, then the node's own checks. The preemption search
// asks it, on a view with the victims gone, for a preemptor that NeedsCluster.
func FitsOnNode(v *View, pod *model.Pod, name string) bool {
	i := v.snapshot.NodeIndex(name)
	if i < 0 || i >= len(v.nodes) {
		return false
	}
	q := newPodQuery(pod)
	cs := newConstraintState(v, pod, q.terms, nil)
	return fullMisfit(q, cs, i, v.nodes[i]) == fits
}
