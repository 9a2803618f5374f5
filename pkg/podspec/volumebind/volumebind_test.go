package volumebind

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/podspec"
)

func TestPlanAndApply(t *testing.T) {
	zoneA := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
		{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}}}}}
	pod := &model.Pod{ID: "ns/p", Constraints: &model.Constraints{Volumes: &model.VolumeNeeds{Delayed: []model.DelayedClaim{
		{Claim: "static", Available: []model.BoundVolume{{Volume: "pv-a", NodeAffinity: zoneA}}},
		{Claim: "dynamic", Provisioner: "csi.example.com"},
	}}}}
	node := &model.Node{Name: "n1", Labels: map[string]string{"zone": "a"}}
	actions, err := Plan(pod, placement.Placement{Node: "n1"}, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 2 || actions[0].Volume != "pv-a" || actions[1].Volume != "" || actions[1].Node != "n1" {
		t.Fatalf("actions = %+v", actions)
	}
	if _, err := Plan(pod, placement.Placement{Node: "n2"}, &model.Node{Name: "n2", Labels: map[string]string{"zone": "b"}}); err == nil {
		t.Fatal("the static claim (no provisioner) has no volume in zone b: Plan must fail")
	}

	client := fake.NewSimpleClientset(
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "static", Namespace: "ns", UID: "u-static"}},
		&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "dynamic", Namespace: "ns"}},
		&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}},
	)
	ctx := context.Background()
	if err := Apply(ctx, client, actions); err != nil {
		t.Fatal(err)
	}
	pv, _ := client.CoreV1().PersistentVolumes().Get(ctx, "pv-a", metav1.GetOptions{})
	if pv.Spec.ClaimRef == nil || pv.Spec.ClaimRef.Name != "static" || pv.Spec.ClaimRef.UID != "u-static" {
		t.Errorf("pv-a claimRef = %+v", pv.Spec.ClaimRef)
	}
	claim, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "dynamic", metav1.GetOptions{})
	if claim.Annotations[podspec.AnnotationSelectedNode] != "n1" {
		t.Errorf("dynamic claim annotations = %v", claim.Annotations)
	}
}

// The core's choice of volumes (Placement.Volumes) is what Plan writes, not a
// choice of its own.
func TestPlanKeepsTheCoresVolumes(t *testing.T) {
	pod := &model.Pod{ID: "ns/p", Constraints: &model.Constraints{Volumes: &model.VolumeNeeds{Delayed: []model.DelayedClaim{
		{Claim: "c", Available: []model.BoundVolume{{Volume: "pv-1"}, {Volume: "pv-2"}}},
	}}}}
	actions, err := Plan(pod, placement.Placement{Node: "n1", Volumes: []string{"pv-2"}}, &model.Node{Name: "n1"})
	if err != nil || len(actions) != 1 || actions[0].Volume != "pv-2" {
		t.Fatalf("actions = %+v, %v; want pv-2, the core's choice", actions, err)
	}
}

// Undo takes back the selected node and the pre-bound volume of a pod that was not
// bound, and leaves what a controller already acted on.
func TestUndo(t *testing.T) {
	ctx := context.Background()
	prov := VolumeAction{Namespace: "ns", Claim: "dynamic", Node: "n1"}
	static := VolumeAction{Namespace: "ns", Claim: "static", Volume: "pv-a", Node: "n1"}
	fresh := func() *fake.Clientset {
		return fake.NewSimpleClientset(
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "static", Namespace: "ns", UID: "u-static"}},
			&corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Name: "dynamic", Namespace: "ns", Annotations: map[string]string{"keep": "me"}}},
			&corev1.PersistentVolume{ObjectMeta: metav1.ObjectMeta{Name: "pv-a"}, Status: corev1.PersistentVolumeStatus{Phase: corev1.VolumeAvailable}},
		)
	}
	state := func(client *fake.Clientset) (string, *corev1.ObjectReference) {
		claim, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "dynamic", metav1.GetOptions{})
		pv, _ := client.CoreV1().PersistentVolumes().Get(ctx, "pv-a", metav1.GetOptions{})
		return claim.Annotations[podspec.AnnotationSelectedNode], pv.Spec.ClaimRef
	}

	client := fresh()
	if err := Apply(ctx, client, []VolumeAction{prov, static}); err != nil {
		t.Fatal(err)
	}
	if node, ref := state(client); node != "n1" || ref == nil {
		t.Fatalf("after Apply: selected node %q, claimRef %v", node, ref)
	}
	if err := Undo(ctx, client, []VolumeAction{prov, static}); err != nil {
		t.Fatal(err)
	}
	if node, ref := state(client); node != "" || ref != nil {
		t.Fatalf("after Undo: selected node %q, claimRef %v; want both gone", node, ref)
	}
	claim, _ := client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "dynamic", metav1.GetOptions{})
	if claim.Annotations["keep"] != "me" {
		t.Errorf("Undo removed another annotation: %v", claim.Annotations)
	}

	// Acted on already: the volume was provisioned and bound (claim bound), the PV
	// controller bound the pre-bound volume (phase Bound). Undo leaves both.
	client = fresh()
	if err := Apply(ctx, client, []VolumeAction{prov, static}); err != nil {
		t.Fatal(err)
	}
	claim, _ = client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, "dynamic", metav1.GetOptions{})
	claim.Spec.VolumeName = "pvc-123"
	client.CoreV1().PersistentVolumeClaims("ns").Update(ctx, claim, metav1.UpdateOptions{})
	pv, _ := client.CoreV1().PersistentVolumes().Get(ctx, "pv-a", metav1.GetOptions{})
	pv.Status.Phase = corev1.VolumeBound
	client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{})
	if err := Undo(ctx, client, []VolumeAction{prov, static}); err != nil {
		t.Fatal(err)
	}
	if node, ref := state(client); node != "n1" || ref == nil {
		t.Fatalf("Undo took back what a controller acted on: selected node %q, claimRef %v", node, ref)
	}

	// Never applied: nothing to undo, no error.
	client = fresh()
	if err := Undo(ctx, client, []VolumeAction{prov, static}); err != nil {
		t.Fatal(err)
	}
}
