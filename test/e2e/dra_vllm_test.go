package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/testenv"
)

// vllmShareService is a RayService of priority class inference whose one worker
// claims a 20Gi share of a GPU through the template share-20gi, and whose vLLM engine
// takes 75% of the GPU (gpu_memory_utilization 0.75), on the test's nodes.
func vllmShareService(ns, name, nodeKey, template string) string {
	podExtras := fmt.Sprintf(`
          tolerations:
          - {key: %q, operator: Equal, value: %q, effect: NoSchedule}
          nodeSelector: {%q: %q}`, testTaintKey, nodeKey, testTaintKey, nodeKey)
	return fmt.Sprintf(`apiVersion: ray.io/v1
kind: RayService
metadata:
  name: %[1]s
  namespace: %[2]s
  labels: {priorityClassName: inference}
spec:
  serveConfigV2: |
    applications:
    - name: llms
      import_path: ray.serve.llm:build_openai_app
      args:
        llm_configs:
        - model_loading_config: {model_id: qwen2.5-7b-instruct}
          engine_kwargs: {gpu_memory_utilization: 0.75}
  rayClusterConfig:
    rayVersion: "2.46.0"
    headGroupSpec:
      rayStartParams: {num-gpus: "0"}
      template:
        spec:%[3]s
          containers:
          - name: ray-head
            image: rayproject/ray:2.46.0
            resources: {requests: {cpu: "1", memory: 4Gi}}
    workerGroupSpecs:
    - groupName: gpu
      replicas: 1
      minReplicas: 1
      maxReplicas: 1
      rayStartParams: {num-gpus: "1"}
      template:
        spec:%[3]s
          resourceClaims:
          - {name: gpu, resourceClaimTemplateName: %[4]s}
          containers:
          - name: ray-worker
            image: rayproject/ray:2.46.0
            resources:
              requests: {cpu: "1", memory: 4Gi}
              claims: [{name: gpu}]
`, name, ns, podExtras, template)
}

// A vLLM RayService whose worker claims a 20Gi DRA share with gpu_memory_utilization
// 0.75 on an 80 GiB GPU is booked for the 60 GiB its engine needs free, also once the
// informer has brought the claim's allocation back (which records the claim's own
// 20Gi), and its worker is warned once that the two contradict (issue 19). The probe:
// a 30Gi share asked for afterwards must not fit on the GPU's remaining 20 GiB. Both
// ways a claim is allocated: by pkg/placement's choice (a plain request), and by the
// structured allocator (a request with a CEL selector).
func TestDRAShareWithVLLMKeepsItsBooking(t *testing.T) {
	requireEnv(t)
	for _, selector := range []bool{false, true} {
		name := "placement"
		if selector {
			name = "structured"
		}
		t.Run(name, func(t *testing.T) { draShareWithVLLM(t, selector) })
	}
}

func draShareWithVLLM(t *testing.T, selector bool) {
	ctx := context.Background()
	ns := namespace(t)
	ensureDeviceClass(t)
	applyPriorityClasses(t)
	node := gpuNode(ns+"-a", 0, "", 0)
	createNodes(t, node)
	publishGPUs(t, node.Name, 1, "NVIDIA H100 80GB HBM3", 80<<30)
	for _, tpl := range []struct{ name, memory string }{{"share-20gi", "20Gi"}, {"share-30gi", "30Gi"}} {
		ct := claimTemplate(ns, tpl.name, tpl.memory)
		if selector {
			ct.Spec.Spec.Devices.Requests[0].Exactly.Selectors = []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: `device.attributes["gpu.gantry.dev"].productName.startsWith("NVIDIA H100")`},
			}}
		}
		if _, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, ct, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := testenv.Apply(ctx, env.Config, ns, []byte(vllmShareService(ns, "llm", testNodeKey(t), "share-20gi"))); err != nil {
		t.Fatalf("apply RayService: %v", err)
	}
	isWorker := func(p corev1.Pod) bool { return p.Labels["ray.io/node-type"] == "worker" }
	got := waitPods(t, ns, 120*time.Second, "the service's head and worker running, the worker's claim allocated", func(ps []corev1.Pod) bool {
		workers := 0
		for _, p := range ps {
			if isWorker(p) && p.Status.Phase == corev1.PodRunning {
				workers++
			}
		}
		return workers == 1 && running(ps) == 2 && len(allocatedClaims(t, ns)) == 1
	})
	var worker corev1.Pod
	for _, p := range got {
		if isWorker(p) {
			worker = p
		}
	}
	if a := worker.Annotations[names.AnnotationGPUs]; a != "0:"+fmt.Sprint(60<<30) {
		t.Errorf("worker's %s = %q, want GPU 0 booked for 60 GiB", names.AnnotationGPUs, a)
	}

	// The probe comes after the allocation is in the API, so after its echo.
	createPods(t, newPod(ns, "probe", withClaimTemplate("share-30gi"), onTestNodes(t)))
	isProbe := func(ps []corev1.Pod) []corev1.Pod {
		for _, p := range ps {
			if p.Name == "probe" {
				return []corev1.Pod{p}
			}
		}
		return nil
	}
	waitPods(t, ns, 60*time.Second, "the 30Gi probe explained as not fitting", func(ps []corev1.Pod) bool {
		return unschedulableMessage(isProbe(ps), "probe") != ""
	})
	holdPods(t, ns, 5*time.Second, "the 30Gi probe left pending (20 GiB of the GPU left)", func(ps []corev1.Pod) bool {
		return bound(isProbe(ps)) == 0
	})

	// One warning on the worker, however many cycles it went through.
	var warnings []string
	err := waitUntil(30*time.Second, func() bool {
		evs, err := env.Client.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=" + worker.Name})
		if err != nil {
			return false
		}
		warnings = warnings[:0]
		for _, e := range evs.Items {
			if e.Reason == names.EventGPUShareConflict && e.Type == corev1.EventTypeWarning {
				n := max(e.Count, 1) // an events.k8s.io Event counts its repeats in its series
				if e.Series != nil {
					n = max(n, e.Series.Count)
				}
				warnings = append(warnings, fmt.Sprintf("%s (x%d)", e.Message, n))
			}
		}
		return len(warnings) > 0
	})
	if err != nil {
		t.Fatalf("no %s warning on %s: %v", names.EventGPUShareConflict, worker.Name, err)
	}
	if len(warnings) != 1 || !strings.HasSuffix(warnings[0], "(x1)") || !strings.Contains(warnings[0], "gpu_memory_utilization 0.75") {
		t.Errorf("warnings on %s: %v, want one, once, naming gpu_memory_utilization 0.75", worker.Name, warnings)
	}
}

// waitUntil polls cond every 200 ms until it holds or timeout passes.
func waitUntil(timeout time.Duration, cond func() bool) error {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			return fmt.Errorf("not so after %s", timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
	return nil
}
