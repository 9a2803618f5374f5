package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/test/testenv"
)

// seedNode is the seed's machine: one NVIDIA A10G (24 GB), untainted so that the
// seed's manifests run unchanged.
func seedNode(name string) *corev1.Node {
	n := gpuNode(name, 1, "NVIDIA-A10G", 23028)
	n.Status.Capacity[corev1.ResourceCPU] = resource.MustParse("8")
	n.Status.Capacity[corev1.ResourceMemory] = resource.MustParse("64Gi")
	n.Status.Allocatable = n.Status.Capacity
	return n
}

// applySeed applies the seed's manifests as examples/seed holds them: unchanged but
// for the Queue apiVersion.
func applySeed(t *testing.T, ns string, files ...string) {
	t.Helper()
	for _, f := range files {
		if err := applySeedFile(context.Background(), ns, f); err != nil {
			t.Fatal(err)
		}
	}
}

func applySeedFile(ctx context.Context, ns, file string) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	if _, err := testenv.ApplyFile(ctx, env.Config, ns, filepath.Join(root, "examples", "seed", file)); err != nil {
		return fmt.Errorf("apply %s: %w", file, err)
	}
	return nil
}

func rayPods(ps []corev1.Pod, cluster string) []corev1.Pod {
	var out []corev1.Pod
	for _, p := range ps {
		if strings.HasPrefix(p.Labels["ray.io/cluster"], cluster) && p.DeletionTimestamp == nil {
			out = append(out, p)
		}
	}
	return out
}

// The seed scenario, end to end with the real KubeRay operator: the training
// RayCluster is bound as one gang; the vLLM RayService preempts all of it and is
// bound; deleting the RayService brings the training cluster back whole.
func TestSeedScenario(t *testing.T) {
	requireEnv(t)
	ns := namespace(t)
	createSharedNodes(t, "", seedNode("seed-a10g"))
	applySeed(t, "", "queues.yaml")
	applyPriorityClasses(t)

	applySeed(t, ns, "raycluster-train.yaml")
	got := waitPods(t, ns, 60*time.Second, "training head and worker bound", func(ps []corev1.Pod) bool {
		return bound(rayPods(ps, "raycluster-sample")) == 2
	})
	for _, p := range rayPods(got, "raycluster-sample") {
		if p.Spec.SchedulerName != "kai-scheduler" {
			t.Errorf("pod %s has schedulerName %q; KubeRay with batchScheduler=kai-scheduler stamps kai-scheduler", p.Name, p.Spec.SchedulerName)
		}
	}

	applySeed(t, ns, "rayservice-inference.yaml")
	got = waitPods(t, ns, 90*time.Second, "inference bound, training preempted", func(ps []corev1.Pod) bool {
		inference := rayPods(ps, "ray-kai-scheduler-serve-llm")
		return len(inference) == 2 && bound(inference) == 2 && bound(rayPods(ps, "raycluster-sample")) == 0
	})
	evicted := 0
	events, err := env.Client.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "reason=Preempted"})
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range events.Items {
		if strings.HasPrefix(e.InvolvedObject.Name, "raycluster-sample") {
			evicted++
			if !strings.Contains(e.Message, "ray-kai-scheduler-serve-llm") {
				t.Errorf("preemption event %q does not name the preemptor", e.Message)
			}
		}
	}
	if evicted != 2 {
		t.Errorf("%d Preempted events on training pods, want 2 (head and worker)", evicted)
	}
	_ = got

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	rs := schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayservices"}
	if err := dyn.Resource(rs).Namespace(ns).Delete(context.Background(), "ray-kai-scheduler-serve-llm", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, ns, 90*time.Second, "training bound again, whole", func(ps []corev1.Pod) bool {
		return bound(rayPods(ps, "raycluster-sample")) == 2 && len(rayPods(ps, "ray-kai-scheduler-serve-llm")) == 0
	})
}

func applyPriorityClasses(t *testing.T) {
	t.Helper()
	if err := applyManifest(context.Background(), "priorityclasses.yaml"); err != nil {
		t.Fatal(err)
	}
}

// applyManifest applies one of deploy/manifests.
func applyManifest(ctx context.Context, file string) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	_, err = testenv.ApplyFile(ctx, env.Config, "", filepath.Join(root, "deploy", "manifests", file))
	return err
}
