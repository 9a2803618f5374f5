package podspec

import (
	"maps"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gantry-dev/gantry/pkg/model"
)

type fakeLookup struct {
	claims  map[string]*corev1.PersistentVolumeClaim
	volumes map[string]*corev1.PersistentVolume
	classes map[string]*storagev1.StorageClass
	keys    map[string][]string
}

func (f *fakeLookup) Claim(ns, name string) *corev1.PersistentVolumeClaim {
	return f.claims[ns+"/"+name]
}
func (f *fakeLookup) Volume(name string) *corev1.PersistentVolume      { return f.volumes[name] }
func (f *fakeLookup) StorageClass(name string) *storagev1.StorageClass { return f.classes[name] }
func (f *fakeLookup) AvailableVolumes(class string) []*corev1.PersistentVolume {
	var out []*corev1.PersistentVolume
	for _, v := range f.volumes {
		if v.Spec.StorageClassName == class {
			out = append(out, v)
		}
	}
	return out
}
func (f *fakeLookup) DriverTopologyKeys(d string) []string { return f.keys[d] }

func pod() *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", UID: "u1", Labels: map[string]string{"app": "a", "rev": "7"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
}

func TestNoConstraintsIsNil(t *testing.T) {
	if c := Constraints(pod(), nil, nil); c != nil {
		t.Fatalf("a plain pod has constraints %+v", c)
	}
}

func TestAffinityTermDefaults(t *testing.T) {
	p := pod()
	p.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
		{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}, TopologyKey: "zone", MatchLabelKeys: []string{"rev"}},
		{TopologyKey: "zone", NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"team": "x"}}},
	}}}
	c := Constraints(p, nil, map[string]map[string]string{"other": {"team": "x"}, "third": {"team": "y"}})
	if len(c.AntiAffinity) != 2 {
		t.Fatalf("anti-affinity terms = %d, want 2", len(c.AntiAffinity))
	}
	own := c.AntiAffinity[0]
	if _, ok := own.Namespaces["ns"]; !ok || len(own.Namespaces) != 1 {
		t.Errorf("term without namespaces looks at %v, want the pod's own", own.Namespaces)
	}
	if own.Selector.Matches(labels.Set{"app": "a", "rev": "6"}) || !own.Selector.Matches(labels.Set{"app": "a", "rev": "7"}) {
		t.Errorf("matchLabelKeys not merged: selector %s", own.Selector)
	}
	nsTerm := c.AntiAffinity[1]
	if _, ok := nsTerm.Namespaces["other"]; !ok || len(nsTerm.Namespaces) != 1 {
		t.Errorf("namespaceSelector resolved to %v, want [other]", nsTerm.Namespaces)
	}
	if nsTerm.Selector.Matches(labels.Set{"app": "a"}) {
		t.Error("a nil labelSelector must select nothing")
	}
}

func TestSpreadDefaults(t *testing.T) {
	p := pod()
	honor := corev1.NodeInclusionPolicyHonor
	p.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{
		{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule, LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}},
		{MaxSkew: 2, TopologyKey: "rack", WhenUnsatisfiable: corev1.ScheduleAnyway, NodeTaintsPolicy: &honor, MinDomains: ptr(int32(3))},
	}
	c := Constraints(p, nil, nil)
	hard, soft := c.Spread[0], c.Spread[1]
	if !hard.Hard || hard.MinDomains != 1 || !hard.HonorNodeAffinity || hard.HonorNodeTaints {
		t.Errorf("DoNotSchedule defaults wrong: %+v", hard)
	}
	if soft.Hard || soft.MinDomains != 3 || !soft.HonorNodeTaints {
		t.Errorf("ScheduleAnyway constraint wrong: %+v", soft)
	}
}

func ptr[T any](v T) *T { return &v }

func TestHostPortsDefaults(t *testing.T) {
	p := pod()
	p.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}, {HostPort: 8080, ContainerPort: 80}}
	got := HostPorts(p)
	if len(got) != 1 || got[0] != (model.HostPort{IP: "0.0.0.0", Protocol: "TCP", Port: 8080}) {
		t.Fatalf("host ports = %+v", got)
	}
}

