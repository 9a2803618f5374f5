package chaos

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gantry-dev/gantry/test/testenv"
)

// The DRA faults run on one more kwok node, chaos-dra, whose four fake A10Gs a real
// gantry-node-agent (--fake-gpus) publishes as ResourceSlices and prepares as the
// kubelet's DRA plugin. The harness plays the kubelet (kubelet_test.go). The node is
// tainted, so only the DRA rounds' pods (which tolerate it) go there and the other
// faults keep their 16 GPUs.
const (
	draNode  = "chaos-dra"
	draTaint = "chaos.gantry.dev/dra"
	// draAgent is the node agent's process name in the testenv.Env.
	draAgent = "node-agent-" + draNode
)

// draDirs are the directories the node agent shares with the (simulated) kubelet; a
// short base under /tmp keeps the unix socket paths under their 108-byte limit.
type draDirs struct{ plugin, registry, cdi string }

var dra draDirs

// setupDRA builds the node agent, creates the DRA node and starts the agent on it,
// then waits for its ResourceSlice.
func setupDRA(ctx context.Context, e *testenv.Env) error {
	root, err := testenv.RepoRoot()
	if err != nil {
		return err
	}
	bin := filepath.Join(e.Dir, "gantry-node-agent")
	cmd := exec.Command("go", "build", "-o", bin, "./cmd/node-agent")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("go build ./cmd/node-agent: %v\n%s", err, b)
	}
	base, err := os.MkdirTemp("", "cdra")
	if err != nil {
		return err
	}
	dra = draDirs{plugin: filepath.Join(base, "plugin"), registry: filepath.Join(base, "reg"), cdi: filepath.Join(base, "cdi")}
	for _, d := range []string{dra.plugin, dra.registry, dra.cdi} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return err
		}
	}
	n := gpuNode(draNode)
	n.Spec.Taints = []corev1.Taint{{Key: draTaint, Value: "true", Effect: corev1.TaintEffectNoSchedule}}
	if _, err := e.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		return err
	}
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	if _, err := e.StartProcess(draAgent, bin, false,
		"--node-name="+draNode, "--kubeconfig="+e.Kubeconfig, "--fake-gpus="+strconv.Itoa(gpusPerNode)+"xA10G",
		"--kubelet-plugin-dir="+dra.plugin, "--kubelet-registrar-dir="+dra.registry, "--cdi-root="+dra.cdi,
		"--metrics-bind-address=127.0.0.1:"+strconv.Itoa(port), "--pod-resources-socket=",
		"--poll-interval=2s", "--status-min-interval=2s", "--watch-node=false",
	); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := e.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + draNode})
		if err != nil {
			return false, nil
		}
		for _, s := range list.Items {
			if len(s.Spec.Devices) == gpusPerNode {
				return true, nil
			}
		}
		return false, nil
	})
}

// createDRAGang creates size pods on the DRA node, each with its own ResourceClaim of
// one gpu.gantry.dev device, whole or a share of memMiB (0: whole), all one gang.
func createDRAGang(ctx context.Context, ns, group string, size int, memMiB int64) error {
	for i := 0; i < size; i++ {
		name := fmt.Sprintf("%s-%d", group, i)
		req := &resourceapi.ExactDeviceRequest{DeviceClassName: "gpu.gantry.dev", Count: 1}
		if memMiB > 0 {
			req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{
				"memory": *resource.NewQuantity(memMiB<<20, resource.BinarySI)}}
		}
		claim := &resourceapi.ResourceClaim{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
			Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: req}}}},
		}
		if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create ResourceClaim %s/%s: %w", ns, name, err)
		}
		p := newPod(ns, podSpec{name: name, group: group, class: "build", gangSize: size})
		p.Spec.Tolerations = append(p.Spec.Tolerations, corev1.Toleration{Key: draTaint, Operator: corev1.TolerationOpExists})
		p.Spec.NodeSelector = map[string]string{"kubernetes.io/hostname": draNode}
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create %s/%s: %w", ns, name, err)
		}
	}
	return nil
}

// claimsConsistent checks, once a round has settled, that no allocation leaked: every
// allocated claim of ns is reserved for live pods, and each of them is bound to the
// node the allocation is for; every bound pod's claim is allocated on its node.
// kube-controller-manager drops a deleted pod's reservation and then the allocation,
// so the check is given 60 s to come true.
func claimsConsistent(ctx context.Context, ns string) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		err := claimsConsistentNow(ctx, ns)
		if err != nil && ctx.Err() != nil {
			return false, nil // the deadline's own error says nothing about the claims
		}
		last = err
		return err == nil, nil
	})
	if err != nil {
		return fmt.Errorf("%w (for 60s)", last)
	}
	return nil
}

func claimsConsistentNow(ctx context.Context, ns string) error {
	claims, err := env.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return err
	}
	pods, err := listPods(ctx, ns)
	if err != nil {
		return err
	}
	byName := map[string]corev1.Pod{}
	for _, p := range pods {
		byName[p.Name] = p
	}
	for _, c := range claims.Items {
		a := c.Status.Allocation
		if a == nil {
			continue
		}
		node := allocationNode(a)
		if len(c.Status.ReservedFor) == 0 {
			return fmt.Errorf("claim %s allocated on %s but reserved for nobody: a leaked allocation", c.Name, node)
		}
		for _, r := range c.Status.ReservedFor {
			p, ok := byName[r.Name]
			switch {
			case !ok || p.UID != r.UID:
				return fmt.Errorf("claim %s allocated on %s for pod %s, which is gone: a leaked allocation", c.Name, node, r.Name)
			case p.Spec.NodeName != "" && p.Spec.NodeName != node:
				return fmt.Errorf("claim %s allocated on %s, its pod %s bound to %s", c.Name, node, p.Name, p.Spec.NodeName)
			}
		}
	}
	for _, p := range pods {
		if p.Spec.NodeName == "" || len(p.Spec.ResourceClaims) == 0 {
			continue
		}
		for _, pc := range p.Spec.ResourceClaims {
			c, err := env.Client.ResourceV1().ResourceClaims(ns).Get(ctx, *pc.ResourceClaimName, metav1.GetOptions{})
			if err != nil {
				return err
			}
			if c.Status.Allocation == nil || allocationNode(c.Status.Allocation) != p.Spec.NodeName {
				return fmt.Errorf("pod %s bound to %s without its claim %s allocated there", p.Name, p.Spec.NodeName, c.Name)
			}
		}
	}
	return nil
}

func allocationNode(a *resourceapi.AllocationResult) string {
	if a.NodeSelector != nil {
		for _, t := range a.NodeSelector.NodeSelectorTerms {
			for _, f := range t.MatchFields {
				if f.Key == "metadata.name" && len(f.Values) == 1 {
					return f.Values[0]
				}
			}
		}
	}
	for _, r := range a.Devices.Results {
		return r.Pool
	}
	return ""
}

// waitClaimsReleased waits until no ResourceClaim of ns is allocated (its pods are
// gone: kube-controller-manager deallocates a claim that carries the delete-protection
// finalizer once nothing reserves it), so that the next round starts on free devices;
// an allocation left after 60 s is a leaked allocation.
func waitClaimsReleased(ctx context.Context, ns string) error {
	var held []string
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		list, err := env.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return false, nil
		}
		held = held[:0]
		for _, c := range list.Items {
			if c.Status.Allocation != nil {
				held = append(held, fmt.Sprintf("%s (reserved for %d)", c.Name, len(c.Status.ReservedFor)))
			}
		}
		return len(held) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("claims still allocated 60s after their pods were deleted (a leaked allocation): %v", held)
	}
	return nil
}
