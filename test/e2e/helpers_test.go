package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/testenv"
)

// gpuNode is a kwok node with count GPUs of one product (GFD labels, no node agent).
func gpuNode(name string, gpus int, product string, memMiB int) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
	}
	if gpus > 0 {
		capacity["nvidia.com/gpu"] = *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	}
	labels := map[string]string{testenv.KwokNodeLabel: testenv.KwokNodeLabelValue, "kubernetes.io/hostname": name}
	if product != "" {
		labels["nvidia.com/gpu.product"] = product
		labels["nvidia.com/gpu.memory"] = fmt.Sprint(memMiB)
		labels["nvidia.com/gpu.present"] = "true"
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status:     corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}

// testTaintKey keeps each test's pods on that test's nodes: nodes carry the taint,
// the test's pods tolerate it (onTestNodes), and pods of other tests do not.
const testTaintKey = "example.com/test"

// createNodes creates nodes for this test only: tainted and labelled with the test's
// name (see onTestNodes), and deleted when the test ends.
func createNodes(t *testing.T, nodes ...*corev1.Node) {
	t.Helper()
	createSharedNodes(t, testNodeKey(t), nodes...)
}

func testNodeKey(t *testing.T) string {
	return strings.ToLower(strings.NewReplacer("/", "-", "_", "-").Replace(t.Name()))
}

// onTestNodes makes a pod tolerate and select the current test's nodes.
func onTestNodes(t *testing.T) podOpt {
	key := testNodeKey(t)
	return func(p *corev1.Pod) {
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: testTaintKey, Operator: corev1.TolerationOpEqual, Value: key, Effect: corev1.TaintEffectNoSchedule})
		if p.Spec.NodeSelector == nil {
			p.Spec.NodeSelector = map[string]string{}
		}
		p.Spec.NodeSelector[testTaintKey] = key
	}
}

// createSharedNodes creates nodes; with key "" they are untainted and any pod may use
// them (the Ray seed tests, whose manifests stay unchanged).
func createSharedNodes(t *testing.T, key string, nodes ...*corev1.Node) {
	t.Helper()
	ctx := context.Background()
	for _, n := range nodes {
		if key != "" {
			n.Labels[testTaintKey] = key
			n.Spec.Taints = append(n.Spec.Taints, corev1.Taint{Key: testTaintKey, Value: key, Effect: corev1.TaintEffectNoSchedule})
		}
		if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create node %s: %v", n.Name, err)
		}
	}
	t.Cleanup(func() {
		for _, n := range nodes {
			_ = env.Client.CoreV1().Nodes().Delete(context.Background(), n.Name, metav1.DeleteOptions{})
		}
	})
}

// namespace makes a fresh namespace for one test.
func namespace(t *testing.T) string {
	t.Helper()
	name := testNodeKey(t)
	if len(name) > 50 {
		name = name[:50]
	}
	if err := env.CreateNamespace(context.Background(), name); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { emptyNamespace(name) })
	return name
}

// emptyNamespace deletes what a test left running in its namespace: Ray objects first
// (else KubeRay re-creates their pods), then the pods, at once. Tests run one after
// another on shared untainted nodes (the seed's), and a Ray cluster left behind took
// the next test's GPU once its own node was gone (TestSeedScenarioWithFiniteQuota
// failed so in .ci/run).
func emptyNamespace(ns string) {
	ctx := context.Background()
	if dyn, err := dynamic.NewForConfig(env.Config); err == nil {
		for _, r := range []schema.GroupVersionResource{gvr.RayService, gvr.RayJob, gvr.RayCluster} {
			_ = dyn.Resource(r).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
		}
	}
	zero := int64(0)
	_ = env.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
}

type podOpt func(*corev1.Pod)

func withGPUs(n int) podOpt {
	return func(p *corev1.Pod) {
		q := *resource.NewQuantity(int64(n), resource.DecimalSI)
		c := &p.Spec.Containers[0]
		c.Resources.Requests["nvidia.com/gpu"] = q
		c.Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": q}
	}
}

func withAnnotations(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Annotations[kv[i]] = kv[i+1]
		}
	}
}

func withLabels(kv ...string) podOpt {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		for i := 0; i+1 < len(kv); i += 2 {
			p.Labels[kv[i]] = kv[i+1]
		}
	}
}

func withScheduler(name string) podOpt { return func(p *corev1.Pod) { p.Spec.SchedulerName = name } }

func newPod(ns, name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: corev1.PodSpec{
			SchedulerName: "gantry-scheduler",
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			}}},
			Tolerations: []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
		},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func createPods(t *testing.T, pods ...*corev1.Pod) {
	t.Helper()
	for _, p := range pods {
		if _, err := env.Client.CoreV1().Pods(p.Namespace).Create(context.Background(), p, metav1.CreateOptions{}); err != nil {
			t.Fatalf("create pod %s/%s: %v", p.Namespace, p.Name, err)
		}
	}
}

// waitPods polls the namespace's pods until cond holds for the list, or fails.
func waitPods(t *testing.T, ns string, timeout time.Duration, what string, cond func([]corev1.Pod) bool) []corev1.Pod {
	t.Helper()
	var last []corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		last = list.Items
		return cond(last), nil
	})
	if err != nil {
		t.Fatalf("%s: not reached in %s; pods:\n%s", what, timeout, describe(last))
	}
	return last
}

// waitEvents polls the namespace's core/v1 Events matching selector until cond holds.
// The scheduler writes its Events asynchronously (the events.k8s.io broadcaster, one
// write per Event at the Event client's rate), so they may land after the pods'
// state a test waited for.
func waitEvents(t *testing.T, ns, selector string, timeout time.Duration, what string, cond func([]corev1.Event) bool) []corev1.Event {
	t.Helper()
	var last []corev1.Event
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		list, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: selector})
		if err != nil {
			return false, nil
		}
		last = list.Items
		return cond(last), nil
	})
	if err != nil {
		var seen []string
		for _, e := range last {
			seen = append(seen, e.InvolvedObject.Name+": "+e.Reason+": "+e.Message)
		}
		t.Fatalf("%s: not reached in %s; Events (%s):\n%s", what, timeout, selector, strings.Join(seen, "\n"))
	}
	return last
}

// holdPods checks that cond holds on every poll for the whole duration.
func holdPods(t *testing.T, ns string, d time.Duration, what string, cond func([]corev1.Pod) bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		list, err := env.Client.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
		if err == nil && !cond(list.Items) {
			t.Fatalf("%s broken; pods:\n%s", what, describe(list.Items))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func describe(pods []corev1.Pod) string {
	var b strings.Builder
	for _, p := range pods {
		msg := ""
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				msg = c.Message
			}
		}
		fmt.Fprintf(&b, "  %s node=%q phase=%s %s\n", p.Name, p.Spec.NodeName, p.Status.Phase, msg)
	}
	return b.String()
}

func bound(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			n++
		}
	}
	return n
}

func running(pods []corev1.Pod) int {
	n := 0
	for _, p := range pods {
		if p.Status.Phase == corev1.PodRunning {
			n++
		}
	}
	return n
}

// unschedulableMessage returns the PodScheduled=False message of the named pod.
func unschedulableMessage(pods []corev1.Pod, name string) string {
	for _, p := range pods {
		if p.Name != name {
			continue
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				return c.Message
			}
		}
	}
	return ""
}
