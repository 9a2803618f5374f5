package oracle

import (
	"fmt"
	"math/rand/v2"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/names"
)

// The vocabulary of the random worlds: few values, so that selectors, domains and
// ports collide often.
const (
	ourScheduler = "gantry-scheduler"
	csiDriver    = "csi.example.com"
	rackKey      = "example.com/rack"
	diskKey      = "example.com/disk"
	taintKey     = "dedicated"
)

var (
	zones      = []string{"z1", "z2", "z3"}
	racks      = []string{"r1", "r2", "r3", "r4"}
	apps       = []string{"web", "db", "cache"}
	namespaces = []string{"ns-a", "ns-b"}
	topoKeys   = []string{corev1.LabelHostname, corev1.LabelTopologyZone, rackKey}
)

// world is one random cluster and the pods to schedule on it, one item (a pod, or
// a gang's members) at a time.
type world struct {
	nodes      []*corev1.Node
	namespaces []*corev1.Namespace
	classes    []*storagev1.StorageClass
	pvs        []*corev1.PersistentVolume
	pvcs       []*corev1.PersistentVolumeClaim
	csiNodes   []*storagev1.CSINode
	running    []*corev1.Pod
	pending    [][]*corev1.Pod
}

type gen struct {
	r     *rand.Rand
	w     *world
	seq   int
	allow map[string]bool // storage classes that exist
}

func (g *gen) chance(p float64) bool  { return g.r.Float64() < p }
func (g *gen) pick(s []string) string { return s[g.r.IntN(len(s))] }
func (g *gen) name(prefix string) string {
	g.seq++
	return fmt.Sprintf("%s-%d", prefix, g.seq)
}

// newWorld draws a cluster: nodes with zones, racks, disks and taints; namespaces;
// storage classes, CSI nodes with attach limits, bound and available volumes;
// running pods (ours and other schedulers'); then the pods and gangs to place.
func newWorld(seed uint64) *world {
	g := &gen{r: rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)), w: &world{}}
	g.w.namespaces = []*corev1.Namespace{
		{ObjectMeta: metav1.ObjectMeta{Name: "ns-a", Labels: map[string]string{"team": "a", "env": "prod"}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "ns-b", Labels: map[string]string{"team": "b", "env": "dev"}}},
	}
	nodes := 3 + g.r.IntN(5)
	for i := range nodes {
		g.node(fmt.Sprintf("node-%d", i))
	}
	g.storage()
	for range g.r.IntN(10) {
		g.running()
	}
	for range 2 + g.r.IntN(5) {
		if g.chance(0.2) {
			g.gang()
		} else {
			g.w.pending = append(g.w.pending, []*corev1.Pod{g.pod(g.pick(namespaces), g.name("p"), true)})
		}
	}
	return g.w
}

func (g *gen) node(name string) {
	labels := map[string]string{corev1.LabelHostname: name}
	if g.chance(0.9) {
		labels[corev1.LabelTopologyZone] = g.pick(zones)
		if g.chance(0.3) {
			labels[corev1.LabelFailureDomainBetaZone] = labels[corev1.LabelTopologyZone]
		}
		if g.chance(0.5) {
			labels[corev1.LabelTopologyRegion] = "region-1"
		}
	}
	if g.chance(0.85) {
		labels[rackKey] = g.pick(racks)
	}
	if g.chance(0.7) {
		labels[diskKey] = g.pick([]string{"ssd", "hdd"})
	}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, UID: types.UID("uid-" + name)}}
	if g.chance(0.25) {
		n.Spec.Taints = []corev1.Taint{{Key: taintKey, Value: g.pick([]string{"infra", "batch"}),
			Effect: []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}[g.r.IntN(3)]}}
	}
	n.Spec.Unschedulable = g.chance(0.05)
	pods := "110"
	if g.chance(0.1) {
		pods = "2"
	}
	n.Status.Allocatable = corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse(g.pick([]string{"2", "4", "8"})), corev1.ResourceMemory: resource.MustParse("16Gi"),
		corev1.ResourcePods: resource.MustParse(pods),
	}
	n.Status.Capacity = n.Status.Allocatable
	g.w.nodes = append(g.w.nodes, n)
	csi := &storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: name}}
	d := storagev1.CSINodeDriver{Name: csiDriver, NodeID: name}
	if _, ok := labels[corev1.LabelTopologyZone]; ok {
		d.TopologyKeys = []string{corev1.LabelTopologyZone}
	}
	if g.chance(0.6) {
		d.Allocatable = &storagev1.VolumeNodeResources{Count: ptr.To(int32(1 + g.r.IntN(3)))}
	}
	csi.Spec.Drivers = []storagev1.CSINodeDriver{d}
	g.w.csiNodes = append(g.w.csiNodes, csi)
}

