package placement

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gantry-dev/gantry/pkg/model"
)

// volumeMisfit checks the pod's volumes against n: bound volumes' node affinity and
// zone labels (VolumeBinding, VolumeZone), a volume for each WaitForFirstConsumer
// claim (VolumeBinding), and the CSI drivers' attach limits (NodeVolumeLimits).
func volumeMisfit(n *model.Node, v *model.VolumeNeeds, taken func(string) bool) misfit {
	for i := range v.Bound {
		if !volumeAdmits(n, &v.Bound[i]) {
			return misfitVolumeNode
		}
	}
	if len(v.Delayed) > 0 {
		if _, ok := VolumesFor(n, v.Delayed, taken); !ok {
			return misfitVolumeBinding
		}
	}
	if len(v.Attach) > 0 && len(n.CSIAttachLimits) > 0 && attachLimitExceeded(n, v.Attach) {
		return misfitVolumeLimit
	}
	return fits
}

// volumeAdmits reports whether a volume's node affinity and zone labels admit n.
func volumeAdmits(n *model.Node, b *model.BoundVolume) bool {
	if b.NodeAffinity != nil && !nodeSelectorMatches(n, b.NodeAffinity) {
		return false
	}
	return zonesAdmit(n, b.Zones)
}

func nodeSelectorMatches(n *model.Node, sel *corev1.NodeSelector) bool {
	node := &corev1.Node{}
	node.Name, node.Labels = n.Name, n.Labels
	ok, err := nodeaffinity.NewLazyErrorNodeSelector(sel).Match(node)
	return ok && err == nil
}

// zoneLabels are the node labels VolumeZone reads; a node with none of them takes
// any volume.
var zoneLabels = []string{
	corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
	corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
}

func zonesAdmit(n *model.Node, zones []model.ZoneLabel) bool {
	if len(zones) == 0 || !slices.ContainsFunc(zoneLabels, func(k string) bool { _, ok := n.Labels[k]; return ok }) {
		return true
	}
	for _, z := range zones {
		value, ok := n.Labels[z.Key]
		if !ok {
			value, ok = n.Labels[gaZoneLabel(z.Key)]
		}
		if !ok || !slices.Contains(z.Values, value) {
			return false
		}
	}
	return true
}

// gaZoneLabel turns a beta zone or region label key into its GA key.
func gaZoneLabel(key string) string {
	switch key {
	case corev1.LabelFailureDomainBetaZone:
		return corev1.LabelTopologyZone
	case corev1.LabelFailureDomainBetaRegion:
		return corev1.LabelTopologyRegion
	}
	return key
}

// canProvision reports whether a new volume can be provisioned on n for a
// WaitForFirstConsumer claim: its class has a provisioner, no other node is
// selected for it already, and the class's allowedTopologies and the driver's
// topology keys admit n.
func canProvision(n *model.Node, c *model.DelayedClaim) bool {
	if c.Provisioner == "" || (c.SelectedNode != "" && c.SelectedNode != n.Name) {
		return false
	}
	if len(c.AllowedTopologies) > 0 && !matchTopology(c.AllowedTopologies, n.Labels) {
		return false
	}
	for _, key := range c.DriverTopologyKeys {
		if _, ok := n.Labels[key]; !ok {
			return false
		}
	}
	return true
}

// attachLimitExceeded reports whether the pod's CSI volumes, added to the distinct
// volumes n's pods attach, exceed a driver's limit on n.
func attachLimitExceeded(n *model.Node, want []model.CSIVolume) bool {
	for _, w := range want {
		limit, ok := n.CSIAttachLimits[w.Driver]
		if !ok {
			continue
		}
		attached := map[string]struct{}{}
		for _, p := range n.Pods {
			if p.Constraints == nil || p.Constraints.Volumes == nil {
				continue
			}
			for _, a := range p.Constraints.Volumes.Attach {
				if a.Driver == w.Driver {
					attached[a.Handle] = struct{}{}
				}
			}
		}
		for _, a := range want {
			if a.Driver == w.Driver {
				attached[a.Handle] = struct{}{}
			}
		}
		if len(attached) > limit {
			return true
		}
	}
	return false
}

// matchTopology is kube's MatchTopologySelectorTerms (which lives in
// k8s.io/kubernetes, not importable): some term with expressions whose every
// expression the node's labels satisfy (key present, value listed).
func matchTopology(terms []corev1.TopologySelectorTerm, nodeLabels map[string]string) bool {
	if len(terms) == 0 {
		return true
	}
	for _, t := range terms {
		if len(t.MatchLabelExpressions) == 0 {
			continue
		}
		ok := true
		for _, e := range t.MatchLabelExpressions {
			value, has := nodeLabels[e.Key]
			if !has || !slices.Contains(e.Values, value) {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// VolumesFor says how each of a pod's WaitForFirstConsumer claims gets its volume
// on node n, as kube-scheduler's volume binder decides it: in order, each claim
// takes the first of its available volumes that admits n, that no earlier claim
// of the pod took and that taken (nil: none) does not report taken by another pod
// (volumes[i] is its name), else a new volume is provisioned on n (volumes[i] is
// "") where the claim's class can provision there. ok is false when some claim can
// have neither: two claims cannot share one available volume.
func VolumesFor(n *model.Node, claims []model.DelayedClaim, taken func(string) bool) (volumes []string, ok bool) {
	volumes = make([]string, len(claims))
	for i := range claims {
		c := &claims[i]
		for j := range c.Available {
			b := &c.Available[j]
			if slices.Contains(volumes[:i], b.Volume) || (taken != nil && taken(b.Volume)) || !volumeAdmits(n, b) {
				continue
			}
			volumes[i] = b.Volume
			break
		}
		if volumes[i] != "" {
			continue
		}
		if !canProvision(n, c) {
			return nil, false
		}
	}
	return volumes, true
}

// delayedClaims are the pod's WaitForFirstConsumer claims, or nil.
func delayedClaims(p *model.Pod) []model.DelayedClaim {
	if p.Constraints == nil || p.Constraints.Volumes == nil {
		return nil
	}
	return p.Constraints.Volumes.Delayed
}

// claimVolumes is Placement.Volumes for pod on n in v: VolumesFor, skipping the
// volumes taken in v.
func (v *View) claimVolumes(p *model.Pod, n *model.Node) []string {
	claims := delayedClaims(p)
	if len(claims) == 0 {
		return nil
	}
	volumes, _ := VolumesFor(n, claims, v.volumeTaken)
	return volumes
}

// volumeTaken reports whether a pod assigned in v or an ancestor took the volume.
func (v *View) volumeTaken(pv string) bool {
	for x := v; x != nil; x = x.parent {
		if _, ok := x.volumes[pv]; ok {
			return true
		}
	}
	return false
}

// takeVolumes records the available volumes p takes at pl (pl.Volumes, or, for a
// placement made without them, VolumesFor on n now) as taken in v.
func (v *View) takeVolumes(p *model.Pod, n *model.Node, pl Placement) {
	claims := delayedClaims(p)
	if len(claims) == 0 {
		return
	}
	volumes := pl.Volumes
	if len(volumes) != len(claims) {
		volumes, _ = VolumesFor(n, claims, v.volumeTaken)
	}
	for _, pv := range volumes {
		if pv == "" {
			continue
		}
		if v.volumes == nil {
			v.volumes = map[string]struct{}{}
		}
		v.volumes[pv] = struct{}{}
	}
}
