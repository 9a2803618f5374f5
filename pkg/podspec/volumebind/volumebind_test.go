package volumebind

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gantry-dev/gantry/pkg/model"
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
	actions, err := Plan(pod, node)
	if err != nil {
		t.Fatal(err)
	}
	if len(actions) != 2 || actions[0].Volume != "pv-a" || actions[1].Volume != "" || actions[1].Node != "n1" {
		t.Fatalf("actions = %+v", actions)
	}
	if _, err := Plan(pod, &model.Node{Name: "n2", Labels: map[string]string{"zone": "b"}}); err == nil {
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
