// Package sandbox runs a whole Gantry cluster on one machine with no GPU: etcd,
// kube-apiserver and kube-controller-manager, kwok playing the kubelets of fake GPU
// nodes, one node agent per node on go-nvml's mock GPUs, the real KubeRay operator
// configured as the seed installs it, and gantry-scheduler serving both
// gantry-scheduler and kai-scheduler pods. Demo then plays the seed scenario on it.
//
// It is what `gantry sandbox` and `make run` drive, and what the sandbox tests check.
// Everything listens on loopback and every process dies with the sandbox.
package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/gpu/fake"
	"github.com/gantry-dev/gantry/pkg/controlplane"
	"github.com/gantry-dev/gantry/pkg/model"
)

// Options shape the sandbox.
type Options struct {
	// Nodes is how many GPU nodes to create (default 1).
	Nodes int
	// GPUs is the fake GPU profile of every node, as gantry-node-agent --fake-gpus
	// takes it (default "1xA10G": the seed's single 24 GB A10G).
	GPUs string
	// Queues is a YAML file of Queues to install (default: none).
	Queues string
	// Out receives progress lines.
	Out io.Writer
	// Logs copies every component's output to stderr.
	Logs bool
}

// Sandbox is a running sandbox.
type Sandbox struct {
	Env *controlplane.Env
	// Nodes are the fake GPU nodes.
	Nodes []string
	// SchedulerMetrics and AgentMetrics are the /metrics URLs.
	SchedulerMetrics string
	AgentMetrics     []string
	out              io.Writer
}

// StateFile is where a running sandbox says how to reach it, for `gantry sandbox
// demo` and `gantry explain` run from another terminal.
func StateFile() string { return filepath.Join(os.TempDir(), "gantry-sandbox", "current.json") }

// State is the content of StateFile.
type State struct {
	Kubeconfig       string   `json:"kubeconfig"`
	SchedulerMetrics string   `json:"schedulerMetrics"`
	AgentMetrics     []string `json:"agentMetrics"`
	PID              int      `json:"pid"`
}

// LoadState reads StateFile, failing with what to do when no sandbox runs.
func LoadState() (*State, error) {
	b, err := os.ReadFile(StateFile())
	if err != nil {
		return nil, fmt.Errorf("no sandbox is running (%v): start one with `make run` or `gantry sandbox up`", err)
	}
	var st State
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// Up starts a sandbox. On error everything started is stopped.
func Up(ctx context.Context, o Options) (_ *Sandbox, err error) {
	if o.Nodes <= 0 {
		o.Nodes = 1
	}
	if o.GPUs == "" {
		o.GPUs = "1xA10G"
	}
	if o.Out == nil {
		o.Out = io.Discard
	}
	bin, err := controlplane.BinDir()
	if err != nil {
		return nil, err
	}
	for _, b := range []string{"gantry-scheduler", "gantry-node-agent"} {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("%s/%s is missing: run `make build`", bin, b)
		}
	}
	s := &Sandbox{out: o.Out}
	step := s.stepper()
	step("starting etcd, kube-apiserver, kube-controller-manager, kwok and the KubeRay operator (--batch-scheduler=kai-scheduler)")
	env, err := controlplane.Start(ctx, controlplane.Options{Kwok: true, ControllerManager: true, KubeRay: true, Logs: o.Logs})
	if err != nil {
		return nil, err
	}
	s.Env = env
	defer func() {
		if err != nil {
			_ = s.Down()
		}
	}()
	root, err := controlplane.RepoRoot()
	if err != nil {
		return nil, err
	}
	step("installing PriorityClasses train/build/inference and the gpu.gantry.dev DeviceClass")
	for _, f := range []string{"priorityclasses.yaml", "deviceclass.yaml"} {
		if _, err := controlplane.ApplyFile(ctx, env.Config, "", filepath.Join(root, "deploy", "manifests", f)); err != nil {
			return nil, err
		}
	}
	if o.Queues != "" {
		step("installing queues from " + o.Queues)
		if _, err := controlplane.ApplyFile(ctx, env.Config, "", o.Queues); err != nil {
			return nil, err
		}
	}
	for i := 0; i < o.Nodes; i++ {
		name := fmt.Sprintf("gpu-node-%d", i)
		step(fmt.Sprintf("creating node %s with fake GPUs %s and its node agent", name, o.GPUs))
		if err := s.addNode(ctx, bin, name, o.GPUs, o.Logs); err != nil {
			return nil, err
		}
	}
	step("starting gantry-scheduler (serving gantry-scheduler and kai-scheduler)")
	if err := s.startScheduler(ctx, bin, o.Logs); err != nil {
		return nil, err
	}
	if err := s.waitForInventory(ctx); err != nil {
		return nil, err
	}
	if err := s.writeState(); err != nil {
		return nil, err
	}
	step("ready")
	return s, nil
}

func (s *Sandbox) stepper() func(string) {
	start := time.Now()
	return func(msg string) {
		fmt.Fprintf(s.out, "[%5.1fs] %s\n", time.Since(start).Seconds(), msg)
	}
}

