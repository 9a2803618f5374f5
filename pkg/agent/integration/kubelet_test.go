package integration

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	registerapi "k8s.io/kubelet/pkg/apis/pluginregistration/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gantry-dev/gantry/gpu/fake"
	"github.com/gantry-dev/gantry/pkg/agent"
	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	opts := testenv.Options{}
	if root, err := testenv.RepoRoot(); err == nil {
		// Only this package's CRD, so that other CRDs being written do not break it.
		opts.CRDPaths = []string{filepath.Join(root, "deploy", "crds", "gpu.gantry.dev_gpunodes.yaml")}
	}
	os.Exit(testenv.RunMain(m, opts, &env))
}

// kubeletSim holds the directories a kubelet shares with the plugin.
type kubeletSim struct {
	nodeName, pluginDir, registryDir, cdiRoot string
	// claimStatus is the client the agent writes claim statuses with; nil: the admin's.
	claimStatus kubernetes.Interface
}

// runningAgent is one agent process-lifetime: started, then stopped.
type runningAgent struct {
	agent  *agent.Agent
	fleet  *fake.Fleet
	cancel context.CancelFunc
	done   chan error
}

func (k *kubeletSim) startAgent(t *testing.T, statusClient client.Client) *runningAgent {
	t.Helper()
	fleet, err := fake.New("dgxh100", k.nodeName)
	if err != nil {
		t.Fatal(err)
	}
	driverRoot := t.TempDir()
	if _, err := fleet.DriverRoot(driverRoot); err != nil {
		t.Fatal(err)
	}
	a, err := agent.New(agent.Config{
		NodeName: k.nodeName, KubeClient: env.Client, NVML: fleet,
		PluginDataDir: k.pluginDir, RegistrarDir: k.registryDir, CDIRoot: k.cdiRoot,
		CDI:          agent.CDIOptions{DriverRoot: driverRoot},
		PollInterval: 100 * time.Millisecond, InstallDeviceClass: true,
		Status:      agent.NewStatusWriter(statusClient, k.nodeName, agent.StatusOptions{MinInterval: 100 * time.Millisecond}),
		ClaimStatus: &agent.ClaimStatusWriter{Client: cmp.Or[kubernetes.Interface](k.claimStatus, env.Client)},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	r := &runningAgent{agent: a, fleet: fleet, cancel: cancel, done: make(chan error, 1)}
	go func() { r.done <- a.Run(ctx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *runningAgent) stop() {
	r.cancel()
	<-r.done
	r.done <- nil // later stops return at once
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	var conn *grpc.ClientConn
	// The socket appears shortly after Run starts.
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 20*time.Second, true, func(context.Context) (bool, error) {
		if _, err := os.Stat(socket); err != nil {
			return false, nil
		}
		c, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return false, err
		}
		conn = c
		return true, nil
	})
	if err != nil {
		t.Fatalf("socket %s: %v", socket, err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// register does what the kubelet's plugin watcher does with a new socket.
func (k *kubeletSim) register(t *testing.T, ctx context.Context) string {
	t.Helper()
	reg := registerapi.NewRegistrationClient(dial(t, filepath.Join(k.registryDir, names.DriverName+"-reg.sock")))
	var info *registerapi.PluginInfo
	err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		info, err = reg.GetInfo(ctx, &registerapi.InfoRequest{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatalf("GetInfo: %v", err)
	}
	if info.Type != registerapi.DRAPlugin || info.Name != names.DriverName || !strings.Contains(strings.Join(info.SupportedVersions, ","), drapb.DRAPluginService) {
		t.Fatalf("plugin info %+v", info)
	}
	if _, err := reg.NotifyRegistrationStatus(ctx, &registerapi.RegistrationStatus{PluginRegistered: true}); err != nil {
		t.Fatalf("NotifyRegistrationStatus: %v", err)
	}
	return info.Endpoint
}

func nodeSlices(t *testing.T, ctx context.Context, node string) []resourceapi.ResourceSlice {
	t.Helper()
	list, err := env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.ResourceSlice
	for _, s := range list.Items {
		if s.Spec.Driver == names.DriverName {
			out = append(out, s)
		}
	}
	return out
}

func waitForSlice(t *testing.T, ctx context.Context, node string, ok func(resourceapi.ResourceSlice) bool) resourceapi.ResourceSlice {
	t.Helper()
	var got resourceapi.ResourceSlice
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		s := nodeSlices(t, ctx, node)
		if len(s) == 1 && ok(s[0]) {
			got = s[0]
			return true, nil
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("no matching ResourceSlice for %s: %v (have %+v)", node, err, nodeSlices(t, ctx, node))
	}
	return got
}

func TestAgentAsSeenByKubelet(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	ctx := context.Background()
	const nodeName = "gpu-node-1"
	node, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "team-a"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	if err := gpuv1alpha1.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	statusClient, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}

	base := t.TempDir() // short enough for unix socket paths
	k := &kubeletSim{nodeName: nodeName, pluginDir: filepath.Join(base, "plugins", names.DriverName),
		registryDir: filepath.Join(base, "registry"), cdiRoot: filepath.Join(base, "cdi")}

	first := k.startAgent(t, statusClient)
	endpoint := k.register(t, ctx)
	if endpoint != filepath.Join(k.pluginDir, "dra.sock") {
		t.Errorf("DRA endpoint %s", endpoint)
	}

	// Slices: one device per GPU, consumable memory, owned by the Node.
	slice := waitForSlice(t, ctx, nodeName, func(s resourceapi.ResourceSlice) bool { return len(s.Spec.Devices) == 8 })
	if len(slice.OwnerReferences) != 1 || slice.OwnerReferences[0].UID != node.UID {
		t.Errorf("slice owners %+v, want the Node", slice.OwnerReferences)
	}
	dev2 := slice.Spec.Devices[2]
	uuid2 := first.fleet.GPUs[2].UUID()
	if dev2.Name != "gpu-2" || *dev2.Attributes["uuid"].StringValue != uuid2 || *dev2.Attributes["productName"].StringValue != "NVIDIA H100 80GB HBM3" {
		t.Errorf("device 2 %+v", dev2)
	}
	// The API server drops fields of disabled features: these must have survived.
	if dev2.AllowMultipleAllocations == nil || !*dev2.AllowMultipleAllocations || dev2.Capacity["memory"].RequestPolicy == nil {
		t.Fatalf("consumable capacity dropped by the API server: %+v", dev2)
	}
	if _, err := env.Client.ResourceV1().DeviceClasses().Get(ctx, names.DriverName, metav1.GetOptions{}); err != nil {
		t.Errorf("DeviceClass not installed: %v", err)
	}

	// GPUNode status is written from live memory.
	if err := first.fleet.GPUs[2].SetMemoryUsed(3 << 30); err != nil {
		t.Fatal(err)
	}
	var gn gpuv1alpha1.GPUNode
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := statusClient.Get(ctx, types.NamespacedName{Name: nodeName}, &gn); err != nil {
			return false, nil
		}
		return len(gn.Status.GPUs) == 8 && gn.Status.GPUs[2].MemoryUsed != nil && gn.Status.GPUs[2].MemoryUsed.Value() == 3<<30, nil
	})
	if err != nil {
		t.Fatalf("GPUNode status: %v (have %+v)", err, gn.Status)
	}

	// The scheduler's part: a claim for a 20Gi share, allocated on gpu-2.
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: "llm"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu",
			Exactly: &resourceapi.ExactDeviceRequest{
				DeviceClassName: names.DriverName,
				Capacity:        &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")}},
			},
		}}}},
	}
	claim, err = env.Client.ResourceV1().ResourceClaims("team-a").Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	shareID := types.UID("9b1b8a44-4f0e-4b79-9a39-1d0a1b0c0d20")
	claim.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: names.DriverName, Pool: nodeName, Device: "gpu-2", ShareID: &shareID,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")},
		}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}}}}},
	}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "llm-0", UID: "11111111-2222-3333-4444-555555555555"}}
	claim, err = env.Client.ResourceV1().ResourceClaims("team-a").UpdateStatus(ctx, claim, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("allocate claim: %v", err)
	}

	dra := drapb.NewDRAPluginClient(dial(t, endpoint))
	req := &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: "team-a", Name: "llm", Uid: string(claim.UID)}}}
	resp, err := dra.NodePrepareResources(ctx, req)
	if err != nil {
		t.Fatalf("NodePrepareResources: %v", err)
	}
	got := resp.Claims[string(claim.UID)]
	if got == nil || got.Error != "" || len(got.Devices) != 1 {
		t.Fatalf("prepare response %+v", resp)
	}
	wantCDI := fmt.Sprintf("gpu.gantry.dev/gpu=%s-gpu-2-%s", claim.UID, shareID)
	if d := got.Devices[0]; d.DeviceName != "gpu-2" || d.PoolName != nodeName || len(d.CdiDeviceIds) != 2 || d.CdiDeviceIds[0] != agent.CDICommonDeviceID || d.CdiDeviceIds[1] != wantCDI || ptr.Deref(d.ShareId, "") != string(shareID) {
		t.Errorf("prepared device %+v, want CDI id %s", d, wantCDI)
	}
	specPath := filepath.Join(k.cdiRoot, fmt.Sprintf("gpu.gantry.dev-%s.json", claim.UID))
	specBytes, err := os.ReadFile(specPath)
	if err != nil {
		t.Fatal(err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(specBytes, &spec); err != nil {
		t.Fatal(err)
	}
	cdiEnv := strings.Join(spec.Devices[0].ContainerEdits.Env, "\n")
	sfx := strings.ToUpper(strings.ReplaceAll(uuid2, "-", "_"))
	for _, want := range []string{agent.EnvMemoryBytesPrefix + sfx + "=21474836480", agent.EnvMemoryFractionPrefix + sfx + "="} {
		if !strings.Contains(cdiEnv, want) {
			t.Errorf("CDI env lacks %s:\n%s", want, cdiEnv)
		}
	}

	// Without --mps the share is not enforced, and the claim's status says
	// so in a form the API server accepts.
	if sfx := agent.EnvMemoryEnforcedPrefix + sfx + "=false"; !strings.Contains(cdiEnv, sfx) {
		t.Errorf("CDI env lacks %s:\n%s", sfx, cdiEnv)
	}
	withStatus, err := env.Client.ResourceV1().ResourceClaims("team-a").Get(ctx, "llm", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if ds := withStatus.Status.Devices; len(ds) != 1 || ds[0].Device != "gpu-2" || ptr.Deref(ds[0].ShareID, "") != string(shareID) ||
		len(ds[0].Conditions) != 1 || ds[0].Conditions[0].Type != agent.ConditionShareEnforced ||
		ds[0].Conditions[0].Status != metav1.ConditionFalse || !strings.HasPrefix(ds[0].Conditions[0].Message, "not enforced: ") {
		t.Errorf("claim status.devices %+v, want gpu-2 with %s=False, \"not enforced: ...\"", ds, agent.ConditionShareEnforced)
	}

	// Idempotent: the kubelet asks again.
	again, err := dra.NodePrepareResources(ctx, req)
	if err != nil || again.Claims[string(claim.UID)].Devices[0].CdiDeviceIds[1] != wantCDI {
		t.Fatalf("second prepare: %v %+v", err, again)
	}

	// Restart the agent: nothing may change.
	sliceBefore := nodeSlices(t, ctx, nodeName)[0]
	first.stop()
	second := k.startAgent(t, statusClient)
	endpoint = k.register(t, ctx)
	dra = drapb.NewDRAPluginClient(dial(t, endpoint))
	// The restarted agent knows the share from its checkpoint alone, before the kubelet asks again.
	if got := second.agent.Driver().Allocations(); len(got) != 1 || got[0].MemoryBytes != 20<<30 || got[0].UUID != uuid2 {
		t.Errorf("allocations after restart %+v", got)
	}
	afterRestart, err := dra.NodePrepareResources(ctx, req)
	if err != nil || afterRestart.Claims[string(claim.UID)].Error != "" || afterRestart.Claims[string(claim.UID)].Devices[0].CdiDeviceIds[1] != wantCDI {
		t.Fatalf("prepare after restart: %v %+v", err, afterRestart)
	}
	if b, _ := os.ReadFile(specPath); string(b) != string(specBytes) {
		t.Error("CDI spec changed across the restart")
	}
	time.Sleep(time.Second) // give a wrongly republishing agent time to show itself
	if s := nodeSlices(t, ctx, nodeName); len(s) != 1 || s[0].ResourceVersion != sliceBefore.ResourceVersion {
		t.Errorf("restart rewrote the ResourceSlice (resourceVersion %s -> %+v)", sliceBefore.ResourceVersion, s)
	}

	// An XID takes gpu-5 out: the slice is republished with a taint.
	second.fleet.GPUs[5].InjectXID(79)
	waitForSlice(t, ctx, nodeName, func(s resourceapi.ResourceSlice) bool {
		ts := s.Spec.Devices[5].Taints
		return len(ts) == 1 && ts[0].Key == names.TaintUnhealthy && ts[0].Value == "xid-79"
	})

	// Unprepare, twice.
	unreq := &drapb.NodeUnprepareResourcesRequest{Claims: req.Claims}
	for i := 0; i < 2; i++ {
		resp, err := dra.NodeUnprepareResources(ctx, unreq)
		if err != nil || resp.Claims[string(claim.UID)] == nil || resp.Claims[string(claim.UID)].Error != "" {
			t.Fatalf("unprepare #%d: %v %+v", i+1, err, resp)
		}
	}
	if _, err := os.Stat(specPath); !os.IsNotExist(err) {
		t.Error("CDI spec left after unprepare")
	}
	if got := second.agent.Driver().Allocations(); len(got) != 0 {
		t.Errorf("allocations after unprepare %+v", got)
	}
}
