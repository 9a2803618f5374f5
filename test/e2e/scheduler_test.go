package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/testenv"
)

func requireEnv(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
}

// Pods asking for whole GPUs are bound, never more GPUs on a node than it has, and
// kwok runs them.
func TestWholeGPUPodsBindAndRun(t *testing.T) {
	requireEnv(t)
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 4, "NVIDIA-A10G", 23028), gpuNode(ns+"-b", 4, "NVIDIA-A10G", 23028))
	var pods []*corev1.Pod
	for i := 0; i < 7; i++ {
		pods = append(pods, newPod(ns, fmt.Sprintf("p%d", i), withGPUs(1), onTestNodes(t)))
	}
	createPods(t, pods...)
	got := waitPods(t, ns, 30*time.Second, "7 pods running", func(ps []corev1.Pod) bool { return running(ps) == 7 })
	perNode := map[string]int{}
	gpusSeen := map[string]bool{}
	for _, p := range got {
		perNode[p.Spec.NodeName]++
		key := p.Spec.NodeName + "/" + p.Annotations[names.AnnotationGPUs]
		if gpusSeen[key] {
			t.Errorf("two pods hold GPU %s", key)
		}
		gpusSeen[key] = true
	}
	for node, n := range perNode {
		if n > 4 {
			t.Errorf("node %s got %d one-GPU pods, has 4 GPUs", node, n)
		}
	}
	// An eighth fits, a ninth does not and says why.
	createPods(t, newPod(ns, "p7", withGPUs(1), onTestNodes(t)), newPod(ns, "p8", withGPUs(1), onTestNodes(t)))
	got = waitPods(t, ns, 30*time.Second, "8 bound and the 9th explained", func(ps []corev1.Pod) bool {
		return bound(ps) == 8 && unschedulableMessage(ps, podLeftOut(ps)) != ""
	})
	if msg := unschedulableMessage(got, podLeftOut(got)); !strings.Contains(msg, "GPU") {
		t.Errorf("pending pod's message %q does not say it is the GPUs that are short", msg)
	}
}

func podLeftOut(ps []corev1.Pod) string {
	for _, p := range ps {
		if p.Spec.NodeName == "" {
			return p.Name
		}
	}
	return ""
}

// A gang that fits only as a whole and does not fit binds nothing, says why, and
// binds wholly once capacity appears.
func TestGangBindsWhollyOrNotAtAll(t *testing.T) {
	requireEnv(t)
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 4, "NVIDIA-H100-80GB-HBM3", 81559), gpuNode(ns+"-b", 4, "NVIDIA-H100-80GB-HBM3", 81559))
	var pods []*corev1.Pod
	for i := 0; i < 3; i++ {
		pods = append(pods, newPod(ns, fmt.Sprintf("w%d", i), withGPUs(4), onTestNodes(t),
			withAnnotations(names.AnnotationPodGroup, "train", names.AnnotationMinMember, "3")))
	}
	createPods(t, pods...)
	got := waitPods(t, ns, 20*time.Second, "gang explained", func(ps []corev1.Pod) bool {
		return unschedulableMessage(ps, "w0") != ""
	})
	if msg := unschedulableMessage(got, "w0"); !strings.Contains(msg, "3") {
		t.Errorf("gang message %q does not say how many pods must fit", msg)
	}
	// gantry explain tells the same story from the command line.
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	// The Event is recorded a moment after the condition: ask again until it is there.
	wants := []string{"why it waits:", "charged to queue default: no queue label", "Gang podgroup:" + ns + "/train", "must start together: 3", "FailedScheduling"}
	var out []byte
	var missing []string
	for deadline := time.Now().Add(20 * time.Second); ; {
		out, err = exec.Command(filepath.Join(bin, "gantry"), "explain", "w0", "-n", ns, "--kubeconfig", env.Kubeconfig).CombinedOutput()
		if err != nil {
			t.Fatalf("gantry explain: %v\n%s", err, out)
		}
		missing = missing[:0]
		for _, want := range wants {
			if !strings.Contains(string(out), want) {
				missing = append(missing, want)
			}
		}
		if len(missing) == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(200 * time.Millisecond)
	}
	if len(missing) > 0 {
		t.Errorf("gantry explain output lacks %q:\n%s", missing, out)
	}
	holdPods(t, ns, 2*time.Second, "no member bound", func(ps []corev1.Pod) bool { return bound(ps) == 0 })
	createNodes(t, gpuNode(ns+"-c", 4, "NVIDIA-H100-80GB-HBM3", 81559))
	waitPods(t, ns, 30*time.Second, "whole gang bound", func(ps []corev1.Pod) bool { return bound(ps) == 3 })
}

