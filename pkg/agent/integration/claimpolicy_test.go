package integration

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/pkg/agent"
	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/testenv"
)

// applyAgentPolicies applies the chart's node-agent policies and lets the agent's
// service account do anything RBAC could grant: what remains refused is the
// policies' doing.
func applyAgentPolicies(t *testing.T, ctx context.Context) {
	t.Helper()
	if _, err := testenv.Apply(ctx, env.Config, "", renderPolicy(t)); err != nil {
		t.Fatalf("apply policy: %v", err)
	}
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "policy-test-agent"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: policyAgentSA, Namespace: policyNamespace}},
	}
	if _, err := env.Client.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// shareClaim is a claim allocated a 20Gi share of gpu-3 in node's pool, reserved
// for a pod.
func shareClaim(t *testing.T, ctx context.Context, ns, name, node string) *resourceapi.ResourceClaim {
	t.Helper()
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: names.DriverName, Capacity: &resourceapi.CapacityRequirements{
				Requests: map[resourceapi.QualifiedName]resource.Quantity{names.MemoryCapacity: resource.MustParse("20Gi")}}}}}}}}
	c, err := env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if node == "" {
		return c
	}
	share := types.UID("5d0c1e2f-0000-4000-8000-00000000000" + name[len(name)-1:])
	c.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: names.DriverName, Pool: node, Device: "gpu-3", ShareID: &share,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{names.MemoryCapacity: resource.MustParse("20Gi")},
		}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}}}}},
	}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: name, UID: types.UID("uid-" + name)}}
	if c, err = env.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// The chart's claim-status policy, on a real API server: the agent, as its
// service account on its node, writes whether a share is enforced into the status
// of a claim allocated on its node (through its own ClaimStatusWriter, during
// Prepare); it is refused the status of a claim allocated on another node or on
// none, entries for another node's devices, and any change to the allocation or
// the reservations.
func TestPolicyKeepsClaimStatusToOwnNode(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const nodeName, other, ns = "gpu-node-pol", "gpu-node-pol-b", "team-pol"
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	applyAgentPolicies(t, ctx)
	onNode := asAgentOn(t, nodeName)
	theirs := shareClaim(t, ctx, ns, "theirs-1", other)

	// The policy takes effect once the API server has loaded it.
	if err := firstClaimPolicyRefusal(t, ctx, onNode, theirs, other); !strings.Contains(err.Error(), "claims allocated a gpu.gantry.dev device on its own node only") {
		t.Errorf("refusal %q does not say why", err)
	}

	// The agent itself, preparing a share allocated on its node, writes its status.
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = gpuv1alpha1.AddToScheme(scheme)
	statusClient, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	k := &kubeletSim{nodeName: nodeName, pluginDir: filepath.Join(base, "plugins", names.DriverName),
		registryDir: filepath.Join(base, "registry"), cdiRoot: filepath.Join(base, "cdi"), claimStatus: onNode}
	k.startAgent(t, statusClient)
	plugin := drapb.NewDRAPluginClient(dial(t, k.register(t, ctx)))
	mine := shareClaim(t, ctx, ns, "mine-2", nodeName)
	prep, err := plugin.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: ns, Name: mine.Name, Uid: string(mine.UID)}}})
	if err != nil || prep.Claims[string(mine.UID)].GetError() != "" {
		t.Fatalf("prepare: %v %+v", err, prep)
	}
	if mine, err = env.Client.ResourceV1().ResourceClaims(ns).Get(ctx, mine.Name, metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	if len(mine.Status.Devices) != 1 || meta.FindStatusCondition(mine.Status.Devices[0].Conditions, agent.ConditionShareEnforced) == nil {
		t.Fatalf("the agent's own status write did not pass the policy: status.devices %+v", mine.Status.Devices)
	}

	// What else the agent on the node may not do to a claim of its own node: the
	// claim below also holds a device of another node's pool and another driver's
	// (the API server accepts status entries only for allocated devices).
	mixed := mixedClaim(t, ctx, ns, nodeName, other)
	refused := map[string]func(c *resourceapi.ResourceClaim){
		"an entry for another node's device": func(c *resourceapi.ResourceClaim) {
			c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: names.DriverName, Pool: other, Device: "gpu-0"})
		},
		"another driver's entry": func(c *resourceapi.ResourceClaim) {
			c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: "gpu.nvidia.com", Pool: nodeName, Device: "gpu-0"})
		},
		"dropping the reservation": func(c *resourceapi.ResourceClaim) { c.Status.ReservedFor = nil },
	}
	for what, change := range refused {
		c := mixed.DeepCopy()
		change(c)
		if _, err := onNode.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err == nil ||
			!strings.Contains(err.Error(), "ValidatingAdmissionPolicy") {
			t.Errorf("%s: got %v, want the policy's refusal", what, err)
		}
	}
	// Its own node's device of that claim it may report on.
	c := mixed.DeepCopy()
	c.Status.Devices = append(c.Status.Devices, resourceapi.AllocatedDeviceStatus{Driver: names.DriverName, Pool: nodeName, Device: "gpu-1"})
	if _, err := onNode.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Errorf("the agent cannot report on its own node's device: %v", err)
	}
	// A claim allocated nowhere.
	none := shareClaim(t, ctx, ns, "none-3", "")
	none.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: names.DriverName, Pool: nodeName, Device: "gpu-3"}}
	if _, err := onNode.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, none, metav1.UpdateOptions{}); err == nil {
		t.Error("the agent wrote the status of an unallocated claim")
	}
}