func TestUnsupportedRequestsAndInlineVolumes(t *testing.T) {
	p := pod()
	p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{"hugepages-2Mi": resource.MustParse("2Mi"), "example.com/fpga": resource.MustParse("1"), corev1.ResourceCPU: resource.MustParse("1")}
	p.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{RBD: &corev1.RBDVolumeSource{}}}}
	c := Constraints(p, nil, nil)
	msg := Refusals(c)
	for _, want := range []string{"example.com/fpga, hugepages-2Mi", "spec.volumes[0].rbd", "remove the request"} {
		if !strings.Contains(msg, want) {
			t.Errorf("refusal %q does not say %q", msg, want)
		}
	}
	for _, r := range c.Refusals {
		if r.Kind != model.RefusalUnsupported {
			t.Errorf("refusal kind %s, want unsupported", r.Kind)
		}
	}
}

func claimVolume(name string) corev1.Volume {
	return corev1.Volume{Name: "v", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: name}}}
}

func TestVolumes(t *testing.T) {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	class := "fast"
	l := &fakeLookup{
		claims: map[string]*corev1.PersistentVolumeClaim{
			"ns/bound":   {ObjectMeta: metav1.ObjectMeta{Name: "bound", Namespace: "ns", UID: "c1"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv1"}},
			"ns/late":    {ObjectMeta: metav1.ObjectMeta{Name: "late", Namespace: "ns"}, Spec: corev1.PersistentVolumeClaimSpec{StorageClassName: &class, AccessModes: []corev1.PersistentVolumeAccessMode{corev1.ReadWriteOncePod}}},
			"ns/p-eph":   {ObjectMeta: metav1.ObjectMeta{Name: "p-eph", Namespace: "ns"}},
			"ns/stolen":  {ObjectMeta: metav1.ObjectMeta{Name: "stolen", Namespace: "ns", UID: "c2"}, Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv2"}},
			"ns/lostone": {ObjectMeta: metav1.ObjectMeta{Name: "lostone", Namespace: "ns"}, Status: corev1.PersistentVolumeClaimStatus{Phase: corev1.ClaimLost}},
		},
		volumes: map[string]*corev1.PersistentVolume{
			"pv1": {ObjectMeta: metav1.ObjectMeta{Name: "pv1", Labels: map[string]string{corev1.LabelTopologyZone: "a__b"}},
				Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: "bound", UID: "c1"},
					PersistentVolumeSource: corev1.PersistentVolumeSource{CSI: &corev1.CSIPersistentVolumeSource{Driver: "d", VolumeHandle: "h1"}}}},
			"pv2": {ObjectMeta: metav1.ObjectMeta{Name: "pv2"}, Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: "other"}}},
		},
		classes: map[string]*storagev1.StorageClass{"fast": {ObjectMeta: metav1.ObjectMeta{Name: "fast"}, Provisioner: "d", VolumeBindingMode: &wffc}},
		keys:    map[string][]string{"d": {"topology.d/zone"}},
	}
	p := pod()
	p.Spec.Volumes = []corev1.Volume{claimVolume("bound"), claimVolume("late"),
		{Name: "eph", VolumeSource: corev1.VolumeSource{Ephemeral: &corev1.EphemeralVolumeSource{}}}}
	c := Constraints(p, l, nil)
	v := c.Volumes
	if len(v.Bound) != 1 || len(v.Bound[0].Zones) != 1 || len(v.Bound[0].Zones[0].Values) != 2 {
		t.Errorf("bound volumes = %+v", v.Bound)
	}
	if len(v.Delayed) != 1 || v.Delayed[0].Provisioner != "d" || v.Delayed[0].DriverTopologyKeys[0] != "topology.d/zone" {
		t.Errorf("delayed claims = %+v", v.Delayed)
	}
	if len(v.Attach) != 2 || len(c.ExclusiveClaims) != 1 || c.ExclusiveClaims[0] != "ns/late" {
		t.Errorf("attach %+v, exclusive %v", v.Attach, c.ExclusiveClaims)
	}
	if msg := Refusals(c); !strings.Contains(msg, "was not created for this pod") {
		t.Errorf("an ephemeral claim not owned by the pod must be refused, got %q", msg)
	}
	for claim, want := range map[string]string{"nope": "not found", "stolen": "bound to another claim", "lostone": "lost its volume"} {
		p := pod()
		p.Spec.Volumes = []corev1.Volume{claimVolume(claim)}
		c := Constraints(p, l, nil)
		if len(c.Refusals) != 1 || c.Refusals[0].Kind != model.RefusalVolume || !strings.Contains(c.Refusals[0].Message, want) {
			t.Errorf("claim %s: refusals %v, want one volume refusal saying %q", claim, c.Refusals, want)
		}
	}
}

