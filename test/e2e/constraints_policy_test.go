package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// policyZoneKey is a topology key only TestConstraintsSpreadNodePoliciesAndMinDomains
// uses: with nodeAffinityPolicy Ignore, nodes of other tests that carried the key
// would count as domains.
const policyZoneKey = "example.com/policy-zone"

// dedicatedTaint is a taint the pods under test do not tolerate.
var dedicatedTaint = corev1.Taint{Key: "example.com/dedicated", Value: "x", Effect: corev1.TaintEffectNoSchedule}

func policyNode(name, zone string, pool bool, taints ...corev1.Taint) *corev1.Node {
	n := gpuNode(name, 0, "", 0)
	n.Labels[policyZoneKey] = zone
	if pool {
		n.Labels["example.com/pool"] = "x"
	}
	n.Spec.Taints = append(n.Spec.Taints, taints...)
	return n
}

func tolerating(t corev1.Taint) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: t.Key, Operator: corev1.TolerationOpEqual, Value: t.Value, Effect: t.Effect})
	}
}

// hardSpread is a DoNotSchedule spread of app=pol over policy zones, one apart.
func hardSpread(affinity, taints corev1.NodeInclusionPolicy, minDomains int32) podOpt {
	return func(p *corev1.Pod) {
		c := corev1.TopologySpreadConstraint{MaxSkew: 1, TopologyKey: policyZoneKey, WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: selectorOf("app", "pol"), NodeAffinityPolicy: &affinity, NodeTaintsPolicy: &taints}
		if minDomains > 0 {
			c.MinDomains = &minDomains
		}
		p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{c}
		if p.Spec.NodeSelector == nil {
			p.Spec.NodeSelector = map[string]string{}
		}
		p.Spec.NodeSelector["example.com/pool"] = "x"
	}
}

// The node inclusion policies and minDomains of a DoNotSchedule spread, read as
// kube-scheduler's PodTopologySpread reads them. Zones a and b hold one app=pol pod
// each; zone c's node is outside the pods' node selector (pool), zone d's node has a
// taint they do not tolerate; c and d hold none. A pod of app=pol fits in a or b
// only if the zones that count all hold at least one (skew 2 - 1 = 1):
//   - nodeTaintsPolicy Ignore (the default) counts d: waits;
//   - nodeAffinityPolicy Ignore counts c: waits;
//   - minDomains 3 with two zones counting: the minimum is taken as 0, waits;
//   - affinity and taints Honor, minDomains 2: c and d do not count, binds.
func TestConstraintsSpreadNodePoliciesAndMinDomains(t *testing.T) {
	ns := namespace(t)
	createNodes(t, policyNode("np-a", "a", true), policyNode("np-b", "b", true),
		policyNode("np-c", "c", false), policyNode("np-d", "d", true, dedicatedTaint))
	createPods(t,
		newPod(ns, "pol-a", onTestNodes(t), onNode("np-a"), withLabels("app", "pol")),
		newPod(ns, "pol-b", onTestNodes(t), onNode("np-b"), withLabels("app", "pol")),
		newPod(ns, "other-c", onTestNodes(t), onNode("np-c"), withLabels("app", "other")),
		newPod(ns, "other-d", onTestNodes(t), onNode("np-d"), withLabels("app", "other"), tolerating(dedicatedTaint)))
	waitPods(t, ns, 60*time.Second, "pinned pods bound", func(ps []corev1.Pod) bool { return bound(ps) == 4 })

	honor, ignore := corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore
	waiting := []string{"taints-ignored", "affinity-ignored", "too-few-domains"}
	createPods(t,
		newPod(ns, "taints-ignored", onTestNodes(t), withLabels("app", "pol"), hardSpread(honor, ignore, 0)),
		newPod(ns, "affinity-ignored", onTestNodes(t), withLabels("app", "pol"), hardSpread(ignore, honor, 0)),
		newPod(ns, "too-few-domains", onTestNodes(t), withLabels("app", "pol"), hardSpread(honor, honor, 3)))
	waitPods(t, ns, 60*time.Second, "spread pods explained", func(ps []corev1.Pod) bool {
		for _, name := range waiting {
			if !strings.Contains(unschedulableMessage(ps, name), "topology spread") {
				return false
			}
		}
		return true
	})

	createPods(t, newPod(ns, "honored", onTestNodes(t), withLabels("app", "pol"), hardSpread(honor, honor, 2)))
	got := waitPods(t, ns, 60*time.Second, "honored bound", func(ps []corev1.Pod) bool { return nodeOf(ps, "honored") != "" })
	if node := nodeOf(got, "honored"); node != "np-a" && node != "np-b" {
		t.Fatalf("honored bound to %s, want np-a or np-b:\n%s", node, describe(got))
	}
	for _, name := range waiting {
		if node := nodeOf(got, name); node != "" {
			t.Errorf("%s bound to %s; its spread admits no node:\n%s", name, node, describe(got))
		}
	}
}

// boundCSIClaim creates a claim bound to a static PersistentVolume of the CSI driver.
func boundCSIClaim(t *testing.T, ns, claim, driver string) {
	t.Helper()
	csiClaimAndVolume(t, ns, claim, claim, driver)
}