// storage draws the classes: one that binds at once, a CSI class that waits for the
// first consumer (sometimes limited to zones), and local volumes without a
// provisioner; plus available local volumes pinned to nodes.
func (g *gen) storage() {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	immediate := storagev1.VolumeBindingImmediate
	csi := &storagev1.StorageClass{ObjectMeta: metav1.ObjectMeta{Name: "csi-wffc"}, Provisioner: csiDriver, VolumeBindingMode: &wffc}
	if g.chance(0.5) {
		csi.AllowedTopologies = []corev1.TopologySelectorTerm{{MatchLabelExpressions: []corev1.TopologySelectorLabelRequirement{
			{Key: corev1.LabelTopologyZone, Values: []string{"z1", "z2"}}}}}
	}
	g.w.classes = []*storagev1.StorageClass{
		csi,
		{ObjectMeta: metav1.ObjectMeta{Name: "immediate"}, Provisioner: csiDriver, VolumeBindingMode: &immediate},
		{ObjectMeta: metav1.ObjectMeta{Name: "local"}, Provisioner: "kubernetes.io/no-provisioner", VolumeBindingMode: &wffc},
	}
	for range g.r.IntN(4) {
		node := g.w.nodes[g.r.IntN(len(g.w.nodes))].Name
		pv := g.volume(g.name("pv-local"), "local")
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: hostSelector(node)}
		pv.Spec.Local = &corev1.LocalVolumeSource{Path: "/mnt/disk"}
		pv.Status.Phase = corev1.VolumeAvailable
		g.w.pvs = append(g.w.pvs, pv)
	}
}

func hostSelector(node string) *corev1.NodeSelector {
	return &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}}
}

func (g *gen) volume(name, class string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PersistentVolumeSpec{
			StorageClassName: class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Capacity: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("10Gi")},
		},
	}
}

