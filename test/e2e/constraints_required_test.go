package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	schedulingv1 "k8s.io/api/scheduling/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/names"
)

// As in the scoring tests, every node first gets a pod pinned to it (some of them
// fillers that make packing prefer a node the constraint under test rules out), so
// that the scheduler has seen every node before the pods under test arrive.

const diskKey = "example.com/disk"

func withNodeAffinity(terms ...corev1.NodeSelectorTerm) podOpt {
	return func(p *corev1.Pod) {
		if p.Spec.Affinity == nil {
			p.Spec.Affinity = &corev1.Affinity{}
		}
		p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: terms}}
	}
}

func term(reqs ...corev1.NodeSelectorRequirement) corev1.NodeSelectorTerm {
	return corev1.NodeSelectorTerm{MatchExpressions: reqs}
}

func req(key string, op corev1.NodeSelectorOperator, values ...string) corev1.NodeSelectorRequirement {
	return corev1.NodeSelectorRequirement{Key: key, Operator: op, Values: values}
}

func diskNode(name, zone, disk string) *corev1.Node {
	n := cpuNodeInZone(name, zone)
	n.Labels[diskKey] = disk
	return n
}

// A pod's own required node affinity is honoured as kube-scheduler's NodeAffinity
// reads it: the expressions of a term all hold (AND), one of the terms is enough
// (OR); a pod no node satisfies waits and says so. na-1 is the fullest node and
// na-2 the next, so packing alone would put every pod on na-1.
func TestConstraintsRequiredNodeAffinity(t *testing.T) {
	ns := namespace(t)
	createNodes(t, diskNode("na-1", "a", "ssd"), diskNode("na-2", "b", "hdd"), diskNode("na-3", "b", "ssd"))
	createPods(t,
		newPod(ns, "fill-1", onTestNodes(t), onNode("na-1"), withCPU("20")),
		newPod(ns, "fill-2", onTestNodes(t), onNode("na-2"), withCPU("10")),
		newPod(ns, "fill-3", onTestNodes(t), onNode("na-3")))
	waitPods(t, ns, 2*time.Minute, "fillers bound", func(ps []corev1.Pod) bool { return bound(ps) == 3 })

	createPods(t,
		// An SSD outside zone a: na-3 only.
		newPod(ns, "and", onTestNodes(t), withNodeAffinity(term(req(diskKey, corev1.NodeSelectorOpIn, "ssd"), req(zoneKey, corev1.NodeSelectorOpNotIn, "a")))),
		// Zone c (no such node) or na-2 by name: na-2 only.
		newPod(ns, "or", onTestNodes(t), withNodeAffinity(term(req(zoneKey, corev1.NodeSelectorOpIn, "c")), term(req(corev1.LabelHostname, corev1.NodeSelectorOpIn, "na-2")))),
		// No node has an NVMe disk.
		newPod(ns, "nowhere", onTestNodes(t), withNodeAffinity(term(req(diskKey, corev1.NodeSelectorOpIn, "nvme")))))
	got := waitPods(t, ns, 2*time.Minute, "and and or bound, nowhere explained", func(ps []corev1.Pod) bool {
		return bound(ps) == 5 && unschedulableMessage(ps, "nowhere") != ""
	})
	if node := nodeOf(got, "and"); node != "na-3" {
		t.Errorf("and bound to %s, want na-3 (the only SSD outside zone a):\n%s", node, describe(got))
	}
	if node := nodeOf(got, "or"); node != "na-2" {
		t.Errorf("or bound to %s, want na-2 (its second term):\n%s", node, describe(got))
	}
	if msg := unschedulableMessage(got, "nowhere"); !strings.Contains(msg, "affinity") {
		t.Errorf("nowhere's condition %q does not name the node affinity", msg)
	}
	if node := nodeOf(got, "nowhere"); node != "" {
		t.Errorf("nowhere bound to %s; no node has an NVMe disk", node)
	}
}

