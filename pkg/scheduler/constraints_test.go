package scheduler_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	"github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

func hostNodes(names ...string) []scenario.Node {
	var out []scenario.Node
	for _, n := range names {
		out = append(out, scenario.Node{Name: n, GPUs: 8, Labels: map[string]string{corev1.LabelHostname: n}})
	}
	return out
}

// rayWorkers is a Ray worker group asking one worker per node.
func rayWorkers(pods int) scenario.Gang {
	return scenario.Gang{Name: "workers", Pods: pods, GPUs: 1, Spec: (&kpod{spec: scenario.Spec{Labels: map[string]string{"ray.io/group": "workers"}}}).
		Anti(term("ray.io/group", in, corev1.LabelHostname, "workers")).spec}
}

// A gang's members placed in the same cycle count for each other's anti-affinity:
// a worker group asking one worker per node gets one per node, though each node
// has room for all of them.
func TestGangAntiAffinityOnePerNode(t *testing.T) {
	scenario.Run(t, scenario.Scenario{
		Nodes: hostNodes("n1", "n2", "n3"),
		Gangs: []scenario.Gang{rayWorkers(3)},
		Expect: scenario.Expect{
			Binds:  []string{"workers"},
			Placed: map[string][]string{"workers": {"n1", "n2", "n3"}},
		},
	})
}

// ... or none, when there are fewer nodes than workers.
func TestGangAntiAffinityNoneWhenTooFewNodes(t *testing.T) {
	scenario.Run(t, scenario.Scenario{
		Nodes:        hostNodes("n1", "n2", "n3"),
		Gangs:        []scenario.Gang{rayWorkers(4)},
		NoPreemption: true,
		Expect:       scenario.Expect{Pending: map[string]scheduler.PendingKind{"workers": scheduler.PendingNoFit}},
	})
}

// A gang spread with maxSkew 1 across two zones lands 2/2, the members placed
// earlier in the cycle counting.
func TestGangSpreadAcrossZones(t *testing.T) {
	nodes := []scenario.Node{
		{Name: "a1", GPUs: 8, Labels: map[string]string{"zone": "a"}}, {Name: "a2", GPUs: 8, Labels: map[string]string{"zone": "a"}},
		{Name: "b1", GPUs: 8, Labels: map[string]string{"zone": "b"}},
	}
	g := scenario.Gang{Name: "train", Pods: 4, GPUs: 1, Spec: nsDefault(hardSpread(mkPod().Labels(map[string]string{"job": "train"}), 1, "zone", existsSel("job")))}
	scenario.Run(t, scenario.Scenario{
		Nodes: nodes, Gangs: []scenario.Gang{g},
		Expect: scenario.Expect{Binds: []string{"train"}, Placed: map[string][]string{"train": {"a1", "b1", "a1", "b1"}}},
	})
}

// Preferred anti-affinity and ScheduleAnyway spread rank the nodes that fit before
// packing does: the pod avoids the node of the pod it prefers to avoid, though
// packing would put it there.
func TestPreferredAntiAffinityOutranksPacking(t *testing.T) {
	scenario.Run(t, scenario.Scenario{
		Nodes: hostNodes("n1", "n2"),
		Gangs: []scenario.Gang{
			{Name: "web", On: "n1", GPUs: 4, Spec: scenario.Spec{Labels: map[string]string{"app": "web"}}},
			{Name: "web2", GPUs: 1, Spec: nsDefault(mkPod().PrefAnti(100, term("app", in, corev1.LabelHostname, "web")))},
		},
		Expect: scenario.Expect{Binds: []string{"web2"}, Placed: map[string][]string{"web2": {"n2"}}},
	})
}

func TestScheduleAnywaySpreadPrefersEmptierZone(t *testing.T) {
	nodes := []scenario.Node{
		{Name: "a1", GPUs: 8, Labels: map[string]string{"zone": "a"}},
		{Name: "b1", GPUs: 8, Labels: map[string]string{"zone": "b"}},
	}
	spec := nsDefault(mkPod().Labels(map[string]string{"app": "x"}).Spread(1, "zone", false, existsSel("app"), nil, nil, nil))
	scenario.Run(t, scenario.Scenario{
		Nodes: nodes,
		Gangs: []scenario.Gang{
			{Name: "x0", On: "a1", GPUs: 1, Spec: scenario.Spec{Labels: map[string]string{"app": "x"}}},
			{Name: "x1", GPUs: 1, Spec: spec},
		},
		Expect: scenario.Expect{Binds: []string{"x1"}, Placed: map[string][]string{"x1": {"b1"}}},
	})
}