// csiClaimAndVolume creates claim, naming the static PersistentVolume ns-claim of
// the CSI driver, and that volume, pre-bound to pvClaim: claim itself, or another
// claim when the volume is to be bound elsewhere. The volume is deleted at cleanup.
func csiClaimAndVolume(t *testing.T, ns, claim, pvClaim, driver string) {
	t.Helper()
	ctx := context.Background()
	empty := ""
	pvName := ns + "-" + claim
	pv := &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: pvName}, Spec: corev1.PersistentVolumeSpec{
		Capacity:               corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")},
		AccessModes:            []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: driver, VolumeHandle: pvName}},
		ClaimRef:               &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: ns, Name: pvClaim},
		StorageClassName:       empty,
	}}
	if _, err := env.Client.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.CoreV1().PersistentVolumes().Delete(context.Background(), pvName, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: claim}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		StorageClassName: &empty, VolumeName: pvName,
	}}
	if _, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func withClaims(claims ...string) podOpt {
	return func(p *corev1.Pod) {
		for _, c := range claims {
			p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: c, VolumeSource: corev1.VolumeSource{
				PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: c},
			}})
		}
	}
}

// A WaitForFirstConsumer claim of a CSI driver whose CSINode reports a topology
// key: the pod goes to the node that has the key as a label (the driver can
// provision there), not to the node that lacks it, which it prefers, and the claim
// is told that node. The class has no allowedTopologies: only the driver's topology decides.
func TestConstraintsCSIDriverTopologyKeys(t *testing.T) {
	ns := namespace(t)
	driver := "topo.csi.example.com"
	topoKey := "topology.csi.example.com/segment"
	withKey := cpuNodeInZone("ct-1", "a")
	withKey.Labels[topoKey] = "s1"
	createNodes(t, withKey, cpuNodeInZone("ct-2", "a"))
	ctx := context.Background()
	csiNode := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "ct-1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
		{Name: driver, NodeID: "ct-1", TopologyKeys: []string{topoKey}, Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](1)}}}}}
	if _, err := env.Client.StorageV1().CSINodes().Create(ctx, csiNode, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.StorageV1().CSINodes().Delete(context.Background(), "ct-1", metav1.DeleteOptions{})
	})
	createPods(t, newPod(ns, "filler", onTestNodes(t), onNode("ct-2"), withCPU("8")))
	waitCSINodeSeen(t, ns, "ct-1", driver)
	class := ns + "-topo"
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	sc := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: driver, VolumeBindingMode: &wffc}
	if _, err := env.Client.StorageV1().StorageClasses().Create(ctx, sc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.StorageV1().StorageClasses().Delete(context.Background(), class, metav1.DeleteOptions{})
	})
	pvc := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "scratch"}, Spec: corev1.PersistentVolumeClaimSpec{
		AccessModes:      []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
		Resources:        corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}},
		StorageClassName: &class,
	}}
	if _, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Create(ctx, pvc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// p prefers ct-2 (a preference outranks packing): only the driver's topology
	// keeps it off ct-2.
	createPods(t, newPod(ns, "p", onTestNodes(t), withClaim("scratch"), withAffinity(&corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{Weight: 100, Preference: corev1.NodeSelectorTerm{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"ct-2"}}},
		}}},
	}})))
	got := waitPods(t, ns, 60*time.Second, "p bound", func(ps []corev1.Pod) bool { return nodeOf(ps, "p") != "" })
	if node := nodeOf(got, "p"); node != "ct-1" {
		t.Fatalf("p bound to %s, want ct-1 (the only node with the driver's topology key; p prefers ct-2):\n%s", node, describe(got))
	}
	c, err := env.Client.CoreV1().PersistentVolumeClaims(ns).Get(ctx, "scratch", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if selected := c.Annotations["volume.kubernetes.io/selected-node"]; selected != "ct-1" {
		t.Fatalf("claim's selected-node = %q, want ct-1", selected)
	}
}

// waitCSINodeSeen returns once the scheduler has read node's CSINode, which lets
// the node attach one volume of driver: a sentinel pod with two such volumes,
// pinned to the node, then waits for the attach limit. CSINodes and pods come
// through different informers, so a sentinel may be bound before the CSINode is
// read; it is then deleted and another one tried.
func waitCSINodeSeen(t *testing.T, ns, node, driver string) {
	t.Helper()
	boundCSIClaim(t, ns, "sentinel-0", driver)
	boundCSIClaim(t, ns, "sentinel-1", driver)
	ctx := context.Background()
	zero := int64(0)
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("sentinel-%d", i)
		createPods(t, newPod(ns, name, onTestNodes(t), onNode(node), withClaims("sentinel-0", "sentinel-1")))
		got := waitPods(t, ns, 60*time.Second, name+" bound or over the attach limit", func(ps []corev1.Pod) bool {
			return nodeOf(ps, name) != "" || strings.Contains(unschedulableMessage(ps, name), "max volume count")
		})
		if nodeOf(got, name) == "" {
			return
		}
		if err := env.Client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
			t.Fatal(err)
		}
		waitPods(t, ns, 60*time.Second, name+" gone", func(ps []corev1.Pod) bool {
			for _, p := range ps {
				if p.Name == name {
					return false
				}
			}
			return true
		})
	}
	t.Fatalf("the CSINode of %s was not read after 10 sentinels", node)
}
