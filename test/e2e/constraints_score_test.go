package e2e

import (
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/names"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// The scoring tests below build clusters where bin-packing alone picks one node and
// the stated preference alone picks another, every other score being equal; a
// preference's score outranks packing in Gantry (placement.constraintState.pick),
// so the preferred node is the only right answer. Every node first gets a pod pinned
// to it, so that the scheduler has seen every node before the pods under test arrive.

// withCPU sets the pod's CPU request (and so how full it makes its node).
func withCPU(cpu string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests[corev1.ResourceCPU] = resource.MustParse(cpu)
	}
}

func preferredTerm(weight int32, key, value, topologyKey string) corev1.WeightedPodAffinityTerm {
	return corev1.WeightedPodAffinityTerm{Weight: weight, PodAffinityTerm: corev1.PodAffinityTerm{
		LabelSelector: selectorOf(key, value), TopologyKey: topologyKey,
	}}
}

// nodeOf returns the node the named pod is bound to.
func nodeOf(ps []corev1.Pod, name string) string {
	for _, p := range ps {
		if p.Name == name {
			return p.Spec.NodeName
		}
	}
	return ""
}

// Preferred inter-pod affinity and anti-affinity score, as kube-scheduler's
// InterPodAffinity does: the pod's own preferred terms, a placed pod's preferred
// anti-affinity term that selects the incoming pod, and a gang's own members
// placed in the same cycle. pa-2 is fuller, so packing alone picks it every time.
func TestConstraintsPreferredPodAffinityScores(t *testing.T) {
	ns := namespace(t)
	createNodes(t, cpuNodeInZone("pa-1", "a"), cpuNodeInZone("pa-2", "a"))
	host := corev1.LabelHostname
	createPods(t,
		newPod(ns, "anchor", onTestNodes(t), onNode("pa-1"), withLabels("app", "anchor")),
		newPod(ns, "filler", onTestNodes(t), onNode("pa-2"), withLabels("app", "filler"), withCPU("8"),
			withAffinity(&corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
				PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{preferredTerm(100, "app", "guest", host)},
			}})))
	waitPods(t, ns, 60*time.Second, "anchor and filler bound", func(ps []corev1.Pod) bool { return bound(ps) == 2 })

	createPods(t,
		// Prefers the anchor's node.
		newPod(ns, "near", onTestNodes(t), withAffinity(&corev1.Affinity{PodAffinity: &corev1.PodAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{preferredTerm(100, "app", "anchor", host)},
		}})),
		// Prefers not to share the filler's node.
		newPod(ns, "far", onTestNodes(t), withAffinity(&corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
			PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{preferredTerm(100, "app", "filler", host)},
		}})),
		// States nothing; the filler prefers not to have it on its node.
		newPod(ns, "guest", onTestNodes(t), withLabels("app", "guest")))
	got := waitPods(t, ns, 60*time.Second, "near, far and guest bound", func(ps []corev1.Pod) bool { return bound(ps) == 5 })
	for _, name := range []string{"near", "far", "guest"} {
		if node := nodeOf(got, name); node != "pa-1" {
			t.Errorf("%s bound to %s, want pa-1 (its preference; packing alone picks pa-2):\n%s", name, node, describe(got))
		}
	}

	// A gang of two that prefers one member per node, where both fit on the fuller
	// pa-2: the member placed second in the cycle scores against the first.
	pair := withAnnotations(names.AnnotationPodGroup, "pair", names.AnnotationMinMember, "2")
	apart := withAffinity(&corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{preferredTerm(100, "app", "pair", host)},
	}})
	createPods(t,
		newPod(ns, "pair-0", onTestNodes(t), pair, withLabels("app", "pair"), apart),
		newPod(ns, "pair-1", onTestNodes(t), pair, withLabels("app", "pair"), apart))
	got = waitPods(t, ns, 60*time.Second, "pair bound", func(ps []corev1.Pod) bool { return bound(ps) == 7 })
	if a, b := nodeOf(got, "pair-0"), nodeOf(got, "pair-1"); a == b {
		t.Errorf("gang members preferring one per node share %s, with pa-1 and pa-2 both free for one:\n%s", a, describe(got))
	}
}

// ScheduleAnyway topology spread scores, as kube-scheduler's PodTopologySpread
// does: over zones, the pod goes to the zone with fewer matching pods although
// packing picks the fuller zone; over hostnames, two pods go to two nodes although
// both fit on one.
func TestConstraintsScheduleAnywaySpreadScores(t *testing.T) {
	ns := namespace(t)
	createNodes(t, cpuNodeInZone("sa-a1", "a"), cpuNodeInZone("sa-a2", "a"), cpuNodeInZone("sa-b1", "b"))
	createPods(t,
		newPod(ns, "s-a1", onTestNodes(t), onNode("sa-a1"), withLabels("app", "s"), withCPU("4")),
		newPod(ns, "s-a2", onTestNodes(t), onNode("sa-a2"), withLabels("app", "s"), withCPU("4")),
		newPod(ns, "other-b1", onTestNodes(t), onNode("sa-b1"), withLabels("app", "other")))
	waitPods(t, ns, 60*time.Second, "pinned pods bound", func(ps []corev1.Pod) bool { return bound(ps) == 3 })

	soft := func(key, value, topologyKey string) podOpt {
		return func(p *corev1.Pod) {
			p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: topologyKey,
				WhenUnsatisfiable: corev1.ScheduleAnyway, LabelSelector: selectorOf(key, value)}}
		}
	}
	createPods(t, newPod(ns, "zonal", onTestNodes(t), withLabels("app", "s"), soft("app", "s", zoneKey)))
	got := waitPods(t, ns, 60*time.Second, "zonal bound", func(ps []corev1.Pod) bool { return bound(ps) == 4 })
	if node := nodeOf(got, "zonal"); node != "sa-b1" {
		t.Fatalf("zonal bound to %s, want sa-b1 (zone b has no pod of app=s; packing alone picks zone a):\n%s", node, describe(got))
	}

	createPods(t,
		newPod(ns, "h-0", onTestNodes(t), withLabels("app", "h"), soft("app", "h", corev1.LabelHostname)),
		newPod(ns, "h-1", onTestNodes(t), withLabels("app", "h"), soft("app", "h", corev1.LabelHostname)))
	got = waitPods(t, ns, 60*time.Second, "h pods bound", func(ps []corev1.Pod) bool { return bound(ps) == 6 })
	if a, b := nodeOf(got, "h-0"), nodeOf(got, "h-1"); a == b {
		t.Errorf("pods spreading softly over hostnames share %s:\n%s", a, describe(got))
	}
}
