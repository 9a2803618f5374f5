package e2e

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/testenv"
)

// teamAWithQuota is the seed's team-a with a finite GPU quota: the one A10G is its
// guarantee, and no more.
const teamAWithQuota = `apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata:
  name: team-a
spec:
  parentQueue: department-1
  resources:
    cpu: {quota: -1, limit: -1, overQuotaWeight: 1}
    gpu: {quota: 1, limit: -1, overQuotaWeight: 1}
    memory: {quota: -1, limit: -1, overQuotaWeight: 1}
`

// The seed scenario with a finite quota, end to end with the real KubeRay operator:
// team-a holds GPU quota 1 on the A10G; training is bound; inference
// (non-preemptible) arrives in the same queue, full of its own training, and takes its
// place: training is evicted whole, inference bound; once inference goes, training
// comes back whole.
func TestSeedScenarioWithFiniteQuota(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	createSharedNodes(t, "", seedNode("seed-quota-a10g"))
	applySeed(t, "", "queues.yaml")
	if _, err := testenv.Apply(ctx, env.Config, "", []byte(teamAWithQuota)); err != nil {
		t.Fatal(err)
	}
	// Other tests use the seed's queues as the seed writes them.
	t.Cleanup(func() { _ = applySeedFile(context.Background(), "", "queues.yaml") })
	applyPriorityClasses(t)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	clusters := gvr.RayCluster
	services := gvr.RayService
	t.Cleanup(func() {
		_ = dyn.Resource(services).Namespace(ns).Delete(context.Background(), "ray-kai-scheduler-serve-llm", metav1.DeleteOptions{})
		_ = dyn.Resource(clusters).Namespace(ns).Delete(context.Background(), "raycluster-sample", metav1.DeleteOptions{})
	})

	applySeed(t, ns, "raycluster-train.yaml")
	waitPods(t, ns, 60*time.Second, "training head and worker bound", func(ps []corev1.Pod) bool {
		return bound(rayPods(ps, "raycluster-sample")) == 2
	})

	applySeed(t, ns, "rayservice-inference.yaml")
	waitPods(t, ns, 90*time.Second, "inference bound in team-a, training evicted whole", func(ps []corev1.Pod) bool {
		inference := rayPods(ps, "ray-kai-scheduler-serve-llm")
		return len(inference) == 2 && bound(inference) == 2 && bound(rayPods(ps, "raycluster-sample")) == 0
	})
	waitEvents(t, ns, "reason=Preempted", 60*time.Second, "Preempted Events on the training head and worker", func(es []corev1.Event) bool {
		evicted := map[string]bool{}
		for _, e := range es {
			evicted[e.InvolvedObject.Name] = true
		}
		return len(evicted) >= 2
	})

	if err := dyn.Resource(services).Namespace(ns).Delete(ctx, "ray-kai-scheduler-serve-llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, ns, 90*time.Second, "training bound again, whole", func(ps []corev1.Pod) bool {
		return bound(rayPods(ps, "raycluster-sample")) == 2 && len(rayPods(ps, "ray-kai-scheduler-serve-llm")) == 0
	})
}
