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
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/invariant"
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
	invariant.Watch(t, invariant.Config{RestConfig: env.Config, Rules: invariant.Rules{SchedulerNames: []string{"gantry-scheduler", "kai-scheduler"}, Namespaces: []string{ns}}})
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
	training := func(es []corev1.Event) []corev1.Event {
		var out []corev1.Event
		for _, e := range es {
			if strings.HasPrefix(e.InvolvedObject.Name, "raycluster-sample") {
				out = append(out, e)
			}
		}
		return out
	}
	events := waitEvents(t, ns, "reason=Preempted", 60*time.Second, "Preempted Events on the training head and worker", func(es []corev1.Event) bool {
		return len(training(es)) >= 2
	})
	evicted := training(events)
	for _, e := range evicted {
		if !strings.Contains(e.Message, "ray-kai-scheduler-serve-llm") {
			t.Errorf("preemption event %q does not name the preemptor", e.Message)
		}
	}
	if len(evicted) != 2 {
		t.Errorf("%d Preempted events on training pods, want 2 (head and worker)", len(evicted))
	}
	_ = got

	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	rs := gvr.RayService
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

// examples/gpu-model-selector end to end, with the real KubeRay operator and
// kube-controller-manager: the RayCluster's workers claim H100s through a template
// with a CEL selector; head and workers start together, both workers on the H100
// node although an L4 node is free, their claims allocated there.
func TestRayClusterWithSelectorClaims(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ensureDeviceClass(t)
	// The example's pods carry no toleration: these nodes are open to any pod.
	h100, l4 := gpuNode("ray-sel-h100", 0, "", 0), gpuNode("ray-sel-l4", 0, "", 0)
	createSharedNodes(t, "", h100, l4)
	publishGPUs(t, h100.Name, 2, "NVIDIA H100 80GB HBM3", 80<<30)
	publishGPUs(t, l4.Name, 2, "NVIDIA L4", 24<<30)
	// The example expects the chart's queue "default", unlimited as KAI's default
	// queue is. Pods with no queue label are charged to it from now on, in every test.
	defaultQueue := "apiVersion: scheduling.gantry.dev/v1alpha1\nkind: Queue\nmetadata:\n  name: default\nspec:\n  resources:\n    gpu:\n      quota: -1\n      limit: -1\n"
	if _, err := testenv.Apply(ctx, env.Config, "", []byte(defaultQueue)); err != nil {
		t.Fatal(err)
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"resourceclaimtemplate.yaml", "raycluster.yaml"} {
		if _, err := testenv.ApplyFile(ctx, env.Config, ns, filepath.Join(root, "examples", "gpu-model-selector", f)); err != nil {
			t.Fatalf("apply %s: %v", f, err)
		}
	}
	got := waitPods(t, ns, 90*time.Second, "head and both H100 workers bound", func(ps []corev1.Pod) bool {
		return len(rayPods(ps, "h100-only")) == 3 && bound(rayPods(ps, "h100-only")) == 3
	})
	for _, p := range rayPods(got, "h100-only") {
		if p.Labels["ray.io/node-type"] == "worker" && p.Spec.NodeName != h100.Name {
			t.Errorf("worker %s bound to %s, want the H100 node", p.Name, p.Spec.NodeName)
		}
	}
	claims := allocatedClaims(t, ns)
	if len(claims) != 2 {
		t.Fatalf("%d claims allocated, want one per worker", len(claims))
	}
	for _, c := range claims {
		if r := c.Status.Allocation.Devices.Results[0]; r.Pool != h100.Name {
			t.Errorf("claim %s allocated %s/%s, want a GPU of %s", c.Name, r.Pool, r.Device, h100.Name)
		}
	}
}