// claim draws one claim for a pod in ns and returns its name: bound to a volume
// (with node affinity, zone labels, a CSI source), unbound of a waiting class,
// unbound of the immediate class, or missing.
func (g *gen) claim(ns string) string {
	name := g.name("claim")
	pvc := &corev1.PersistentVolumeClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PersistentVolumeClaimSpec{
			AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOnce},
			Resources:   corev1.VolumeResourceRequirements{Requests: corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("5Gi")}},
		},
	}
	switch k := g.r.IntN(10); {
	case k < 5: // bound
		class := g.pick([]string{"csi-wffc", "immediate", "local"})
		pv := g.volume(g.name("pv"), class)
		pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: ns, Name: name, UID: pvc.UID}
		pv.Status.Phase = corev1.VolumeBound
		switch g.r.IntN(4) {
		case 0:
			pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: hostSelector(g.w.nodes[g.r.IntN(len(g.w.nodes))].Name)}
		case 1:
			pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
				{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{g.pick(zones)}}}}}}}
		case 2:
			key := corev1.LabelTopologyZone
			if g.chance(0.3) {
				key = corev1.LabelFailureDomainBetaZone
			}
			value := g.pick(zones)
			if g.chance(0.3) {
				value += "__" + g.pick(zones)
			}
			pv.Labels = map[string]string{key: value}
		}
		if class == "local" {
			pv.Spec.Local = &corev1.LocalVolumeSource{Path: "/mnt/" + pv.Name}
		} else {
			pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: csiDriver, VolumeHandle: "handle-" + pv.Name}
		}
		if g.chance(0.15) {
			mode := corev1.ReadWriteOncePod
			pv.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{mode}
			pvc.Spec.AccessModes = []corev1.PersistentVolumeAccessMode{mode}
		}
		pvc.Spec.StorageClassName = ptr.To(class)
		pvc.Spec.VolumeName = pv.Name
		pvc.Status.Phase = corev1.ClaimBound
		// As the volume controller leaves a claim it bound.
		pvc.Annotations = map[string]string{"pv.kubernetes.io/bind-completed": "yes", "pv.kubernetes.io/bound-by-controller": "yes"}
		g.w.pvs = append(g.w.pvs, pv)
	case k < 8: // waits for its first consumer
		class := g.pick([]string{"csi-wffc", "csi-wffc", "local"})
		pvc.Spec.StorageClassName = ptr.To(class)
		pvc.Status.Phase = corev1.ClaimPending
		switch j := g.r.IntN(10); {
		case j < 2: // a node selected for it already (a placement whose pod was not bound)
			pvc.Annotations = map[string]string{annSelectedNode: g.w.nodes[g.r.IntN(len(g.w.nodes))].Name}
		case j < 4: // an available volume pre-bound to it (its claimRef names the claim)
			g.preBound(pvc, class)
		}
	case k < 9: // binds at once, not yet bound
		pvc.Spec.StorageClassName = ptr.To("immediate")
		pvc.Status.Phase = corev1.ClaimPending
	default: // missing
		return name
	}
	g.w.pvcs = append(g.w.pvcs, pvc)
	return name
}

// annSelectedNode is the claim annotation kube-scheduler's volume binding (and
// Gantry's) writes for a WaitForFirstConsumer claim to be provisioned on a node.
const annSelectedNode = "volume.kubernetes.io/selected-node"

// preBound draws an available volume of the class whose claimRef names pvc (with
// or without its UID), pinned to a node or a zone: kube-scheduler's volume binder
// takes it for the claim where its node affinity admits the node.
func (g *gen) preBound(pvc *corev1.PersistentVolumeClaim, class string) {
	pv := g.volume(g.name("pv-pre"), class)
	pv.Spec.ClaimRef = &corev1.ObjectReference{Kind: "PersistentVolumeClaim", Namespace: pvc.Namespace, Name: pvc.Name}
	if g.chance(0.5) {
		pv.Spec.ClaimRef.UID = pvc.UID
	}
	pv.Status.Phase = corev1.VolumeAvailable
	if g.chance(0.5) {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: hostSelector(g.w.nodes[g.r.IntN(len(g.w.nodes))].Name)}
	} else {
		pv.Spec.NodeAffinity = &corev1.VolumeNodeAffinity{Required: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
			{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{g.pick(zones)}}}}}}}
	}
	if class == "local" {
		pv.Spec.Local = &corev1.LocalVolumeSource{Path: "/mnt/" + pv.Name}
	} else {
		pv.Spec.CSI = &corev1.CSIPersistentVolumeSource{Driver: csiDriver, VolumeHandle: "handle-" + pv.Name}
	}
	g.w.pvs = append(g.w.pvs, pv)
}

// running draws a pod already bound to a node: ours or another scheduler's, with
// labels, host ports, volumes and required anti-affinity that the pods to come
// must respect; sometimes terminating.
func (g *gen) running() {
	p := g.pod(g.pick(namespaces), g.name("run"), false)
	p.Spec.NodeName = g.w.nodes[g.r.IntN(len(g.w.nodes))].Name
	p.Status.Phase = corev1.PodRunning
	if g.chance(0.4) {
		p.Spec.SchedulerName = corev1.DefaultSchedulerName
	}
	if g.chance(0.05) {
		p.DeletionTimestamp = ptr.To(metav1.Unix(1500, 0))
	}
	g.w.running = append(g.w.running, p)
}

