package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

func withAffinity(a *corev1.Affinity) podOpt {
	return func(p *corev1.Pod) { p.Spec.Affinity = a }
}

func onNode(name string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeSelector["kubernetes.io/hostname"] = name }
}

func withHostPort(port int32) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Ports = append(p.Spec.Containers[0].Ports, corev1.ContainerPort{ContainerPort: port, HostPort: port})
	}
}

func selectorOf(key, value string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchLabels: map[string]string{key: value}}
}

// Inter-pod affinity and anti-affinity against a running pod, a DoNotSchedule
// spread over zones among pods of one cycle, and host ports, through the real API
// server. Each expectation names the one node the constraint leaves, where
// bin-packing alone would choose another.
func TestConstraintsAffinitySpreadAndHostPorts(t *testing.T) {
	ns := namespace(t)
	createNodes(t, cpuNodeInZone("cx-a1", "a"), cpuNodeInZone("cx-a2", "a"), cpuNodeInZone("cx-b1", "b"))
	createPods(t, newPod(ns, "leader", onTestNodes(t), onNode("cx-a1"), withLabels("app", "leader")))
	waitPods(t, ns, 60*time.Second, "leader bound", func(ps []corev1.Pod) bool { return bound(ps) == 1 })

	// In the leader's zone (required affinity), not on its node (required
	// anti-affinity): cx-a2 only.
	createPods(t, newPod(ns, "follower", onTestNodes(t), withAffinity(&corev1.Affinity{
		PodAffinity: &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			{LabelSelector: selectorOf("app", "leader"), TopologyKey: zoneKey}}},
		PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
			{LabelSelector: selectorOf("app", "leader"), TopologyKey: "kubernetes.io/hostname"}}},
	})))
	got := waitPods(t, ns, 60*time.Second, "follower bound", func(ps []corev1.Pod) bool { return bound(ps) == 2 })
	for _, p := range got {
		if p.Name == "follower" && p.Spec.NodeName != "cx-a2" {
			t.Fatalf("follower bound to %s, want cx-a2 (leader's zone, not its node):\n%s", p.Spec.NodeName, describe(got))
		}
	}

	// Two pods of one cycle, at most one apart per zone: one in zone b.
	spread := func(p *corev1.Pod) {
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: zoneKey,
			WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: selectorOf("app", "spread"), MinDomains: ptr.To[int32](2)}}
	}
	createPods(t, newPod(ns, "s-0", onTestNodes(t), withLabels("app", "spread"), spread),
		newPod(ns, "s-1", onTestNodes(t), withLabels("app", "spread"), spread))
	got = waitPods(t, ns, 60*time.Second, "spread pods bound", func(ps []corev1.Pod) bool { return bound(ps) == 4 })
	zones := map[string]int{}
	for _, p := range got {
		if strings.HasPrefix(p.Name, "s-") {
			zones[map[string]string{"cx-a1": "a", "cx-a2": "a", "cx-b1": "b"}[p.Spec.NodeName]]++
		}
	}
	if zones["a"] != 1 || zones["b"] != 1 {
		t.Fatalf("spread pods per zone %v, want one in each:\n%s", zones, describe(got))
	}

	// Two pods asking for host port 9090 on one node: one binds, the other waits
	// and says why.
	createPods(t, newPod(ns, "hp-0", onTestNodes(t), onNode("cx-b1"), withHostPort(9090)),
		newPod(ns, "hp-1", onTestNodes(t), onNode("cx-b1"), withHostPort(9090)))
	got = waitPods(t, ns, 60*time.Second, "one host-port pod bound, the other explained", func(ps []corev1.Pod) bool {
		return bound(ps) == 5 && (strings.Contains(unschedulableMessage(ps, "hp-0"), "free ports") || strings.Contains(unschedulableMessage(ps, "hp-1"), "free ports"))
	})
	if n := bound(got); n != 5 {
		t.Fatalf("%d pods bound, want 5 (one host-port pod waiting):\n%s", n, describe(got))
	}
}

// CSI attach limits per node (CSINode) and a claim whose volume is bound to another
// claim, through the real API server: the second CSI volume on a node that attaches
// one waits; the claim bound elsewhere waits with a reason.
func TestConstraintsAttachLimitAndClaimBoundElsewhere(t *testing.T) {
	ns := namespace(t)
	createNodes(t, cpuNodeInZone("al-1", "a"))
	ctx := context.Background()
	driver := "csi.example.com"
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "al-1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
		{Name: driver, NodeID: "al-1", Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](1)}}}}}
	if _, err := env.Client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.StorageV1().CSINodes().Delete(context.Background(), "al-1", metav1.DeleteOptions{})
	})
	csiClaimAndVolume(t, ns, "one", "one", driver)
	csiClaimAndVolume(t, ns, "two", "two", driver)
	csiClaimAndVolume(t, ns, "stolen", "someone-else", driver)
	createPods(t, newPod(ns, "v-0", onTestNodes(t), withClaim("one")), newPod(ns, "v-1", onTestNodes(t), withClaim("two")),
		newPod(ns, "thief", onTestNodes(t), withClaim("stolen")))
	got := waitPods(t, ns, 60*time.Second, "one CSI pod bound, the other and the thief explained", func(ps []corev1.Pod) bool {
		waiting := unschedulableMessage(ps, "v-0") + unschedulableMessage(ps, "v-1")
		return bound(ps) == 1 && strings.Contains(waiting, "max volume count") &&
			strings.Contains(unschedulableMessage(ps, "thief"), "bound to another claim")
	})
	if n := bound(got); n != 1 {
		t.Fatalf("%d pods bound on a node that attaches one CSI volume, want 1:\n%s", n, describe(got))
	}
}
