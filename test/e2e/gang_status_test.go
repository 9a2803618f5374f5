package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/testenv"
)

// A RayCluster one GPU too big for the cluster binds nothing, and its pods say why.
func TestRayClusterOneGPUTooBigBindsNothing(t *testing.T) {
	requireEnv(t)
	ns := namespace(t)
	key := testNodeKey(t)
	createNodes(t, gpuNode(ns+"-a", 2, "NVIDIA-A10G", 23028))
	manifest := fmt.Sprintf(`apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: too-big
spec:
  headGroupSpec:
    template:
      spec:
        nodeSelector: {%[1]s: %[2]s}
        tolerations: [{key: %[1]s, operator: Equal, value: %[2]s, effect: NoSchedule}, {key: kwok.x-k8s.io/node, operator: Exists}]
        containers:
        - name: ray-head
          image: rayproject/ray:2.46.0
          resources: {requests: {cpu: "1", memory: 2Gi}}
  workerGroupSpecs:
  - groupName: gpu
    replicas: 3
    minReplicas: 3
    maxReplicas: 3
    template:
      spec:
        nodeSelector: {%[1]s: %[2]s}
        tolerations: [{key: %[1]s, operator: Equal, value: %[2]s, effect: NoSchedule}, {key: kwok.x-k8s.io/node, operator: Exists}]
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0
          resources: {requests: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}, limits: {nvidia.com/gpu: "1"}}
`, testTaintKey, key)
	if _, err := testenv.Apply(context.Background(), env.Config, ns, []byte(manifest)); err != nil {
		t.Fatal(err)
	}
	got := waitPods(t, ns, 60*time.Second, "4 Ray pods explained", func(ps []corev1.Pod) bool {
		if len(ps) != 4 {
			return false
		}
		for _, p := range ps {
			if unschedulableMessage(ps, p.Name) == "" {
				return false
			}
		}
		return true
	})
	msg := unschedulableMessage(got, got[0].Name)
	if !strings.Contains(msg, "4 pods") && !strings.Contains(msg, "3 pods with") && !strings.Contains(msg, "needs 4") {
		t.Errorf("message %q does not say how many pods the gang needs", msg)
	}
	holdPods(t, ns, 2*time.Second, "nothing bound", func(ps []corev1.Pod) bool { return bound(ps) == 0 })
}

// A PodGroup's status says why its gang waits, and turns Running once it is bound.
func TestPodGroupStatusExplains(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 2, "NVIDIA-A10G", 23028))
	pg := `apiVersion: scheduling.gantry.dev/v1alpha1
kind: PodGroup
metadata:
  name: trio
spec:
  minMember: 3
`
	if _, err := testenv.Apply(ctx, env.Config, ns, []byte(pg)); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		createPods(t, newPod(ns, fmt.Sprintf("m%d", i), withGPUs(1), onTestNodes(t), withAnnotations(names.AnnotationPodGroup, "trio")))
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := gvr.PodGroup
	condition := func() (status, reason, message, phase string) {
		u, err := dyn.Resource(gvr).Namespace(ns).Get(ctx, "trio", metav1.GetOptions{})
		if err != nil {
			return
		}
		st, _ := u.Object["status"].(map[string]any)
		phase, _ = st["phase"].(string)
		conds, _ := st["conditions"].([]any)
		for _, c := range conds {
			m := c.(map[string]any)
			if m["type"] == "Scheduled" {
				return m["status"].(string), m["reason"].(string), m["message"].(string), phase
			}
		}
		return
	}
	var status, reason, message, phase string
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		status, reason, message, phase = condition()
		return status == "False" && reason == "Unschedulable" && message != "waiting for the next scheduling cycle", nil
	})
	if err != nil {
		t.Fatalf("PodGroup condition Scheduled=%q reason %q message %q phase %q; want False/Unschedulable with the reason", status, reason, message, phase)
	}
	if !strings.Contains(message, "3") {
		t.Errorf("PodGroup message %q does not say how many pods must fit", message)
	}
	createNodes(t, gpuNode(ns+"-b", 2, "NVIDIA-A10G", 23028))
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		status, reason, message, phase = condition()
		return status == "True" && phase == "Running", nil
	})
	if err != nil {
		t.Fatalf("PodGroup condition Scheduled=%q phase %q after capacity appeared; want True/Running", status, phase)
	}
}
