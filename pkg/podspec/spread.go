package podspec

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/selection"

	"github.com/gantry-dev/gantry/pkg/model"
)

// addSpread translates spec.topologySpreadConstraints as kube-scheduler reads them:
// minDomains defaults to 1, nodeAffinityPolicy to Honor, nodeTaintsPolicy to
// Ignore, and matchLabelKeys are merged into the selector with the pod's values.
func addSpread(c *model.Constraints, pod *corev1.Pod) {
	for i := range pod.Spec.TopologySpreadConstraints {
		t := &pod.Spec.TopologySpreadConstraints[i]
		field := fmt.Sprintf("spec.topologySpreadConstraints[%d]", i)
		sel, err := metav1.LabelSelectorAsSelector(t.LabelSelector)
		if err != nil {
			refuse(c, model.RefusalInvalid, field+".labelSelector", "cannot be parsed (%v); fix the selector", err)
			continue
		}
		sc := model.SpreadConstraint{
			MaxSkew:           t.MaxSkew,
			TopologyKey:       t.TopologyKey,
			Hard:              t.WhenUnsatisfiable != corev1.ScheduleAnyway,
			Selector:          mergeLabelKeys(sel, pod.Labels, t.MatchLabelKeys, selection.In),
			MinDomains:        1,
			HonorNodeAffinity: t.NodeAffinityPolicy == nil || *t.NodeAffinityPolicy == corev1.NodeInclusionPolicyHonor,
			HonorNodeTaints:   t.NodeTaintsPolicy != nil && *t.NodeTaintsPolicy == corev1.NodeInclusionPolicyHonor,
		}
		if t.MinDomains != nil {
			sc.MinDomains = *t.MinDomains
		}
		c.Spread = append(c.Spread, sc)
	}
}

// mergeLabelKeys adds, for each key the pod has a label for, "key op (value)" to
// sel: matchLabelKeys (In) and mismatchLabelKeys (NotIn). A selector that cannot
// take requirements (labels.Nothing) is returned as is.
func mergeLabelKeys(sel labels.Selector, podLabels map[string]string, keys []string, op selection.Operator) labels.Selector {
	for _, k := range keys {
		v, ok := podLabels[k]
		if !ok {
			continue
		}
		if _, selectable := sel.Requirements(); !selectable {
			return sel
		}
		r, err := labels.NewRequirement(k, op, []string{v})
		if err != nil {
			continue
		}
		sel = sel.Add(*r)
	}
	return sel
}

// HostPorts lists the host ports the pod claims: its containers' and its sidecars'
// (init containers that run for the pod's lifetime), with the address defaulted to
// 0.0.0.0 and the protocol to TCP.
func HostPorts(pod *corev1.Pod) []model.HostPort {
	var out []model.HostPort
	add := func(ports []corev1.ContainerPort) {
		for _, p := range ports {
			if p.HostPort <= 0 {
				continue
			}
			h := model.HostPort{IP: p.HostIP, Protocol: string(p.Protocol), Port: p.HostPort}
			if h.IP == "" {
				h.IP = "0.0.0.0"
			}
			if h.Protocol == "" {
				h.Protocol = string(corev1.ProtocolTCP)
			}
			out = append(out, h)
		}
	}
	for i := range pod.Spec.InitContainers {
		if rp := pod.Spec.InitContainers[i].RestartPolicy; rp != nil && *rp == corev1.ContainerRestartPolicyAlways {
			add(pod.Spec.InitContainers[i].Ports)
		}
	}
	for i := range pod.Spec.Containers {
		add(pod.Spec.Containers[i].Ports)
	}
	return out
}
