package cache

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/model"
)

// claims is a podspec.Lookup holding claims only (and the volumes they name).
type claims struct {
	pvcs map[string]*corev1.PersistentVolumeClaim
	pvs  map[string]*corev1.PersistentVolume
}

func (l claims) Claim(ns, name string) *corev1.PersistentVolumeClaim { return l.pvcs[ns+"/"+name] }
func (l claims) Volume(name string) *corev1.PersistentVolume         { return l.pvs[name] }
func (claims) StorageClass(string) *storagev1.StorageClass           { return nil }
func (claims) AvailableVolumes(string) []*corev1.PersistentVolume    { return nil }
func (claims) DriverTopologyKeys(string) []string                    { return nil }

// A pending pod is translated again when its claim appears: the refusal that named
// the missing claim goes, and the bound volume's node affinity takes its place.
// Labels and constraints reach the snapshot's pod; CSINode limits its node.
func TestConstraintsAreTranslatedAgainWhenTheirObjectsChange(t *testing.T) {
	c, _ := gpuCluster(t, 1, "n1")
	l := claims{pvcs: map[string]*corev1.PersistentVolumeClaim{}, pvs: map[string]*corev1.PersistentVolume{}}
	c.SetVolumeLookup(l)
	pod := gpuPod("p", 0, 0, "")
	pod.Labels = map[string]string{"app": "x"}
	pod.Spec.Volumes = []corev1.Volume{{Name: "d", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "data"}}}}
	c.UpsertPod(pod)
	p := podOf(c, "ns/p")
	if p.Labels["app"] != "x" || p.Constraints == nil || len(p.Constraints.Refusals) != 1 || p.Constraints.Refusals[0].Kind != model.RefusalVolume {
		t.Fatalf("pod with a missing claim: labels %v, constraints %+v", p.Labels, p.Constraints)
	}
	l.pvs["pv"] = &corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv"},
		Spec: corev1.PersistentVolumeSpec{ClaimRef: &corev1.ObjectReference{Namespace: "ns", Name: "data"}}}
	l.pvcs["ns/data"] = &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "data"},
		Spec: corev1.PersistentVolumeClaimSpec{VolumeName: "pv"}}
	c.VolumesChanged("other")
	if p := podOf(c, "ns/p"); len(p.Constraints.Refusals) != 1 {
		t.Fatalf("a claim event of another namespace translated the pod again: %+v", p.Constraints)
	}
	c.VolumesChanged("ns")
	p = podOf(c, "ns/p")
	if p.Constraints == nil || len(p.Constraints.Refusals) != 0 || p.Constraints.Volumes == nil || len(p.Constraints.Volumes.Bound) != 1 {
		t.Fatalf("pod whose claim appeared: constraints %+v", p.Constraints)
	}

	c.UpsertCSINode(&storagev1.CSINode{ObjectMeta: metav1.ObjectMeta{Name: "n1"}, Spec: storagev1.CSINodeSpec{Drivers: []storagev1.CSINodeDriver{
		{Name: "csi.example.com", Allocatable: &storagev1.VolumeNodeResources{Count: ptr.To[int32](3)}}}}})
	c.UpsertNamespace(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "ns", Labels: map[string]string{"team": "a"}}})
	c.View(func(s *model.Snapshot) {
		if got := s.Node("n1").CSIAttachLimits["csi.example.com"]; got != 3 {
			t.Errorf("node's CSI attach limit = %d, want 3", got)
		}
		if s.NamespaceLabels["ns"]["team"] != "a" {
			t.Errorf("snapshot namespace labels = %v", s.NamespaceLabels)
		}
	})
}