// Pods of other schedulers count: their GPUs are not given out again.
func TestOtherSchedulersPodsCount(t *testing.T) {
	requireEnv(t)
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 2, "NVIDIA-A10G", 23028))
	foreign := newPod(ns, "foreign", withGPUs(2), onTestNodes(t), withScheduler("default-scheduler"))
	foreign.Spec.NodeName = ns + "-a"
	createPods(t, foreign)
	createPods(t, newPod(ns, "ours", withGPUs(1), onTestNodes(t)))
	got := waitPods(t, ns, 20*time.Second, "ours explained", func(ps []corev1.Pod) bool {
		return unschedulableMessage(ps, "ours") != ""
	})
	for _, p := range got {
		if p.Name == "ours" && p.Spec.NodeName != "" {
			t.Fatalf("our pod was bound to %s, whose GPUs another scheduler's pod holds", p.Spec.NodeName)
		}
	}
	if err := env.Client.CoreV1().Pods(ns).Delete(context.Background(), "foreign", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, ns, 30*time.Second, "ours bound once the GPUs are free", func(ps []corev1.Pod) bool {
		for _, p := range ps {
			if p.Name == "ours" && p.Spec.NodeName != "" {
				return true
			}
		}
		return false
	})
}

// Bad input on a pod is refused at admission with a message that says what to change;
// what the webhook cannot see (an annotation edited after creation, a pod bigger than
// any node) gets a condition that says it; and nothing crashes.
func TestBadGPUDemandsAreExplained(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 8, "NVIDIA-H100-80GB-HBM3", 81559))
	refused := newPod(ns, "refused", onTestNodes(t), withAnnotations(names.AnnotationGPUFraction, "1.5"))
	_, err := env.Client.CoreV1().Pods(ns).Create(ctx, refused, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), names.AnnotationGPUFraction) {
		t.Fatalf("creating a pod with gpu-fraction 1.5: got %v, want a refusal naming %s", err, names.AnnotationGPUFraction)
	}
	// Held by a gate so that it is not bound before its annotation is edited.
	edited := newPod(ns, "fraction", onTestNodes(t), withAnnotations(names.AnnotationGPUFraction, "0.5"))
	edited.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/hold"}}
	createPods(t,
		edited,
		newPod(ns, "too-many", withGPUs(16), onTestNodes(t)),
		newPod(ns, "fine", withGPUs(1), onTestNodes(t)),
	)
	// The scheduler writes the pod's status meanwhile: retry on conflict.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		p, err := env.Client.CoreV1().Pods(ns).Get(ctx, "fraction", metav1.GetOptions{})
		if err != nil {
			return err
		}
		p.Annotations[names.AnnotationGPUFraction] = "1.5"
		p.Spec.SchedulingGates = nil
		_, err = env.Client.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	got := waitPods(t, ns, 20*time.Second, "bad pods explained, good pod bound", func(ps []corev1.Pod) bool {
		// The gate's message comes first; wait for the one about the annotation.
		return strings.Contains(unschedulableMessage(ps, "fraction"), names.AnnotationGPUFraction) &&
			unschedulableMessage(ps, "too-many") != "" && bound(ps) == 1
	})
	if msg := unschedulableMessage(got, "fraction"); !strings.Contains(msg, names.AnnotationGPUFraction) {
		t.Errorf("fraction message %q does not name the annotation to fix", msg)
	}
	if msg := unschedulableMessage(got, "too-many"); !strings.Contains(msg, "16") {
		t.Errorf("too-many message %q does not say what was asked", msg)
	}
}

// A gang with a member held by a scheduling gate (Kueue's, say) binds nothing and
// says what it waits for; once the gate is removed, the whole gang binds. (The API
// server refuses to bind a gated pod, so binding the others would only be rolled
// back.)
func TestSchedulingGatesHoldTheGang(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 2, "NVIDIA-H100-80GB-HBM3", 81559))
	gang := withAnnotations(names.AnnotationPodGroup, "g", names.AnnotationMinMember, "2")
	gated := func(p *corev1.Pod) {
		p.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: "example.com/admission"}}
	}
	createPods(t,
		newPod(ns, "free", withGPUs(1), onTestNodes(t), gang),
		newPod(ns, "held", withGPUs(1), onTestNodes(t), gang, gated),
	)
	waitPods(t, ns, 60*time.Second, "gang told it waits for the gate", func(ps []corev1.Pod) bool {
		return strings.Contains(unschedulableMessage(ps, "free"), "example.com/admission")
	})
	holdPods(t, ns, 2*time.Second, "nothing bound", func(ps []corev1.Pod) bool { return bound(ps) == 0 })
	patch := []byte(`{"spec":{"schedulingGates":null}}`)
	if _, err := env.Client.CoreV1().Pods(ns).Patch(ctx, "held", types.StrategicMergePatchType, patch, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, ns, 30*time.Second, "whole gang bound", func(ps []corev1.Pod) bool { return bound(ps) == 2 })
}