// storage: a zonal bound volume, a WaitForFirstConsumer class limited to zone b,
// a claim bound to a volume that names another claim.
func storage() *scenario.Storage {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	immediate := storagev1.VolumeBindingImmediate
	zoneA := &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
		MatchExpressions: []corev1.NodeSelectorRequirement{{Key: gaZone, Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}}
	class := func(name string) *string { return &name }
	claim := func(name, volume string, cls *string) *corev1.PersistentVolumeClaim {
		return &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", UID: "uid-" + "name"},
			Spec: corev1.PersistentVolumeClaimSpec{VolumeName: volume, StorageClassName: cls, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}}
	}
	return &scenario.Storage{
		Claims: []*corev1.PersistentVolumeClaim{
			claim("zonal", "pv-a", nil), claim("elsewhere", "pv-taken", nil),
			claim("late", "", class("zonal-b")), claim("now", "", class("instant")),
		},
		Volumes: []*corev1.PersistentVolume{
			{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Spec: corev1.PersistentVolumeSpec{NodeAffinity: zoneA,
				ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: "zonal", UID: "uid-name"}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "pv-taken"}, Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: "other"}}},
		},
		Classes: []*storagev1.StorageClass{
			{ObjectMeta: metav1.ObjectMeta{Name: "zonal-b"}, Provisioner: "csi.example.com", VolumeBindingMode: &wffc,
				AllowedTopologies: []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{{Key: gaZone, Values: []string{"b"}}}}}},
			{ObjectMeta: metav1.ObjectMeta{Name: "instant"}, Provisioner: "csi.example.com", VolumeBindingMode: &immediate},
		},
	}
}

func zonedNodes() []scenario.Node {
	return []scenario.Node{
		{Name: "a1", GPUs: 8, Labels: map[string]string{gaZone: "a"}},
		{Name: "b1", GPUs: 8, Labels: map[string]string{gaZone: "b"}},
	}
}

func withClaim(name, claim string) scenario.Gang {
	return scenario.Gang{Name: name, GPUs: 1, Spec: claimPod(storage(), claim).NS("ns").spec}
}

// A Ray head with a zonal volume goes to the volume's zone, not the first node.
func TestBoundVolumeNodeAffinity(t *testing.T) {
	scenario.Run(t, scenario.Scenario{
		Nodes: []scenario.Node{zonedNodes()[1], zonedNodes()[0]},
		Gangs: []scenario.Gang{withClaim("head", "zonal")},
		Expect: scenario.Expect{Binds: []string{"head"}, FitsOn: map[string][]string{"head": {"a1"}},
			Placed: map[string][]string{"head": {"a1"}}},
	})
}

// A WaitForFirstConsumer claim goes where its class's allowedTopologies admit.
func TestWaitForFirstConsumerAllowedTopologies(t *testing.T) {
	scenario.Run(t, scenario.Scenario{
		Nodes:  zonedNodes(),
		Gangs:  []scenario.Gang{withClaim("late", "late")},
		Expect: scenario.Expect{Binds: []string{"late"}, FitsOn: map[string][]string{"late": {"b1"}}},
	})
}

// Missing claims, claims bound elsewhere and unbound Immediate claims wait with a
// volume reason, whatever the nodes.
func TestVolumeRefusals(t *testing.T) {
	scenario.Run(t, scenario.Scenario{
		Nodes: zonedNodes(),
		Gangs: []scenario.Gang{withClaim("missing", "nope"), withClaim("elsewhere", "elsewhere"), withClaim("now", "now")},
		Expect: scenario.Expect{Pending: map[string]scheduler.PendingKind{
			"missing": scheduler.PendingVolume, "elsewhere": scheduler.PendingVolume, "now": scheduler.PendingVolume}},
	})
}

// A node at its CSI attach limit takes no pod with a new volume of that driver.
func TestCSIAttachLimit(t *testing.T) {
	s := storage()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	s.Classes = append(s.Classes, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "any"}, Provisioner: "csi.example.com", VolumeBindingMode: &wffc})
	anyClass := "any"
	for _, name := range []string{"c1", "c2"} {
		s.Claims = append(s.Claims, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &anyClass}})
	}
	nodes := zonedNodes()
	nodes[0].CSILimits = map[string]int{"csi.example.com": 1}
	first := scenario.Gang{Name: "first", On: "a1", GPUs: 1, Spec: claimPod(s, "c1").NS("ns").spec}
	second := scenario.Gang{Name: "second", GPUs: 1, Spec: claimPod(s, "c2").NS("ns").spec}
	scenario.Run(t, scenario.Scenario{
		Nodes: nodes, Gangs: []scenario.Gang{first, second},
		Expect: scenario.Expect{Binds: []string{"second"}, FitsOn: map[string][]string{"second": {"b1"}}},
	})
}