// A gang whose members require each other in one zone (required pod affinity to
// their own label) is bound whole in one zone. They also prefer not to share a node
// (preferred anti-affinity among themselves), which alone would put the three on the
// three nodes, across both zones. A gang whose members require each other on one node,
// where a node holds two of them, binds none and says why (without the affinity, the
// three would fit on two nodes).
func TestConstraintsGangSelfAffinityTogether(t *testing.T) {
	ns := namespace(t)
	createNodes(t, cpuNodeInZone("ga-a1", "a"), cpuNodeInZone("ga-a2", "a"), cpuNodeInZone("ga-b1", "b"))
	createPods(t,
		newPod(ns, "fill-a1", onTestNodes(t), onNode("ga-a1")),
		newPod(ns, "fill-a2", onTestNodes(t), onNode("ga-a2")),
		newPod(ns, "fill-b1", onTestNodes(t), onNode("ga-b1")))
	waitPods(t, ns, 2*time.Minute, "fillers bound", func(ps []corev1.Pod) bool { return bound(ps) == 3 })

	together := func(app, topologyKey string) *corev1.PodAffinity {
		return &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			{LabelSelector: selectorOf("app", app), TopologyKey: topologyKey}}}
	}
	zonal := withAnnotations(names.AnnotationPodGroup, "zonal", names.AnnotationMinMember, "3")
	for _, name := range []string{"z-0", "z-1", "z-2"} {
		createPods(t, newPod(ns, name, onTestNodes(t), zonal, withLabels("app", "zonal"), withCPU("8"), withAffinity(&corev1.Affinity{
			PodAffinity: together("zonal", zoneKey),
			PodAntiAffinity: &corev1.PodAntiAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.WeightedPodAffinityTerm{
				preferredTerm(100, "app", "zonal", corev1.LabelHostname)}},
		})))
	}
	got := waitPods(t, ns, 2*time.Minute, "zonal gang bound whole", func(ps []corev1.Pod) bool { return bound(ps) == 6 })
	zones := map[string]int{}
	for _, name := range []string{"z-0", "z-1", "z-2"} {
		zones[map[string]string{"ga-a1": "a", "ga-a2": "a", "ga-b1": "b"}[nodeOf(got, name)]]++
	}
	if len(zones) != 1 {
		t.Errorf("zonal gang bound across zones %v, want one zone:\n%s", zones, describe(got))
	}

	oneNode := withAnnotations(names.AnnotationPodGroup, "one-node", names.AnnotationMinMember, "3")
	for _, name := range []string{"h-0", "h-1", "h-2"} {
		createPods(t, newPod(ns, name, onTestNodes(t), oneNode, withLabels("app", "one-node"), withCPU("12"),
			withAffinity(&corev1.Affinity{PodAffinity: together("one-node", corev1.LabelHostname)})))
	}
	// Until the third member exists the gang waits for it; then every member's
	// condition must name the pod affinity that keeps them on one node.
	got = waitPods(t, ns, 2*time.Minute, "one-node gang explained by its pod affinity", func(ps []corev1.Pod) bool {
		for _, name := range []string{"h-0", "h-1", "h-2"} {
			if !strings.Contains(unschedulableMessage(ps, name), "pod affinity") {
				return false
			}
		}
		return true
	})
	for _, name := range []string{"h-0", "h-1", "h-2"} {
		if node := nodeOf(got, name); node != "" {
			t.Errorf("%s bound to %s; no node holds the three members:\n%s", name, node, describe(got))
		}
	}
}

// preemptionPolicy: Never on a high-priority pod: it evicts nothing, and its
// condition says so in kube-scheduler's words; the same pod with the default policy,
// on a twin node, does evict the low-priority pod in its way, so the difference is the
// policy alone.
func TestConstraintsPreemptionPolicyNever(t *testing.T) {
	ns := namespace(t)
	ctx := context.Background()
	applyPriorityClasses(t) // train: 50, preemptible
	for _, pc := range []*schedulingv1.PriorityClass{
		{ObjectMeta: metav1.ObjectMeta{Name: ns + "-never"}, Value: 1000, PreemptionPolicy: ptr.To(corev1.PreemptNever)},
		{ObjectMeta: metav1.ObjectMeta{Name: ns + "-preempts"}, Value: 1000},
	} {
		if _, err := env.Client.SchedulingV1().PriorityClasses().Create(ctx, pc, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			_ = env.Client.SchedulingV1().PriorityClasses().Delete(context.Background(), pc.Name, metav1.DeleteOptions{})
		})
	}
	class := func(c string) podOpt { return func(p *corev1.Pod) { p.Spec.PriorityClassName = c } }
	createNodes(t, cpuNodeInZone("pn-never", "a"), cpuNodeInZone("pn-ctl", "a"))
	createPods(t,
		newPod(ns, "low-never", onTestNodes(t), onNode("pn-never"), class("train"), withCPU("30")),
		newPod(ns, "low-ctl", onTestNodes(t), onNode("pn-ctl"), class("train"), withCPU("30")))
	waitPods(t, ns, 2*time.Minute, "low-priority pods bound", func(ps []corev1.Pod) bool { return bound(ps) == 2 })

	createPods(t, newPod(ns, "never", onTestNodes(t), onNode("pn-never"), class(ns+"-never"), withCPU("8")))
	const note = "not eligible due to preemptionPolicy=Never"
	got := waitPods(t, ns, 2*time.Minute, "never explained", func(ps []corev1.Pod) bool {
		return strings.Contains(unschedulableMessage(ps, "never"), note)
	})
	checkLowStays := func(ps []corev1.Pod) {
		t.Helper()
		for _, p := range ps {
			if p.Name == "low-never" && (p.DeletionTimestamp != nil || p.Spec.NodeName != "pn-never") {
				t.Fatalf("low-never evicted for a pod with preemptionPolicy: Never:\n%s", describe(ps))
			}
		}
		if nodeOf(ps, "low-never") == "" || nodeOf(ps, "never") != "" {
			t.Fatalf("want low-never bound and never pending:\n%s", describe(ps))
		}
	}
	checkLowStays(got)

	// The control: the default policy evicts low-ctl and binds. Meanwhile many
	// cycles have seen never again, and still evicted nothing for it.
	createPods(t, newPod(ns, "preempts", onTestNodes(t), onNode("pn-ctl"), class(ns+"-preempts"), withCPU("8")))
	got = waitPods(t, ns, 2*time.Minute, "preempts bound in low-ctl's place", func(ps []corev1.Pod) bool {
		return nodeOf(ps, "preempts") == "pn-ctl" && nodeOf(ps, "low-ctl") == ""
	})
	checkLowStays(got)
	if msg := unschedulableMessage(got, "never"); !strings.Contains(msg, note) {
		t.Errorf("never's condition now %q, want it to say %q", msg, note)
	}
}