// gang draws 2-3 alike members of an ad-hoc gang (gantry.dev/pod-group).
func (g *gen) gang() {
	ns := g.pick(namespaces)
	tmpl := g.pod(ns, g.name("g"), true)
	n := 2 + g.r.IntN(2)
	var members []*corev1.Pod
	for i := range n {
		p := tmpl.DeepCopy()
		p.Name = fmt.Sprintf("%s-m%d", tmpl.Name, i)
		p.UID = types.UID("uid-" + ns + "-" + p.Name)
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[names.AnnotationPodGroup] = tmpl.Name
		// Volumes are the pod's own: members do not share claims.
		p.Spec.Volumes = nil
		g.volumes(p, 0.3)
		members = append(members, p)
	}
	g.w.pending = append(g.w.pending, members)
}

// pod draws a pod of ours, pending, with random constraints (full: all kinds; else
// the ones a running pod shows others).
func (g *gen) pod(ns, name string, full bool) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID("uid-" + ns + "-" + name),
			CreationTimestamp: metav1.Unix(1000, 0), Labels: map[string]string{}},
		Spec: corev1.PodSpec{SchedulerName: ourScheduler, Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse(g.pick([]string{"100m", "250m", "500m", "1"})),
				corev1.ResourceMemory: resource.MustParse(g.pick([]string{"128Mi", "512Mi", "1Gi"})),
			}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	if g.chance(0.9) {
		p.Labels["app"] = g.pick(apps)
	}
	if g.chance(0.5) {
		p.Labels["tier"] = g.pick([]string{"front", "back"})
	}
	if g.chance(0.3) {
		p.Spec.Containers[0].Ports = []corev1.ContainerPort{g.hostPort()}
	}
	if g.chance(0.08) {
		// An init container's ports: a sidecar's (restartPolicy Always) hold the
		// port while the pod runs; a plain init container's count too in kube.
		ic := corev1.Container{Name: "init", Ports: []corev1.ContainerPort{g.hostPort()}}
		if g.chance(0.5) {
			ic.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		}
		p.Spec.InitContainers = []corev1.Container{ic}
	}
	if g.chance(0.3) {
		g.podAntiAffinity(p)
	}
	g.volumes(p, 0.3)
	defer asStored(p)
	if !full {
		return p
	}
	if g.chance(0.2) {
		p.Spec.NodeSelector = map[string]string{}
		if g.chance(0.5) {
			p.Spec.NodeSelector[diskKey] = g.pick([]string{"ssd", "hdd"})
		} else {
			p.Spec.NodeSelector[corev1.LabelTopologyZone] = g.pick(zones)
		}
	}
	if g.chance(0.2) {
		g.nodeAffinity(p)
	}
	if g.chance(0.4) {
		g.tolerations(p)
	}
	if g.chance(0.3) {
		g.podAffinity(p)
	}
	if g.chance(0.2) {
		g.preferred(p)
	}
	if g.chance(0.45) {
		g.spread(p)
	}
	return p
}

func (g *gen) hostPort() corev1.ContainerPort {
	cp := corev1.ContainerPort{ContainerPort: 80, HostPort: []int32{8080, 9090}[g.r.IntN(2)]}
	if g.chance(0.3) {
		cp.Protocol = corev1.ProtocolUDP
	} else {
		cp.Protocol = corev1.ProtocolTCP
	}
	if g.chance(0.1) {
		cp.Protocol = corev1.ProtocolSCTP
	}
	if g.chance(0.3) {
		cp.HostIP = g.pick([]string{"127.0.0.1", "10.0.0.1", "0.0.0.0"})
	}
	return cp
}

func (g *gen) volumes(p *corev1.Pod, chance float64) {
	if g.chance(0.1) {
		// An inline CSI volume: ephemeral, on the node, not attached.
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: "inline",
			VolumeSource: corev1.VolumeSource{CSI: &corev1.CSIVolumeSource{Driver: csiDriver}}})
	}
	if !g.chance(chance) {
		return
	}
	for i := range 1 + g.r.IntN(2) {
		claim := g.claim(p.Namespace)
		p.Spec.Volumes = append(p.Spec.Volumes, corev1.Volume{Name: fmt.Sprintf("v%d", i),
			VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: claim}}})
	}
}

