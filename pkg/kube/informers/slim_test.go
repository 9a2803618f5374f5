package informers

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pod transform slims a pod as the API server serves it, and keeps a pod it has
// slimmed already as it is: the watch-list's first sync runs it twice on every pod,
// and a second copy of every pod is what the sync must not hold.
func TestPodTransformSlimsOnce(t *testing.T) {
	one := resource.MustParse("1")
	never := corev1.PreemptNever
	api := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}}},
		Spec: corev1.PodSpec{RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, PreemptionPolicy: &never,
			Containers: []corev1.Container{{Name: "c", Image: "img", Env: []corev1.EnvVar{{Name: "A", Value: "b"}},
				Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"cpu": one}, Limits: corev1.ResourceList{"cpu": one}}}}},
	}
	first, err := slimPodOnce(api)
	if err != nil {
		t.Fatal(err)
	}
	slim := first.(*corev1.Pod)
	if slim == api || slim.ManagedFields != nil || slim.Spec.Containers[0].Image != "" || slim.Spec.Containers[0].Resources.Limits != nil {
		t.Fatalf("the API's pod was not slimmed: %+v", slim)
	}
	if slim.Spec.Containers[0].Resources.Requests.Cpu().Cmp(one) != 0 {
		t.Fatalf("the slim pod lost its requests: %+v", slim.Spec.Containers[0].Resources)
	}
	if pp := slim.Spec.PreemptionPolicy; pp == nil || *pp != never {
		t.Fatalf("the slim pod lost its preemptionPolicy (kube-scheduler's DefaultPreemption reads it): %v", pp)
	}
	again, err := slimPodOnce(slim)
	if err != nil {
		t.Fatal(err)
	}
	if again.(*corev1.Pod) != slim {
		t.Error("a slim pod was copied again: the first sync holds every pod twice")
	}
}