// A claim with a volume pre-bound to it (a placement whose pod was not bound, not
// undone) takes that volume only; a claim with a selected node is provisioned,
// not matched to an available volume (kube-scheduler's FindPodVolumes).
func TestPreBoundVolumeAndSelectedNode(t *testing.T) {
	wffc := storagev1.VolumeBindingWaitForFirstConsumer
	class := "fast"
	spec := corev1.PersistentVolumeClaimSpec{StorageClassName: &class}
	pv := func(name string, ref *corev1.ObjectReference) *corev1.PersistentVolume {
		return &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PersistentVolumeSpec{StorageClassName: class, ClaimRef: ref}}
	}
	l := &fakeLookup{
		claims: map[string]*corev1.PersistentVolumeClaim{
			"ns/pre": {ObjectMeta: metav1.ObjectMeta{Name: "pre", Namespace: "ns", UID: "c-pre"}, Spec: spec},
			"ns/sel": {ObjectMeta: metav1.ObjectMeta{Name: "sel", Namespace: "ns", Annotations: map[string]string{AnnotationSelectedNode: "n1"}}, Spec: spec},
		},
		volumes: map[string]*corev1.PersistentVolume{
			"free":   pv("free", nil),
			"taken":  pv("taken", &corev1.ObjectReference{Namespace: "ns", Name: "pre", UID: "c-pre"}),
			"others": pv("others", &corev1.ObjectReference{Namespace: "ns", Name: "someone"}),
		},
		classes: map[string]*storagev1.StorageClass{class: {ObjectMeta: metav1.ObjectMeta{Name: class}, Provisioner: "d", VolumeBindingMode: &wffc}},
	}
	p := pod()
	p.Spec.Volumes = []corev1.Volume{claimVolume("pre"), claimVolume("sel")}
	d := Constraints(p, l, nil).Volumes.Delayed
	if len(d) != 2 {
		t.Fatalf("delayed claims = %+v", d)
	}
	if pre := d[0]; len(pre.Available) != 1 || pre.Available[0].Volume != "taken" || pre.Provisioner != "" {
		t.Errorf("pre-bound claim: available %+v, provisioner %q; want its own volume only", pre.Available, pre.Provisioner)
	}
	if sel := d[1]; sel.SelectedNode != "n1" || len(sel.Available) != 0 || sel.Provisioner != "d" {
		t.Errorf("claim with a selected node: %+v; want provisioned on n1, no available volume", sel)
	}
}

func TestNodeFeatures(t *testing.T) {
	p := pod()
	p.Spec.HostNetwork = true
	p.Spec.HostUsers = ptr(false)
	c := Constraints(p, nil, nil)
	if c == nil || len(c.NodeFeatures) != 1 || c.NodeFeatures[0] != "UserNamespacesHostNetworkSupport" {
		t.Fatalf("node features = %+v, want [UserNamespacesHostNetworkSupport]", c)
	}
}

