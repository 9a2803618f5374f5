package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/pkg/kube"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/invariant"
)

// runScheduler runs a scheduler of its own for one test, serving only name.
func runScheduler(t *testing.T, name string) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		done <- kube.Run(ctx, kube.Options{RestConfig: env.Config, SchedulerNames: []string{name}, Ready: func() { close(ready) }})
	}()
	select {
	case <-ready:
	case err := <-done:
		cancel()
		t.Fatalf("scheduler %s: %v", name, err)
	case <-time.After(60 * time.Second):
		cancel()
		t.Fatalf("scheduler %s not ready", name)
	}
	return func() {
		cancel()
		<-done
	}
}

// A scheduler restarted in the middle of a preemption, while its victims are still
// terminating, evicts nobody twice, binds nothing onto the victims' GPU before it
// is free, and then binds the preemptor's whole gang.
func TestRestartDuringPreemption(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	const sched = "restart-scheduler"
	invariant.Watch(t, invariant.Config{RestConfig: env.Config, Rules: invariant.Rules{SchedulerNames: []string{sched}, Namespaces: []string{ns}}})
	applyPriorityClasses(t)
	createNodes(t, gpuNode(ns+"-a", 1, "NVIDIA-A10G", 23028))
	first := runScheduler(t, sched)
	stopped := false
	defer func() {
		if !stopped {
			first()
		}
	}()

	hold := func(p *corev1.Pod) { p.Finalizers = []string{"example.com/test-hold"} }
	gangOf := func(group string, n int) podOpt {
		return withAnnotations(names.AnnotationPodGroup, group, names.AnnotationMinMember, fmt.Sprint(n))
	}
	class := func(c string) podOpt { return func(p *corev1.Pod) { p.Spec.PriorityClassName = c } }
	createPods(t,
		newPod(ns, "train-head", withScheduler(sched), onTestNodes(t), gangOf("train", 2), class("train"), hold),
		newPod(ns, "train-worker", withScheduler(sched), onTestNodes(t), gangOf("train", 2), class("train"), hold, withGPUs(1)),
	)
	waitPods(t, ns, 30*time.Second, "training gang bound", func(ps []corev1.Pod) bool { return bound(ps) == 2 })

	createPods(t,
		newPod(ns, "serve-head", withScheduler(sched), onTestNodes(t), gangOf("serve", 2), class("inference")),
		newPod(ns, "serve-worker", withScheduler(sched), onTestNodes(t), gangOf("serve", 2), class("inference"), withGPUs(1)),
	)
	// The victims are being evicted, but their finalizer keeps them terminating.
	waitPods(t, ns, 30*time.Second, "training pods evicted", func(ps []corev1.Pod) bool {
		n := 0
		for _, p := range ps {
			if p.DeletionTimestamp != nil {
				n++
			}
		}
		return n == 2
	})
	first()
	stopped = true
	second := runScheduler(t, sched)
	defer second()

	// While the victims hold the GPU, the restarted scheduler binds nothing and evicts
	// nothing more.
	holdPods(t, ns, 3*time.Second, "serve gang waits, unbound, for its victims", func(ps []corev1.Pod) bool {
		for _, p := range ps {
			if (p.Name == "serve-head" || p.Name == "serve-worker") && p.Spec.NodeName != "" {
				return false
			}
		}
		return true
	})
	for _, name := range []string{"train-head", "train-worker"} {
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": nil}})
		if _, err := env.Client.CoreV1().Pods(ns).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitPods(t, ns, 30*time.Second, "serve gang bound whole", func(ps []corev1.Pod) bool {
		n := 0
		for _, p := range ps {
			if (p.Name == "serve-head" || p.Name == "serve-worker") && p.Spec.NodeName != "" {
				n++
			}
		}
		return n == 2
	})
	events, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "reason=Preempted"})
	if err != nil {
		t.Fatal(err)
	}
	perPod := map[string]int{}
	for _, e := range events.Items {
		n := max(e.Count, 1)
		if e.Series != nil {
			n = max(n, e.Series.Count)
		}
		perPod[e.InvolvedObject.Name] += int(n)
	}
	// The evictor evicts first and then writes the Preempted Event, so a restart
	// between the two can lose the Event (Events are best effort); what must never
	// happen is a second eviction for the same preemption.
	for _, name := range []string{"train-head", "train-worker"} {
		if perPod[name] > 1 {
			t.Errorf("%s preempted %d times, want at most once", name, perPod[name])
		}
	}
}