// nsDefault is p's spec in the scenario's default namespace, with the other gangs.
func nsDefault(p *kpod) scenario.Spec {
	s := p.spec
	s.Namespace = ""
	return s
}

// Preferred node affinity and PreferNoSchedule taints rank the nodes that fit, as
// NodeAffinity's and TaintToleration's scores do: packing alone would pick n1.
func TestPreferredNodeAffinityAndSoftTaints(t *testing.T) {
	nodes := hostNodes("n1", "n2")
	nodes[1].Labels["disk"] = "ssd"
	busy := scenario.Gang{Name: "busy", On: "n1", GPUs: 4}
	prefers := mkPod()
	prefers.affinity().NodeAffinity = &corev1.NodeAffinity{PreferredDuringSchedulingIgnoredDuringExecution: []corev1.PreferredSchedulingTerm{{
		Weight: 10, Preference: corev1.NodeSelectorTerm{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "disk", Operator: corev1.NodeSelectorOpIn, Values: []string{"ssd"}}}}}}}
	scenario.Run(t, scenario.Scenario{
		Nodes:  nodes,
		Gangs:  []scenario.Gang{busy, {Name: "ssd", GPUs: 1, Spec: nsDefault(prefers)}},
		Expect: scenario.Expect{Binds: []string{"ssd"}, Placed: map[string][]string{"ssd": {"n2"}}},
	})
	tainted := hostNodes("n1", "n2")
	tainted[0].Taints = []corev1.Taint{{Key: "spot", Effect: corev1.TaintEffectPreferNoSchedule}}
	scenario.Run(t, scenario.Scenario{
		Nodes:  tainted,
		Gangs:  []scenario.Gang{busy, {Name: "plain", GPUs: 1}},
		Expect: scenario.Expect{Binds: []string{"plain"}, Placed: map[string][]string{"plain": {"n2"}}},
	})
}

// A running pod's claim that is not bound yet (an Immediate claim the volume
// controller has not bound) counts against the node's attach limit as one volume of
// its class's provisioner, as NodeVolumeLimits counts it. Found by the
// differential test (test/oracle).
func TestCSIAttachLimitCountsUnboundClaimsOfRunningPods(t *testing.T) {
	s := storage()
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	s.Classes = append(s.Classes, &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "any"}, Provisioner: "csi.example.com", VolumeBindingMode: &wffc})
	anyClass := "any"
	s.Claims = append(s.Claims, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "c2", Namespace: "ns"},
		Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &anyClass}})
	nodes := zonedNodes()
	nodes[0].CSILimits = map[string]int{"csi.example.com": 1}
	first := scenario.Gang{Name: "first", On: "a1", GPUs: 1, Spec: claimPod(s, "now").NS("ns").spec}
	second := scenario.Gang{Name: "second", GPUs: 1, Spec: claimPod(s, "c2").NS("ns").spec}
	scenario.Run(t, scenario.Scenario{
		Nodes: nodes, Gangs: []scenario.Gang{first, second},
		Expect: scenario.Expect{Binds: []string{"second"}, FitsOn: map[string][]string{"second": {"b1"}}},
	})
}

// Two WaitForFirstConsumer claims of one pod cannot both take the one available
// local volume: the pod fits only where there are two, as kube-scheduler's volume
// binder decides. Found by the differential test (test/oracle).
func TestTwoClaimsNeedTwoAvailableVolumes(t *testing.T) {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	local := "local"
	onNode := func(name, node string) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{
			StorageClassName: local, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
			NodeAffinity: &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}},
		}}
	}
	s := &scenario.Storage{
		Classes: []*storagev1.StorageClass{{ObjectMeta: metav1.ObjectMeta{Name: local}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc}},
		Volumes: []*corev1.PersistentVolume{onNode("pv-a", "a1"), onNode("pv-b1", "b1"), onNode("pv-b2", "b1")},
	}
	for _, name := range []string{"d1", "d2"} {
		s.Claims = append(s.Claims, &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns"},
			Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &local, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
				Resources: corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("1Gi")}}}})
	}
	pod := claimPod(s, "d1").Volume(corev1.Volume{Name: "w", VolumeSource: corev1.VolumeSource{
		PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "d2"}}}, s)
	nodes := zonedNodes()
	for i := range nodes {
		nodes[i].Labels["kubernetes.io/hostname"] = nodes[i].Name
	}
	scenario.Run(t, scenario.Scenario{
		Nodes:  nodes,
		Gangs:  []scenario.Gang{{Name: "two", GPUs: 1, Spec: pod.NS("ns").spec}},
		Expect: scenario.Expect{Binds: []string{"two"}, FitsOn: map[string][]string{"two": {"b1"}}},
	})
}
