package chaos

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/sandbox"
	"github.com/gantry-dev/gantry/test/testenv"
)

const (
	nodeCount    = 4
	gpusPerNode  = 4
	gpuMemoryMiB = 23028
)

var (
	env          *testenv.Env
	schedulerBin string
)

func TestMain(m *testing.M) {
	// The KubeRay operator starts only when a chosen fault needs it (CHAOS_FAULTS, or
	// every fault in a full run; the short run of `make test` has no KubeRay fault).
	kuberay := false
	for _, f := range faults {
		all := os.Getenv("CHAOS_FAULTS") == "" && !shortRun()
		chosen := all || slices.Contains(strings.Split(os.Getenv("CHAOS_FAULTS"), ","), f.name)
		if f.kuberay && chosen {
			kuberay = true
		}
		if f.dra && chosen {
			withDRA = true
		}
	}
	os.Exit(testenv.RunMain(m, testenv.Options{Kwok: true, ControllerManager: true, KubeRay: kuberay}, &env, setup))
}

// setup builds the scheduler, registers the webhooks (served by a webhook-only
// replica the rounds may take down), and creates the GPU nodes, priority classes and
// queues every round uses.
func setup(ctx context.Context, e *testenv.Env) error {
	var err error
	if schedulerBin, err = BuildScheduler(e.Dir); err != nil {
		return err
	}
	if err := e.CreateNamespace(ctx, LeaseNamespace); err != nil {
		return err
	}
	certDir := filepath.Join(e.Dir, "webhook")
	caPEM, err := e.ServingCert(certDir)
	if err != nil {
		return err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	// A replica that serves no pods: the webhook server alone, so that taking it down
	// does not stop scheduling.
	if _, err := StartScheduler(ctx, e, schedulerBin, false, []string{"chaos-webhook-only"},
		"--webhook-bind-address="+addr, "--webhook-cert-dir="+certDir); err != nil {
		return err
	}
	webhookName = fmt.Sprintf("gantry-scheduler-%d", replicaSeq.Load())
	if err := sandbox.RegisterWebhooks(ctx, e.Client, "https://"+addr, caPEM); err != nil {
		return err
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	if _, err := testenv.ApplyFile(ctx, e.Config, "", filepath.Join(root, "deploy", "manifests", "priorityclasses.yaml")); err != nil {
		return err
	}
	if _, err := testenv.Apply(ctx, e.Config, "", []byte(queues)); err != nil {
		return err
	}
	for i := 0; i < nodeCount; i++ {
		if _, err := e.Client.CoreV1().Nodes().Create(ctx, gpuNode(fmt.Sprintf("chaos-%d", i)), metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	if !withDRA {
		return nil
	}
	if err := startBindingHook(ctx, e); err != nil {
		return err
	}
	return setupDRA(ctx, e)
}

// withDRA: a chosen fault needs the DRA node, its node agent and the binding hook.
var withDRA bool

// webhookName is the process name of the webhook-only replica.
var webhookName string

// queues: the default queue, and a team queue whose GPU limit (10 of 16) binds.
const queues = `
apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata: {name: default}
spec:
  resources:
    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata: {name: chaos-team}
spec:
  resources:
    gpu: {quota: 4, limit: 10, overQuotaWeight: 1}
`

// gpuNode is a kwok node with four A10Gs as GPU Feature Discovery labels them.
func gpuNode(name string) *corev1.Node {
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse("32"),
		corev1.ResourceMemory: resource.MustParse("256Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		"nvidia.com/gpu":      *resource.NewQuantity(gpusPerNode, resource.DecimalSI),
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{
			testenv.KwokNodeLabel: testenv.KwokNodeLabelValue, "kubernetes.io/hostname": name,
			"nvidia.com/gpu.product": "NVIDIA-A10G", "nvidia.com/gpu.memory": fmt.Sprint(gpuMemoryMiB), "nvidia.com/gpu.present": "true",
		}, Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"}},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
}
