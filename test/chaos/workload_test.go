package chaos

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/testenv"
)

// holdFinalizer keeps an evicted pod terminating (holding its GPUs) until the round
// lets it go, so that faults can land while victims are still leaving.
const holdFinalizer = "example.com/chaos-hold"

var rayClusterGVR = gvr.RayCluster

type podSpec struct {
	name, group, queue, class string
	gangSize, gpus            int
	fraction                  string
	hold                      bool
}

func newPod(ns string, s podSpec) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: s.name, Labels: map[string]string{}, Annotations: map[string]string{}},
		Spec: corev1.PodSpec{
			SchedulerName:     "gantry-scheduler",
			PriorityClassName: s.class,
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("500m"), corev1.ResourceMemory: resource.MustParse("1Gi")},
			}}},
			Tolerations:                   []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
			TerminationGracePeriodSeconds: new(int64),
		},
	}
	if s.group != "" {
		p.Annotations[names.AnnotationPodGroup] = s.group
		p.Annotations[names.AnnotationMinMember] = fmt.Sprint(s.gangSize)
	}
	if s.queue != "" {
		p.Labels[names.LabelQueue] = s.queue
	}
	if s.gpus > 0 {
		q := *resource.NewQuantity(int64(s.gpus), resource.DecimalSI)
		p.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = q
		p.Spec.Containers[0].Resources.Limits = corev1.ResourceList{"nvidia.com/gpu": q}
	}
	if s.fraction != "" {
		p.Annotations[names.AnnotationGPUFraction] = s.fraction
	}
	if s.hold {
		p.Finalizers = []string{holdFinalizer}
	}
	return p
}

// createGang creates size pods of gpus GPUs each, all members of one gang.
func createGang(ctx context.Context, ns, group, queue, class string, size, gpus int, hold bool) error {
	for i := 0; i < size; i++ {
		p := newPod(ns, podSpec{name: fmt.Sprintf("%s-%d", group, i), group: group, queue: queue, class: class, gangSize: size, gpus: gpus, hold: hold})
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s/%s: %w", ns, p.Name, err)
		}
	}
	return nil
}

// createMixedWork creates gangs and shared pods that together fit the cluster's 16
// GPUs (at most 13): so that a settled round has every gang whole.
func createMixedWork(ctx context.Context, rng *rand.Rand, ns string) error {
	if err := createGang(ctx, ns, "team", "chaos-team", "train", 2+rng.IntN(3), 1, false); err != nil {
		return err
	}
	if err := createGang(ctx, ns, "single", "", "train", 2+rng.IntN(2), 1, false); err != nil {
		return err
	}
	if err := createGang(ctx, ns, "double", "", "build", 2, 2, false); err != nil {
		return err
	}
	for i := 0; i < 2; i++ {
		p := newPod(ns, podSpec{name: fmt.Sprintf("share-%d", i), class: "build", gpus: 1, fraction: "0.5"})
		// A share asks for its fraction only, not a whole nvidia.com/gpu.
		delete(p.Spec.Containers[0].Resources.Requests, "nvidia.com/gpu")
		p.Spec.Containers[0].Resources.Limits = nil
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	return nil
}

// rayCluster is a RayCluster of a CPU head and workers of one GPU each, scheduled
// through KubeRay's kai-scheduler integration.
func rayCluster(name string, workers int, class string) string {
	return fmt.Sprintf(`
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: %s
  labels:
    kai.scheduler/queue: default
    priorityClassName: %s
spec:
  headGroupSpec:
    template:
      spec:
        tolerations: [{key: kwok.x-k8s.io/node, operator: Exists}]
        containers:
        - name: ray-head
          image: rayproject/ray:2.46.0
          resources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
  workerGroupSpecs:
  - groupName: worker
    replicas: %d
    minReplicas: %d
    maxReplicas: %d
    template:
      spec:
        tolerations: [{key: kwok.x-k8s.io/node, operator: Exists}]
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0
          resources: {requests: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}, limits: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}}
`, name, class, workers, workers, workers)
}

func createRayCluster(ctx context.Context, ns, name string, workers int, class string) error {
	_, err := testenv.Apply(ctx, env.Config, ns, []byte(rayCluster(name, workers, class)))
	return err
}

func listPods(ctx context.Context, ns string) ([]corev1.Pod, error) {
	l, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// waitPods polls until cond holds on the namespace's pods.
func waitPods(ctx context.Context, ns string, timeout time.Duration, cond func([]corev1.Pod) bool) ([]corev1.Pod, error) {
	var last []corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ps, err := listPods(ctx, ns)
		if err != nil {
			return false, nil
		}
		last = ps
		return cond(ps), nil
	})
	return last, err
}

// allBound reports that at least want live pods exist and all live pods are bound.
func allBound(want int) func([]corev1.Pod) bool {
	return func(ps []corev1.Pod) bool {
		n := 0
		for _, p := range ps {
			if p.DeletionTimestamp != nil {
				continue
			}
			if p.Spec.NodeName == "" {
				return false
			}
			n++
		}
		return n >= want
	}
}

func describe(ps []corev1.Pod) string {
	var b strings.Builder
	for _, p := range ps {
		reason := ""
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
				reason = c.Reason + ": " + c.Message
			}
		}
		fmt.Fprintf(&b, "\n  %s node=%q phase=%s deleting=%v %s", p.Name, p.Spec.NodeName, p.Status.Phase, p.DeletionTimestamp != nil, reason)
	}
	return b.String()
}

// release drops the hold finalizer from every pod of the namespace.
func release(ctx context.Context, ns string) {
	ps, _ := listPods(ctx, ns)
	patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"finalizers": nil}})
	for _, p := range ps {
		if len(p.Finalizers) > 0 {
			_, _ = env.Client.CoreV1().Pods(ns).Patch(ctx, p.Name, types.MergePatchType, patch, metav1.PatchOptions{})
		}
	}
}

// cleanNamespace deletes the round's RayClusters and pods and waits until no pod of
// the namespace is left and none of its ResourceClaims is allocated, so the next round
// starts on empty GPUs.
func cleanNamespace(ctx context.Context, ns string) error {
	if dyn, err := dynamic.NewForConfig(env.Config); err == nil {
		_ = dyn.Resource(rayClusterGVR).Namespace(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{})
	}
	release(ctx, ns)
	zero := int64(0)
	_ = env.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
	_, err := waitPods(ctx, ns, 90*time.Second, func(ps []corev1.Pod) bool {
		if len(ps) > 0 {
			release(ctx, ns)
			_ = env.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: &zero}, metav1.ListOptions{})
		}
		return len(ps) == 0
	})
	if err != nil {
		return fmt.Errorf("namespace %s not emptied: %w", ns, err)
	}
	if err := waitClaimsReleased(ctx, ns); err != nil {
		return err
	}
	return env.Client.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{})
}