func (g *gen) nodeAffinity(p *corev1.Pod) {
	var req corev1.NodeSelectorRequirement
	switch g.r.IntN(4) {
	case 0:
		req = corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpIn, Values: []string{g.pick(zones), g.pick(zones)}}
	case 1:
		req = corev1.NodeSelectorRequirement{Key: corev1.LabelTopologyZone, Operator: corev1.NodeSelectorOpNotIn, Values: []string{g.pick(zones)}}
	case 2:
		req = corev1.NodeSelectorRequirement{Key: rackKey, Operator: corev1.NodeSelectorOpExists}
	default:
		req = corev1.NodeSelectorRequirement{Key: diskKey, Operator: corev1.NodeSelectorOpDoesNotExist}
	}
	p.Spec.Affinity = affinityOf(p)
	p.Spec.Affinity.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{req}}}}}
}

func affinityOf(p *corev1.Pod) *corev1.Affinity {
	if p.Spec.Affinity == nil {
		return &corev1.Affinity{}
	}
	return p.Spec.Affinity
}

func (g *gen) tolerations(p *corev1.Pod) {
	t := corev1.Toleration{Key: taintKey}
	if g.chance(0.5) {
		t.Operator = corev1.TolerationOpExists
	} else {
		t.Operator, t.Value = corev1.TolerationOpEqual, g.pick([]string{"infra", "batch"})
	}
	if g.chance(0.5) {
		t.Effect = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectNoExecute, corev1.TaintEffectPreferNoSchedule}[g.r.IntN(3)]
		if t.Effect == corev1.TaintEffectNoExecute && g.chance(0.5) {
			t.TolerationSeconds = ptr.To(int64(300))
		}
	}
	p.Spec.Tolerations = append(p.Spec.Tolerations, t)
	if g.chance(0.1) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: corev1.TaintNodeUnschedulable, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule})
	}
}

// term draws a pod affinity term: a selector on app, a topology key, and whose
// namespaces it looks at.
func (g *gen) term(p *corev1.Pod) corev1.PodAffinityTerm {
	t := corev1.PodAffinityTerm{TopologyKey: g.pick(topoKeys), LabelSelector: g.selector()}
	switch g.r.IntN(6) {
	case 0:
		t.Namespaces = []string{g.pick(namespaces)}
	case 1:
		t.NamespaceSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"team": g.pick([]string{"a", "b"})}}
	case 2:
		t.NamespaceSelector = &metav1.LabelSelector{}
	}
	if g.chance(0.1) && p.Labels["tier"] != "" {
		t.MatchLabelKeys = []string{"tier"}
	}
	return t
}

// asStored merges the pod's affinity terms' matchLabelKeys into their selectors,
// keeping the keys, as the API server does when it admits a pod: kube-scheduler's
// InterPodAffinity reads only the selector.
func asStored(p *corev1.Pod) {
	a := p.Spec.Affinity
	if a == nil {
		return
	}
	var terms []*corev1.PodAffinityTerm
	if pa := a.PodAffinity; pa != nil {
		for i := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, &pa.RequiredDuringSchedulingIgnoredDuringExecution[i])
		}
		for i := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, &pa.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm)
		}
	}
	if pa := a.PodAntiAffinity; pa != nil {
		for i := range pa.RequiredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, &pa.RequiredDuringSchedulingIgnoredDuringExecution[i])
		}
		for i := range pa.PreferredDuringSchedulingIgnoredDuringExecution {
			terms = append(terms, &pa.PreferredDuringSchedulingIgnoredDuringExecution[i].PodAffinityTerm)
		}
	}
	for _, t := range terms {
		if t.LabelSelector == nil {
			continue
		}
		for _, k := range t.MatchLabelKeys {
			if v, ok := p.Labels[k]; ok {
				t.LabelSelector.MatchExpressions = append(t.LabelSelector.MatchExpressions,
					metav1.LabelSelectorRequirement{Key: k, Operator: metav1.LabelSelectorOpIn, Values: []string{v}})
			}
		}
	}
}