// addNode creates a kwok node shaped like a GPU Operator node with the profile's GPUs,
// and starts its node agent on the same fake GPUs.
func (s *Sandbox) addNode(ctx context.Context, bin, name, profile string, logs bool) error {
	fleet, err := fake.New(profile, name)
	if err != nil {
		return err
	}
	inv, err := gpu.Discover(fleet)
	if err != nil {
		return err
	}
	product, memMiB := "", uint64(0)
	if len(inv.Devices) > 0 {
		product = model.CanonicalGPUModel(inv.Devices[0].ProductName)
		memMiB = inv.Devices[0].Memory.TotalBytes >> 20
	}
	capacity := corev1.ResourceList{
		corev1.ResourceCPU:    resource.MustParse(strconv.Itoa(8 * max(1, len(inv.Devices)))),
		corev1.ResourceMemory: resource.MustParse(strconv.Itoa(64*max(1, len(inv.Devices))) + "Gi"),
		corev1.ResourcePods:   resource.MustParse("110"),
		"nvidia.com/gpu":      *resource.NewQuantity(int64(len(inv.Devices)), resource.DecimalSI),
	}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name: name,
			Labels: map[string]string{
				controlplane.KwokNodeLabel: controlplane.KwokNodeLabelValue,
				"kubernetes.io/hostname":   name,
				"nvidia.com/gpu.present":   "true",
				"nvidia.com/gpu.product":   product,
				"nvidia.com/gpu.memory":    strconv.FormatUint(memMiB, 10),
				"nvidia.com/gpu.count":     strconv.Itoa(len(inv.Devices)),
			},
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake"},
		},
		Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity},
	}
	if _, err := s.Env.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("create node %s: %w", name, err)
	}
	dir := filepath.Join(s.Env.Dir, "nodes", name)
	for _, d := range []string{"plugin", "registry", "cdi"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			return err
		}
	}
	port, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	if _, err := s.Env.StartProcess("node-agent-"+name, filepath.Join(bin, "gantry-node-agent"), logs,
		"--node-name="+name,
		"--kubeconfig="+s.Env.Kubeconfig,
		"--fake-gpus="+profile,
		"--kubelet-plugin-dir="+filepath.Join(dir, "plugin"),
		"--kubelet-registrar-dir="+filepath.Join(dir, "registry"),
		"--cdi-root="+filepath.Join(dir, "cdi"),
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port),
		"--pod-resources-socket=",
		"--poll-interval=2s",
		"--status-min-interval=2s",
	); err != nil {
		return err
	}
	s.Nodes = append(s.Nodes, name)
	s.AgentMetrics = append(s.AgentMetrics, fmt.Sprintf("http://127.0.0.1:%d/metrics", port))
	return nil
}

func (s *Sandbox) startScheduler(ctx context.Context, bin string, logs bool) error {
	metrics, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	probe, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	hook, err := controlplane.FreePort()
	if err != nil {
		return err
	}
	certDir := filepath.Join(s.Env.Dir, "webhook")
	caPEM, err := s.Env.ServingCert(certDir)
	if err != nil {
		return err
	}
	if _, err := s.Env.StartProcess("gantry-scheduler", filepath.Join(bin, "gantry-scheduler"), logs,
		"--kubeconfig="+s.Env.Kubeconfig,
		"--leader-elect=false",
		"--scheduler-name=gantry-scheduler",
		"--scheduler-name=kai-scheduler",
		"--kube-api-qps=500",
		"--kube-api-burst=1000",
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(metrics),
		"--health-probe-bind-address=127.0.0.1:"+strconv.Itoa(probe),
		"--webhook-bind-address=127.0.0.1:"+strconv.Itoa(hook),
		"--webhook-cert-dir="+certDir,
	); err != nil {
		return err
	}
	s.SchedulerMetrics = fmt.Sprintf("http://127.0.0.1:%d/metrics", metrics)
	deadline := time.Now().Add(60 * time.Second)
	for time.Now().Before(deadline) {
		if err := s.Env.Exited("gantry-scheduler"); err != nil {
			return err
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", probe))
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return RegisterWebhooks(ctx, s.Env.Client, fmt.Sprintf("https://127.0.0.1:%d", hook), caPEM)
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("gantry-scheduler not ready after 60s; see %s", filepath.Join(s.Env.Dir, "gantry-scheduler.log"))
}

// waitForInventory waits until every node agent has published its GPUs.
func (s *Sandbox) waitForInventory(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		slices, err := s.Env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
		if err == nil {
			seen := map[string]bool{}
			for _, sl := range slices.Items {
				if sl.Spec.NodeName != nil {
					seen[*sl.Spec.NodeName] = true
				}
			}
			if len(seen) >= len(s.Nodes) {
				return nil
			}
		}
		for _, n := range s.Nodes {
			if err := s.Env.Exited("node-agent-" + n); err != nil {
				return err
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("node agents did not publish their GPUs within 60s; see the node-agent-*.log files in %s", s.Env.Dir)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
}

func (s *Sandbox) writeState() error {
	st := State{Kubeconfig: s.Env.Kubeconfig, SchedulerMetrics: s.SchedulerMetrics, AgentMetrics: s.AgentMetrics, PID: os.Getpid()}
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(StateFile()), 0o755); err != nil {
		return err
	}
	return os.WriteFile(StateFile(), b, 0o644)
}

// Down stops every process of the sandbox and removes its files.
func (s *Sandbox) Down() error {
	if b, err := os.ReadFile(StateFile()); err == nil {
		var st State
		if json.Unmarshal(b, &st) == nil && st.PID == os.Getpid() {
			_ = os.Remove(StateFile())
		}
	}
	if s.Env == nil {
		return nil
	}
	return s.Env.Stop()
}
