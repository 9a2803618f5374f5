// Package podspec translates the parts of a pod that kube-scheduler's default
// filters and scores read beyond resources and node affinity (pod affinity and
// anti-affinity, topology spread, host ports, volumes) into the scheduling core's
// model.Constraints, and says which fields Gantry does not implement so that the pod
// is refused out loud rather than placed as if they were not there.
//
// It is pure: it reads API objects handed to it (a Lookup for claims, volumes and
// classes) and does no I/O, except ApplyVolumeBinding, which writes a placement's
// volume decisions through a client.
package podspec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Lookup gives the objects a pod's volumes refer to; each returns nil when the
// object does not exist (or is not known yet).
type Lookup interface {
	Claim(namespace, name string) *corev1.PersistentVolumeClaim
	Volume(name string) *corev1.PersistentVolume
	StorageClass(name string) *storagev1.StorageClass
	// AvailableVolumes lists the PersistentVolumes of a storage class in
	// status.phase Available: those no claim holds (no claimRef), and those the
	// scheduler pre-bound to a claim (claimRef set) that the PV controller has not
	// bound yet.
	AvailableVolumes(class string) []*corev1.PersistentVolume
	// DriverTopologyKeys are the topology keys the CSI driver reports on nodes
	// (CSINode spec.drivers[].topologyKeys), nil when it reports none.
	DriverTopologyKeys(driver string) []string
}

// Constraints translates pod into the core's constraints, or nil when the pod has
// none. nsLabels are the cluster's namespaces and their labels, for terms with a
// namespaceSelector (nil when unknown: such terms then select by their namespace
// list only). lookup may be nil for a pod without PersistentVolumeClaims.
//
// Anything that cannot be honoured becomes a Refusal in the result: the pod must
// stay pending with it (see Refusals).
func Constraints(pod *corev1.Pod, lookup Lookup, nsLabels map[string]map[string]string) *model.Constraints {
	c := &model.Constraints{}
	if a := pod.Spec.Affinity; a != nil {
		addPodAffinity(c, pod, a, nsLabels)
		if a.NodeAffinity != nil {
			c.PreferredNodeAffinity = a.NodeAffinity.PreferredDuringSchedulingIgnoredDuringExecution
		}
	}
	addSpread(c, pod)
	c.HostPorts = HostPorts(pod)
	addNodeFeatures(c, pod)
	addVolumes(c, pod, lookup)
	addUnsupported(c, pod)
	if len(c.Affinity)+len(c.AntiAffinity)+len(c.PreferredAffinity)+len(c.PreferredAntiAffinity)+len(c.PreferredNodeAffinity)+
		len(c.Spread)+len(c.HostPorts)+len(c.NodeFeatures)+len(c.Refusals)+len(c.ExclusiveClaims) == 0 && c.Volumes == nil {
		return nil
	}
	return c
}

// Refusals returns the reasons the pod cannot be placed anywhere, as one message
// that names each field and what to change; "" when there are none.
func Refusals(c *model.Constraints) string {
	if c == nil || len(c.Refusals) == 0 {
		return ""
	}
	msg := ""
	for i, r := range c.Refusals {
		if i > 0 {
			msg += "; "
		}
		msg += r.String()
	}
	return msg
}

func refuse(c *model.Constraints, kind model.RefusalKind, field, format string, args ...any) {
	c.Refusals = append(c.Refusals, model.Refusal{Kind: kind, Field: field, Message: fmt.Sprintf(format, args...)})
}

// addPodAffinity translates required and preferred pod affinity and anti-affinity.
func addPodAffinity(c *model.Constraints, pod *corev1.Pod, a *corev1.Affinity, nsLabels map[string]map[string]string) {
	if pa := a.PodAffinity; pa != nil {
		c.Affinity, c.PreferredAffinity = affinityTerms(c, "spec.affinity.podAffinity", pod,
			pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, nsLabels)
	}
	if pa := a.PodAntiAffinity; pa != nil {
		c.AntiAffinity, c.PreferredAntiAffinity = affinityTerms(c, "spec.affinity.podAntiAffinity", pod,
			pa.RequiredDuringSchedulingIgnoredDuringExecution, pa.PreferredDuringSchedulingIgnoredDuringExecution, nsLabels)
	}
}

// affinityTerms translates one kind's required and preferred terms (podAffinity or
// podAntiAffinity, named by prefix in refusals), leaving out the refused ones.
func affinityTerms(c *model.Constraints, prefix string, pod *corev1.Pod, required []corev1.PodAffinityTerm,
	preferred []corev1.WeightedPodAffinityTerm, nsLabels map[string]map[string]string) ([]model.AffinityTerm, []model.WeightedAffinityTerm) {
	var req []model.AffinityTerm
	var pref []model.WeightedAffinityTerm
	for i := range required {
		field := fmt.Sprintf("%s.requiredDuringSchedulingIgnoredDuringExecution[%d]", prefix, i)
		if t, ok := affinityTerm(c, field, pod, &required[i], nsLabels); ok {
			req = append(req, t)
		}
	}
	for i := range preferred {
		w := &preferred[i]
		field := fmt.Sprintf("%s.preferredDuringSchedulingIgnoredDuringExecution[%d]", prefix, i)
		if t, ok := affinityTerm(c, field, pod, &w.PodAffinityTerm, nsLabels); ok {
			pref = append(pref, model.WeightedAffinityTerm{AffinityTerm: t, Weight: w.Weight})
		}
	}
	return req, pref
}

// affinityTerm builds one term as kube-scheduler does: a nil labelSelector selects
// nothing; no namespaces and no namespaceSelector mean the pod's own namespace; a
// namespaceSelector is resolved against nsLabels for the pod's own use and kept for
// matching other pods' namespaces. matchLabelKeys and mismatchLabelKeys are merged
// into the selector with the pod's own label values.
func affinityTerm(c *model.Constraints, field string, pod *corev1.Pod, t *corev1.PodAffinityTerm, nsLabels map[string]map[string]string) (model.AffinityTerm, bool) {
	sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
	if err != nil {
		refuse(c, model.RefusalInvalid, field+".labelSelector", "cannot be parsed (%v); fix the selector", err)
		return model.AffinityTerm{}, false
	}
	sel = mergeLabelKeys(sel, pod.Labels, t.MatchLabelKeys, selection.In)
	sel = mergeLabelKeys(sel, pod.Labels, t.MismatchLabelKeys, selection.NotIn)
	out := model.AffinityTerm{Selector: sel, TopologyKey: t.TopologyKey, Namespaces: map[string]struct{}{}}
	for _, ns := range t.Namespaces {
		out.Namespaces[ns] = struct{}{}
	}
	if t.NamespaceSelector == nil {
		if len(t.Namespaces) == 0 {
			out.Namespaces[pod.Namespace] = struct{}{}
		}
		return out, true
	}
	nsSel, err := metav1.LabelSelectorAsSelector(t.NamespaceSelector)
	if err != nil {
		refuse(c, model.RefusalInvalid, field+".namespaceSelector", "cannot be parsed (%v); fix the selector", err)
		return model.AffinityTerm{}, false
	}
	out.NamespaceSelector = nsSel
	if !nsSel.Empty() {
		for ns, l := range nsLabels {
			if nsSel.Matches(labels.Set(l)) {
				out.Namespaces[ns] = struct{}{}
			}
		}
	}
	return out, true
}
