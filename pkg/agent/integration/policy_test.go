package integration

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"

	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/testenv"
)

const (
	policyNamespace = "gantry-system"
	policyAgentSA   = "gantry-node-agent"
)

// renderPolicy renders the chart's node-scoped write policy for release
// "gantry" in gantry-system. It substitutes the template's few expressions
// itself, so that the test needs no helm binary; test/deploy renders the
// whole chart with helm.
func renderPolicy(t *testing.T) []byte {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	src, err := os.ReadFile(filepath.Join(root, "deploy/helm/gantry/templates/node-agent-policy.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	s := regexp.MustCompile(`(?s)\{\{-? /\*.*?\*/\}\}\n`).ReplaceAllString(string(src), "")
	s = strings.NewReplacer(
		"{{ $sa | quote }}", `"system:serviceaccount:`+policyNamespace+":"+policyAgentSA+`"`,
		"{{ $name }}", policyAgentSA+"-node-scoped",
		"{{ $claims }}", policyAgentSA+"-claim-status",
	).Replace(s)
	var out []string
	skipLabels := false
	for _, line := range strings.Split(s, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(trimmed, "{{"):
			continue // control lines: if, end, variable definitions
		case trimmed == "labels:":
			skipLabels = true
			continue
		case skipLabels && strings.Contains(line, "include"):
			continue
		}
		skipLabels = false
		out = append(out, line)
	}
	rendered := strings.Join(out, "\n")
	if strings.Contains(rendered, "{{") {
		t.Fatalf("unrendered template expressions left:\n%s", rendered)
	}
	return []byte(rendered)
}

// asAgentOn is a client that authenticates as the node agent's service
// account running on node, as its projected token says.
func asAgentOn(t *testing.T, node string) kubernetes.Interface {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + policyNamespace + ":" + policyAgentSA,
		Groups:   []string{"system:serviceaccounts", "system:authenticated"},
		Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {node}},
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func slice(name, node string) *resourceapi.ResourceSlice {
	return &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: names.DriverName, NodeName: ptr.To(node),
			Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
		},
	}
}

// The chart's ValidatingAdmissionPolicy, on a real API server: an agent
// writes its own node's ResourceSlice, and is refused another node's.
func TestPolicyRefusesAnotherNodesSlice(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	// RBAC lets the agent write slices at all; the policy narrows it to its node.
	applyAgentPolicies(t, ctx)
	onA := asAgentOn(t, "node-a")

	// The policy takes effect once the API server has loaded it.
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		_, lastErr = onA.ResourceV1().ResourceSlices().Create(ctx, slice("probe-b", "node-b"), metav1.CreateOptions{})
		if lastErr == nil {
			_ = env.Client.ResourceV1().ResourceSlices().Delete(ctx, "probe-b", metav1.DeleteOptions{})
			return false, nil
		}
		// RBAC's refusal, before the binding above reaches the authorizer's cache,
		// is not the policy's: wait for the policy to answer.
		return !strings.Contains(lastErr.Error(), "cannot create resource"), nil
	})
	if err != nil {
		t.Fatalf("the agent on node-a could still write node-b's slice: %v", err)
	}
	if !strings.Contains(lastErr.Error(), "may not write resourceslices of node 'node-b'") {
		t.Errorf("refusal %q does not say which node", lastErr)
	}
	if _, err := onA.ResourceV1().ResourceSlices().Create(ctx, slice("own-a", "node-a"), metav1.CreateOptions{}); err != nil {
		t.Errorf("the agent on node-a cannot write its own slice: %v", err)
	}
	// Another node's slice, written by the admin, cannot be deleted by the agent either.
	if _, err := env.Client.ResourceV1().ResourceSlices().Create(ctx, slice("theirs-b", "node-b"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := onA.ResourceV1().ResourceSlices().Delete(ctx, "theirs-b", metav1.DeleteOptions{}); err == nil {
		t.Error("the agent on node-a deleted node-b's slice")
	}
	// GPUNodes are named after their node.
	for node, allowed := range map[string]bool{"node-a": true, "node-b": false} {
		err := createGPUNodeAs(ctx, t, "node-a", node)
		if allowed && err != nil {
			t.Errorf("the agent on node-a cannot create GPUNode %s: %v", node, err)
		}
		if !allowed && err == nil {
			t.Errorf("the agent on node-a created GPUNode %s", node)
		}
	}
	// A token without a node (not running in a pod) writes nothing.
	if _, err := asAgentOn(t, "").ResourceV1().ResourceSlices().Create(ctx, slice("nowhere", "node-a"), metav1.CreateOptions{}); err == nil {
		t.Error("a token without a node name wrote a slice")
	}
}

// createGPUNodeAs creates GPUNode name as the agent on node.
func createGPUNodeAs(ctx context.Context, t *testing.T, node, name string) error {
	t.Helper()
	cfg := rest.CopyConfig(env.Config)
	cfg.Impersonate = rest.ImpersonationConfig{
		UserName: "system:serviceaccount:" + policyNamespace + ":" + policyAgentSA,
		Groups:   []string{"system:serviceaccounts", "system:authenticated"},
		Extra:    map[string][]string{"authentication.kubernetes.io/node-name": {node}},
	}
	scheme := runtime.NewScheme()
	if err := gpuv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	c, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	return c.Create(ctx, &gpuv1alpha1.GPUNode{ObjectMeta: metav1.ObjectMeta{Name: name}})
}