// selector draws a label selector on app (and tier): mostly one app, sometimes a
// set, a negation, everything ({}) or, rarely, nothing (nil).
func (g *gen) selector() *metav1.LabelSelector {
	switch k := g.r.IntN(20); {
	case k < 9:
		return &metav1.LabelSelector{MatchLabels: map[string]string{"app": g.pick(apps)}}
	case k < 15:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpIn, Values: []string{g.pick(apps), g.pick(apps)}}}}
	case k < 17:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "app", Operator: metav1.LabelSelectorOpNotIn, Values: []string{g.pick(apps)}}}}
	case k < 18:
		return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "tier", Operator: metav1.LabelSelectorOpDoesNotExist}}}
	case k < 19:
		return &metav1.LabelSelector{}
	default:
		return nil
	}
}

func (g *gen) podAffinity(p *corev1.Pod) {
	a := affinityOf(p)
	a.PodAffinity = &corev1.PodAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{g.term(p)}}
	p.Spec.Affinity = a
}

func (g *gen) podAntiAffinity(p *corev1.Pod) {
	a := affinityOf(p)
	t := g.term(p)
	if g.chance(0.5) && p.Labels["app"] != "" {
		// One per domain of its own kind, as Ray worker groups ask.
		t.LabelSelector = &metav1.LabelSelector{MatchLabels: map[string]string{"app": p.Labels["app"]}}
	}
	a.PodAntiAffinity = &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{t}}
	p.Spec.Affinity = a
}

func (g *gen) preferred(p *corev1.Pod) {
	a := affinityOf(p)
	w := corev1.WeightedPodAffinityTerm{Weight: int32(1 + g.r.IntN(100)), PodAffinityTerm: g.term(p)}
	if g.chance(0.5) {
		if a.PodAffinity == nil {
			a.PodAffinity = &corev1.PodAffinity{}
		}
		a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.WeightedPodAffinityTerm{w}
	} else {
		if a.PodAntiAffinity == nil {
			a.PodAntiAffinity = &corev1.PodAntiAffinity{}
		}
		a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = []corev1.WeightedPodAffinityTerm{w}
	}
	p.Spec.Affinity = a
}

func (g *gen) spread(p *corev1.Pod) {
	seen := map[string]bool{}
	for range 1 + g.r.IntN(2) {
		app := p.Labels["app"]
		if app == "" || g.chance(0.2) {
			app = g.pick(apps)
		}
		c := corev1.TopologySpreadConstraint{
			MaxSkew: int32(1 + g.r.IntN(2)), TopologyKey: g.pick(topoKeys), WhenUnsatisfiable: corev1.DoNotSchedule,
			LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": app}},
		}
		if g.chance(0.15) {
			c.LabelSelector = g.selector()
		}
		if g.chance(0.25) {
			c.WhenUnsatisfiable = corev1.ScheduleAnyway
		} else if g.chance(0.3) {
			c.MinDomains = ptr.To(int32(1 + g.r.IntN(4)))
		}
		policies := []corev1.NodeInclusionPolicy{corev1.NodeInclusionPolicyHonor, corev1.NodeInclusionPolicyIgnore}
		if g.chance(0.4) {
			c.NodeAffinityPolicy = ptr.To(policies[g.r.IntN(2)])
		}
		if g.chance(0.4) {
			c.NodeTaintsPolicy = ptr.To(policies[g.r.IntN(2)])
		}
		if g.chance(0.1) && p.Labels["tier"] != "" {
			c.MatchLabelKeys = []string{"tier"}
		}
		// The API server refuses two constraints with the same key and action.
		if k := c.TopologyKey + string(c.WhenUnsatisfiable); seen[k] {
			continue
		} else {
			seen[k] = true
		}
		p.Spec.TopologySpreadConstraints = append(p.Spec.TopologySpreadConstraints, c)
	}
}
