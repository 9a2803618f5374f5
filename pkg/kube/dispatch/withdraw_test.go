package dispatch

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
)

// A withdrawn nomination is cleared on the pod (status.nominatedNodeName), and a new
// one written over it.
func TestPatchNominatedNodeSetsAndClears(t *testing.T) {
	ctx := context.Background()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "serve"}, Status: corev1.PodStatus{NominatedNodeName: "a"}}
	client := fake.NewSimpleClientset(pod)
	get := func() string {
		t.Helper()
		p, err := client.CoreV1().Pods("ns").Get(ctx, "serve", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return p.Status.NominatedNodeName
	}
	if err := patchNominatedNode(ctx, client, "ns", "serve", ""); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != "" {
		t.Fatalf("nominatedNodeName = %q after the withdrawal, want it cleared", got)
	}
	if err := patchNominatedNode(ctx, client, "ns", "serve", "b"); err != nil {
		t.Fatal(err)
	}
	if got := get(); got != "b" {
		t.Fatalf("nominatedNodeName = %q, want b", got)
	}
}
