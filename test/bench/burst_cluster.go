package bench

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/testenv"
)

// The burst benchmark's cluster: kwok nodes shaped like 8-GPU H100 machines, their
// GPUs published as ResourceSlices of gpu.gantry.dev (as the node agent would, so
// that shares can be placed by device), kwok with a termination grace period, and
// the RayClusters and RayServices of the workload.

//go:embed kwok-graceful-delete.yaml
var gracefulDeleteStage string

// h100Memory is an H100 80GB's memory.
var h100Memory = resource.MustParse("80Gi")

// overlayBinDir returns a folder that holds links to every tool of binDir, with
// kwok-stages.yaml replaced by the stock stages whose pod-delete Stage waits grace
// before deleting. testenv reads its tools from $GANTRY_BIN_DIR, so pointing it here
// gives kwok a grace period without changing the shared harness.
func overlayBinDir(binDir, dir string, grace time.Duration) (string, error) {
	overlay := filepath.Join(dir, "bin")
	if err := os.MkdirAll(overlay, 0o755); err != nil {
		return "", err
	}
	entries, err := os.ReadDir(binDir)
	if err != nil {
		return "", err
	}
	abs, err := filepath.Abs(binDir)
	if err != nil {
		return "", err
	}
	for _, e := range entries {
		if e.Name() == "kwok-stages.yaml" {
			continue
		}
		link := filepath.Join(overlay, e.Name())
		_ = os.Remove(link)
		if err := os.Symlink(filepath.Join(abs, e.Name()), link); err != nil {
			return "", err
		}
	}
	stock, err := os.ReadFile(filepath.Join(binDir, "kwok-stages.yaml"))
	if err != nil {
		return "", fmt.Errorf("%w: run `make tools`", err)
	}
	stages, err := withGracefulDelete(string(stock), grace)
	if err != nil {
		return "", err
	}
	if err := os.WriteFile(filepath.Join(overlay, "kwok-stages.yaml"), []byte(stages), 0o644); err != nil {
		return "", err
	}
	return overlay, nil
}

// withGracefulDelete replaces the pod-delete Stage of a multi-document stages file.
func withGracefulDelete(stock string, grace time.Duration) (string, error) {
	var docs []string
	replaced := false
	for _, doc := range strings.Split(stock, "\n---") {
		if strings.Contains(doc, "name: pod-delete\n") {
			replaced = true
			continue
		}
		if strings.TrimSpace(doc) != "" && strings.TrimSpace(doc) != "---" {
			docs = append(docs, strings.TrimPrefix(doc, "---"))
		}
	}
	if !replaced {
		return "", fmt.Errorf("kwok-stages.yaml has no pod-delete Stage to replace")
	}
	docs = append(docs, strings.ReplaceAll(gracefulDeleteStage, "GRACE_MS", strconv.FormatInt(grace.Milliseconds(), 10)))
	return strings.Join(docs, "\n---\n") + "\n", nil
}

func burstNodeName(i int) string { return fmt.Sprintf("h100-%d", i) }

// burstNode is a kwok node with 8 H100s as GPU Feature Discovery labels them.
func burstNode(i, gpus int) *corev1.Node {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("192"),
		corev1.ResourceMemory: resource.MustParse("2048Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		GPUResource:           *resource.NewQuantity(int64(gpus), resource.DecimalSI),
	}
	name := burstNodeName(i)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				testenv.KwokNodeLabel:    testenv.KwokNodeLabelValue,
				"kubernetes.io/hostname": name,
				"nvidia.com/gpu.present": "true",
				"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3",
				"nvidia.com/gpu.memory":  "81920",
				"nvidia.com/gpu.count":   strconv.Itoa(gpus),
			},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc},
	}
}

func createBurstNodes(ctx context.Context, client kubernetes.Interface, nodes, gpus int) error {
	untaint := []byte(`{"spec":{"taints":null}}`)
	for i := 0; i < nodes; i++ {
		n, err := client.CoreV1().Nodes().Create(ctx, burstNode(i, gpus), metav1.CreateOptions{})
		if err != nil {
			return fmt.Errorf("create node %d: %w", i, err)
		}
		// The admission plugin's not-ready taint, which kube-controller-manager would
		// lift once kwok reports the node Ready.
		if len(n.Spec.Taints) > 0 {
			if _, err := client.CoreV1().Nodes().Patch(ctx, n.Name, types.MergePatchType, untaint, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("remove taints of node %s: %w", n.Name, err)
			}
		}
		if _, err := client.ResourceV1().ResourceSlices().Create(ctx, resourceSlice(i, gpus, burstNodeName(i)), metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ResourceSlice of node %d: %w", i, err)
		}
	}
	return nil
}