// A pod slimmed by the informer transform and then given KeepForConstraints
// translates as the whole pod does.
func TestKeepForConstraints(t *testing.T) {
	full := pod()
	full.Spec.Affinity = &corev1.Affinity{PodAntiAffinity: &corev1.PodAntiAffinity{RequiredDuringSchedulingIgnoredDuringExecution: []corev1.PodAffinityTerm{
		{LabelSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"app": "a"}}, TopologyKey: "kubernetes.io/hostname"}}}}
	full.Spec.TopologySpreadConstraints = []corev1.TopologySpreadConstraint{{MaxSkew: 1, TopologyKey: "zone", WhenUnsatisfiable: corev1.DoNotSchedule}}
	full.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80}, {HostPort: 9000, ContainerPort: 9000}}
	full.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "BIG", Value: "x"}}
	full.Spec.HostNetwork, full.Spec.HostUsers = true, ptr(false)
	full.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}}, claimVolume("bound"),
		{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}},
		{Name: "scratch", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}}}
	slim := &corev1.Pod{ObjectMeta: full.ObjectMeta, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	KeepForConstraints(slim, full)
	// The configMap volume keeps its name only (the claim stays spec.volumes[1]); the
	// projected and emptyDir volumes after the claim go.
	if len(slim.Spec.Volumes) != 2 || slim.Spec.Volumes[0].ConfigMap != nil || slim.Spec.Volumes[1].PersistentVolumeClaim == nil || len(slim.Spec.Containers[0].Ports) != 1 || slim.Spec.Containers[0].Env != nil {
		t.Fatalf("slim pod keeps %+v", slim.Spec)
	}
	a, b := Constraints(full, nil, nil), Constraints(slim, nil, nil)
	if len(a.AntiAffinity) != len(b.AntiAffinity) || len(a.Spread) != len(b.Spread) || len(a.HostPorts) != len(b.HostPorts) ||
		len(a.NodeFeatures) != len(b.NodeFeatures) || Refusals(a) != Refusals(b) {
		t.Fatalf("slim pod translates to %+v, whole pod to %+v", b, a)
	}
}

// A pod whose volumes no constraint reads (the API server's kube-api-access volume,
// a configMap) keeps none.
func TestKeepForConstraintsDropsUnreadVolumes(t *testing.T) {
	full := pod()
	full.Spec.Volumes = []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{}}},
		{Name: "kube-api-access-x7k2p", VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{}}}}
	slim := &corev1.Pod{ObjectMeta: full.ObjectMeta, Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c"}}}}
	KeepForConstraints(slim, full)
	if slim.Spec.Volumes != nil {
		t.Fatalf("slim pod keeps volumes %+v, want none", slim.Spec.Volumes)
	}
}

// requestedResources names what the pod's effective requests (the Kubernetes
// helper's sums) hold a non-zero amount of, wherever the request comes from:
// containers, init containers, sidecars, overhead, pod-level resources.
func TestRequestedResourcesAgreeWithTheHelper(t *testing.T) {
	rl := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	ctr := func(r corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: "c", Resources: corev1.ResourceRequirements{Requests: r}}
	}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := ctr(rl("example.com/nic", "1"))
	sidecar.RestartPolicy = &always
	specs := map[string]corev1.PodSpec{
		"containers":     {Containers: []corev1.Container{ctr(rl("cpu", "1", "example.com/fpga", "1")), ctr(rl("hugepages-2Mi", "2Mi", "example.com/zero", "0"))}},
		"init container": {Containers: []corev1.Container{ctr(rl("cpu", "1"))}, InitContainers: []corev1.Container{ctr(rl("example.com/fpga", "2"))}},
		"sidecar":        {Containers: []corev1.Container{ctr(rl("cpu", "1"))}, InitContainers: []corev1.Container{sidecar}},
		"overhead":       {Containers: []corev1.Container{ctr(rl("cpu", "1"))}, Overhead: rl("memory", "120Mi", "example.com/vm", "1")},
		"pod level":      {Containers: []corev1.Container{ctr(rl("cpu", "1"))}, Resources: &corev1.ResourceRequirements{Requests: rl("cpu", "2", "memory", "1Gi")}},
		"none":           {Containers: []corev1.Container{ctr(nil)}},
	}
	for name, spec := range specs {
		pod := &corev1.Pod{Spec: spec}
		got := map[corev1.ResourceName]bool{}
		requestedResources(pod, func(r corev1.ResourceName) { got[r] = true })
		want := map[corev1.ResourceName]bool{}
		for r, q := range resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{}) {
			if !q.IsZero() {
				want[r] = true
			}
		}
		if !maps.Equal(got, want) {
			t.Errorf("%s: requested %v, the helper's non-zero requests %v", name, got, want)
		}
	}
}
