package testenv_test

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	if os.Getenv("GANTRY_TESTENV_CRASH_CHILD") != "" {
		crashChild()
		return
	}
	os.Exit(testenv.RunMain(m, testenv.Options{Kwok: true}, &env))
}

func requireEnv(t *testing.T) {
	t.Helper()
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
}

func TestNodeAndPodRoundTrip(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "roundtrip-node", Labels: map[string]string{"example.com/test": "roundtrip"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("8"), "nvidia.com/gpu": resource.MustParse("8"),
		}},
	}
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create node: %v", err)
	}
	got, err := env.Client.CoreV1().Nodes().Get(ctx, "roundtrip-node", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get node: %v", err)
	}
	if got.Labels["example.com/test"] != "roundtrip" {
		t.Errorf("node labels = %v, want example.com/test=roundtrip", got.Labels)
	}
	if err := env.CreateNamespace(ctx, "roundtrip"); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "roundtrip"},
		Spec: corev1.PodSpec{
			SchedulerName: "gantry-scheduler",
			Containers: []corev1.Container{{Name: "c", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")},
			}}},
		},
	}
	if _, err := env.Client.CoreV1().Pods("roundtrip").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create pod: %v", err)
	}
	gotPod, err := env.Client.CoreV1().Pods("roundtrip").Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get pod: %v", err)
	}
	if gotPod.Spec.SchedulerName != "gantry-scheduler" || gotPod.Spec.NodeName != "" {
		t.Errorf("pod = scheduler %q node %q, want gantry-scheduler and unbound", gotPod.Spec.SchedulerName, gotPod.Spec.NodeName)
	}
}

// A pod bound to a kwok node must reach Running: kwok plays its kubelet.
func TestKwokRunsBoundPod(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{
		Name:        "kwok-node-0",
		Labels:      map[string]string{testenv.KwokNodeLabel: testenv.KwokNodeLabelValue},
		Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
	}}
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := env.CreateNamespace(ctx, "kwok"); err != nil {
		t.Fatal(err)
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "runs", Namespace: "kwok"},
		Spec: corev1.PodSpec{
			NodeName:    "kwok-node-0",
			Containers:  []corev1.Container{{Name: "c", Image: "busybox"}},
			Tolerations: []corev1.Toleration{{Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := env.Client.CoreV1().Pods("kwok").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := env.Client.CoreV1().Pods("kwok").Get(ctx, "runs", metav1.GetOptions{})
		return err == nil && p.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod on kwok node did not reach Running: %v", err)
	}
	n, err := env.Client.CoreV1().Nodes().Get(ctx, "kwok-node-0", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ready := false
	for _, c := range n.Status.Conditions {
		ready = ready || (c.Type == corev1.NodeReady && c.Status == corev1.ConditionTrue)
	}
	if !ready {
		t.Errorf("kwok node is not Ready: %+v", n.Status.Conditions)
	}
}

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.gantry.dev
spec:
  group: test.gantry.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            properties:
              size:
                type: integer
                minimum: 1
`

func TestInstallCRDAndCreateObject(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	f := filepath.Join(t.TempDir(), "widget.yaml")
	if err := os.WriteFile(f, []byte(widgetCRD), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := testenv.InstallCRDs(ctx, env.Config, f); err != nil {
		t.Fatalf("install CRD: %v", err)
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "test.gantry.dev", Version: "v1", Resource: "widgets"}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "test.gantry.dev/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "default"},
		"spec":     map[string]any{"size": int64(3)},
	}}
	if _, err := dyn.Resource(gvr).Namespace("default").Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create widget: %v", err)
	}
	bad := obj.DeepCopy()
	bad.SetName("bad")
	bad.Object["spec"] = map[string]any{"size": int64(0)}
	_, err = dyn.Resource(gvr).Namespace("default").Create(ctx, bad, metav1.CreateOptions{})
	if err == nil || !strings.Contains(err.Error(), "spec.size") {
		t.Fatalf("create widget with size 0: err = %v, want a schema error naming spec.size", err)
	}
}

// Stop leaves no process behind.
func TestStopLeavesNoProcess(t *testing.T) {
	requireEnv(t)
	e, err := testenv.Start(context.Background(), testenv.Options{CRDPaths: []string{}})
	if err != nil {
		t.Fatal(err)
	}
	pids := e.PIDs()
	if len(pids) != 2 {
		t.Fatalf("PIDs = %v, want etcd and kube-apiserver", pids)
	}
	dir := e.Dir
	if err := e.Stop(); err != nil {
		t.Fatalf("stop: %v", err)
	}
	for name, pid := range pids {
		if processRunning(pid) {
			t.Errorf("%s (pid %d) still running after Stop", name, pid)
		}
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("data dir %s still exists after Stop", dir)
	}
}

// A test binary that panics still takes its control plane down with it.
func TestPanickingTestLeavesNoProcess(t *testing.T) {
	requireEnv(t)
	pidFile := filepath.Join(t.TempDir(), "pids.json")
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "GANTRY_TESTENV_CRASH_CHILD="+pidFile)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("crashing child exited cleanly; output:\n%s", out)
	}
	b, rerr := os.ReadFile(pidFile)
	if rerr != nil {
		t.Fatalf("child wrote no pids (%v); output:\n%s", rerr, out)
	}
	var pids map[string]int
	if err := json.Unmarshal(b, &pids); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for name, pid := range pids {
		for processRunning(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if processRunning(pid) {
			t.Errorf("%s (pid %d) outlived the panicking test binary", name, pid)
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}
}

// crashChild starts a control plane, records its pids, and panics without cleanup.
func crashChild() {
	e, err := testenv.Start(context.Background(), testenv.Options{CRDPaths: []string{}})
	if err != nil {
		os.Exit(3)
	}
	b, _ := json.Marshal(e.PIDs())
	_ = os.WriteFile(os.Getenv("GANTRY_TESTENV_CRASH_CHILD"), b, 0o600)
	go func() { panic("deliberate crash: the control plane must die with this process") }()
	select {}
}

func processRunning(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

func itoa(i int) string { return strconv.Itoa(i) }