// mixedClaim is allocated gpu-1 of node, gpu-0 of other's pool and a device of
// another driver on node, and reserved for a pod.
func mixedClaim(t *testing.T, ctx context.Context, ns, node, other string) *resourceapi.ResourceClaim {
	t.Helper()
	var reqs []resourceapi.DeviceRequest
	for _, r := range []struct{ name, class string }{{"gpu", names.DriverName}, {"remote", names.DriverName}, {"nvidia", "gpu.nvidia.com"}} {
		reqs = append(reqs, resourceapi.DeviceRequest{Name: r.name, Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: r.class}})
	}
	c := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "mixed-4"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: reqs}}}
	c, err := env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, c, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c.Status.Allocation = &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
		{Request: "gpu", Driver: names.DriverName, Pool: node, Device: "gpu-1"},
		{Request: "remote", Driver: names.DriverName, Pool: other, Device: "gpu-0"},
		{Request: "nvidia", Driver: "gpu.nvidia.com", Pool: node, Device: "gpu-0"},
	}}}
	c.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "mixed", UID: "uid-mixed"}}
	if c, err = env.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	return c
}

// firstClaimPolicyRefusal writes, as the agent, an entry into the status of theirs
// (allocated on node other) until the policy, not RBAC, refuses it, and returns the
// refusal; the test fails if it never comes.
func firstClaimPolicyRefusal(t *testing.T, ctx context.Context, onNode kubernetes.Interface, theirs *resourceapi.ResourceClaim, other string) error {
	t.Helper()
	var lastErr error
	err := wait.PollUntilContextCancel(ctx, 200*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		c, err := env.Client.ResourceV1().ResourceClaims(theirs.Namespace).Get(ctx, theirs.Name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		c.Status.Devices = []resourceapi.AllocatedDeviceStatus{{Driver: names.DriverName, Pool: other, Device: "gpu-3", ShareID: ptrString(c.Status.Allocation.Devices.Results[0].ShareID)}}
		_, lastErr = onNode.ResourceV1().ResourceClaims(theirs.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{})
		return lastErr != nil && !strings.Contains(lastErr.Error(), "cannot update resource"), nil
	})
	if err != nil {
		t.Fatalf("the agent could still write the status of a claim allocated on %s: %v", other, lastErr)
	}
	return lastErr
}

func ptrString(u *types.UID) *string {
	if u == nil {
		return nil
	}
	s := string(*u)
	return &s
}