var (
	rayClusterGVR = gvr.RayCluster
	rayServiceGVR = gvr.RayService
)

// rayPodTemplate is a Ray container with the given requests, and the termination
// grace period kwok honours.
func rayPodTemplate(container string, cpu string, gpus int, annotations map[string]any, grace time.Duration) map[string]any {
	requests := map[string]any{"cpu": cpu, "memory": "4Gi"}
	if gpus > 0 {
		requests[string(GPUResource)] = strconv.Itoa(gpus)
	}
	t := map[string]any{
		"spec": map[string]any{
			"terminationGracePeriodSeconds": int64(grace.Seconds()),
			"containers": []any{map[string]any{
				"name": container, "image": "rayproject/ray:2.46.0",
				"resources": map[string]any{"requests": requests, "limits": requests},
			}},
		},
	}
	if annotations != nil {
		t["metadata"] = map[string]any{"annotations": annotations}
	}
	return t
}

// trainingCluster is a RayCluster of priority class train: a CPU head and workers
// one-GPU workers, minWorkers of them its gang's minimum.
func trainingCluster(name string, workers, minWorkers int, grace time.Duration) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayCluster",
		"metadata": map[string]any{"name": name, "namespace": Namespace, "labels": map[string]any{"priorityClassName": "train"}},
		"spec": map[string]any{
			"headGroupSpec": map[string]any{"template": rayPodTemplate("ray-head", "1", 0, nil, grace)},
			"workerGroupSpecs": []any{map[string]any{
				"groupName": "gpu", "replicas": int64(workers), "minReplicas": int64(minWorkers), "maxReplicas": int64(workers),
				"template": rayPodTemplate("ray-worker", "1", 1, nil, grace),
			}},
		},
	}}
}

// serveConfig is a Ray Serve LLM application whose vLLM engine takes
// gpu_memory_utilization of its GPU.
func serveConfig(utilization float64) string {
	return fmt.Sprintf(`applications:
- name: llms
  import_path: ray.serve.llm:build_openai_app
  route_prefix: "/"
  args:
    llm_configs:
    - model_loading_config:
        model_id: qwen2.5-7b-instruct
      engine_kwargs:
        gpu_memory_utilization: %g
`, utilization)
}

// inferenceService is a vLLM RayService of priority class inference: a CPU head and
// one worker with a whole GPU, or, when share is set, that much memory of one GPU
// (gantry.dev/gpu-memory).
func inferenceService(name, share string, utilization float64, grace time.Duration) *unstructured.Unstructured {
	worker := rayPodTemplate("ray-worker", "1", 1, nil, grace)
	if share != "" {
		worker = rayPodTemplate("ray-worker", "1", 0, map[string]any{names.AnnotationGPUMemory: share}, grace)
	}
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "ray.io/v1", "kind": "RayService",
		"metadata": map[string]any{"name": name, "namespace": Namespace, "labels": map[string]any{"priorityClassName": "inference"}},
		"spec": map[string]any{
			"serveConfigV2": serveConfig(utilization),
			"rayClusterConfig": map[string]any{
				"rayVersion":    "2.46.0",
				"headGroupSpec": map[string]any{"rayStartParams": map[string]any{"num-gpus": "0"}, "template": rayPodTemplate("ray-head", "1", 0, nil, grace)},
				"workerGroupSpecs": []any{map[string]any{
					"groupName": "gpu-group", "replicas": int64(1), "minReplicas": int64(1), "maxReplicas": int64(1),
					"rayStartParams": map[string]any{"num-gpus": "1"},
					"template":       worker,
				}},
			},
		},
	}}
}

func createObject(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, obj *unstructured.Unstructured) error {
	if _, err := dyn.Resource(gvr).Namespace(Namespace).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create %s %s: %w", obj.GetKind(), obj.GetName(), err)
	}
	return nil
}
