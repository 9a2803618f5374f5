package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	drapb "k8s.io/kubelet/pkg/apis/dra/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/pkg/agent"
	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/webhook"
)

// A pod with KAI's gantry.dev/gpu-memory annotation, through the pod webhook with
// annotation-share claims on: the real API server accepts the template the webhook
// creates and the pod it patches; the claim made from that template (here by the
// test, as kube-controller-manager does), once allocated, is prepared by the agent
// like any share, so the pod's container gets the GPU's device node and its share.
func TestAnnotationShareReachesTheAgent(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	ctx := context.Background()
	const nodeName, ns = "gpu-node-ann", "team-ann"
	// The agent runs on the node and publishes its GPUs, whose sizes the webhook reads.
	k, running, plugin := agentOnNewNode(t, ctx, nodeName, ns)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	admitThroughWebhook(t, ctx, dyn, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm", Annotations: map[string]string{names.AnnotationGPUMemory: "20480"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "serve", Image: "vllm"}}},
	})
	tmplName := webhook.ShareTemplateName(20 << 30)
	tmpl, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, tmplName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("template: %v", err)
	}
	// A second pod of the same size reuses the template.
	if err := webhook.DynamicTemplateEnsurer(dyn)(ctx, webhook.ShareTemplate(ns, 20<<30)); err != nil {
		t.Fatalf("ensuring an existing template: %v", err)
	}

	// kube-controller-manager's part: the pod's claim from the template.
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "llm-" + webhook.ShareClaimRef}, Spec: tmpl.Spec.Spec}
	if claim, err = env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The scheduler's part: a share of gpu-3.
	shareID := types.UID("5d0c1e2f-0000-4000-8000-000000000003")
	claim.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
			Request: "gpu", Driver: names.DriverName, Pool: nodeName, Device: "gpu-3", ShareID: &shareID,
			ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{names.MemoryCapacity: resource.MustParse("20Gi")},
		}}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchFields: []corev1.NodeSelectorRequirement{{
			Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{nodeName}}}}}},
	}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "llm", UID: "11111111-2222-3333-4444-666666666666"}}
	if claim, err = env.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("allocate: %v", err)
	}

	// The agent's part.
	prep, err := plugin.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: ns, Name: claim.Name, Uid: string(claim.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	got := prep.Claims[string(claim.UID)]
	if got == nil || got.Error != "" || len(got.Devices) != 1 || got.Devices[0].DeviceName != "gpu-3" {
		t.Fatalf("prepare %+v", prep)
	}
	specBytes, err := os.ReadFile(filepath.Join(k.cdiRoot, fmt.Sprintf("%s-%s.json", names.DriverName, claim.UID)))
	if err != nil {
		t.Fatal(err)
	}
	spec := string(specBytes)
	uuid3 := running.fleet.GPUs[3].UUID()
	sfx := strings.ToUpper(strings.ReplaceAll(uuid3, "-", "_"))
	for _, want := range []string{`"/dev/nvidia3"`, agent.EnvMemoryBytesPrefix + sfx + "=21474836480"} {
		if !strings.Contains(spec, want) {
			t.Errorf("the share's CDI spec lacks %s:\n%s", want, spec)
		}
	}
}

// classes serves DeviceClasses to the structured allocator.
type classes map[string]*resourceapi.DeviceClass

func (l classes) List() ([]*resourceapi.DeviceClass, error) {
	var out []*resourceapi.DeviceClass
	for _, c := range l {
		out = append(out, c)
	}
	return out, nil
}

func (l classes) Get(name string) (*resourceapi.DeviceClass, error) {
	if c, ok := l[name]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("no DeviceClass %s", name)
}

// A pod with KAI's gantry.dev/gpu-fraction, end to end: the webhook reads the GPU
// sizes from the ResourceSlices the agent published on the real API server and
// creates a template with one subrequest per size, which the API server accepts
// (CEL selectors included); the structured allocator, over those slices, picks the
// subrequest of this node's H100 and consumes a quarter of it; the agent prepares
// that quarter for the container.
func TestFractionAnnotationReachesTheAgent(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	ctx := context.Background()
	const nodeName, ns = "gpu-node-frac", "team-frac"
	k, running, plugin := agentOnNewNode(t, ctx, nodeName, ns)
	node, err := env.Client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	own := waitForSlice(t, ctx, nodeName, func(s resourceapi.ResourceSlice) bool { return len(s.Spec.Devices) == 8 })
	h100 := own.Spec.Devices[0].Capacity[names.MemoryCapacity].Value

	// The webhook's part, reading the sizes from the API server.
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	patched := admitThroughWebhook(t, ctx, dyn, &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quarter", Annotations: map[string]string{names.AnnotationGPUFraction: "0.25"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "serve", Image: "vllm"}}},
	})
	tmplName := *patched.Spec.ResourceClaims[0].ResourceClaimTemplateName
	tmpl, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, tmplName, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("template: %v", err)
	}

	// kube-controller-manager's part, then the scheduler's: the structured
	// allocator over the slices and DeviceClass on the API server.
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "quarter-" + webhook.ShareClaimRef}, Spec: tmpl.Spec.Spec}
	if claim, err = env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	results := allocateOn(t, ctx, node, claim)
	res := results[0].Devices.Results[0]
	quarter := h100.Value() / 4 >> 20 << 20
	if got := res.ConsumedCapacity[names.MemoryCapacity]; res.Pool != nodeName || res.Request != fmt.Sprintf("gpu/mib-%d", h100.Value()>>20) || got.Value() != quarter {
		t.Fatalf("allocated %+v (consumed %s), want a quarter of an H100 (%d bytes) on %s", res, got.String(), quarter, nodeName)
	}
	claim.Status.Allocation = &results[0]
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "quarter", UID: "11111111-2222-3333-4444-777777777777"}}
	if claim, err = env.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("the API server refuses the allocation: %v", err)
	}

	// The agent's part.
	prep, err := plugin.NodePrepareResources(ctx, &drapb.NodePrepareResourcesRequest{Claims: []*drapb.Claim{{Namespace: ns, Name: claim.Name, Uid: string(claim.UID)}}})
	if err != nil {
		t.Fatal(err)
	}
	got := prep.Claims[string(claim.UID)]
	if got == nil || got.Error != "" || len(got.Devices) != 1 || got.Devices[0].DeviceName != res.Device {
		t.Fatalf("prepare %+v", prep)
	}
	specBytes, err := os.ReadFile(filepath.Join(k.cdiRoot, fmt.Sprintf("%s-%s.json", names.DriverName, claim.UID)))
	if err != nil {
		t.Fatal(err)
	}
	index, err := dra.DeviceIndex(res.Device)
	if err != nil {
		t.Fatal(err)
	}
	sfx := strings.ToUpper(strings.ReplaceAll(running.fleet.GPUs[index].UUID(), "-", "_"))
	for _, want := range []string{fmt.Sprintf(`"/dev/nvidia%d"`, index), fmt.Sprintf("%s%s=%d", agent.EnvMemoryBytesPrefix, sfx, quarter)} {
		if !strings.Contains(string(specBytes), want) {
			t.Errorf("the share's CDI spec lacks %s:\n%s", want, specBytes)
		}
	}
}

// agentOnNewNode creates node and namespace ns (with its default ServiceAccount: no
// kube-controller-manager here makes it), starts an agent on the node with a DGX
// H100 fleet, registers it as the kubelet would, and waits for its ResourceSlice.
func agentOnNewNode(t *testing.T, ctx context.Context, nodeName, ns string) (*kubeletSim, *runningAgent, drapb.DRAPluginClient) {
	t.Helper()
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: nodeName}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scheme := runtime.NewScheme()
	_ = clientgoscheme.AddToScheme(scheme)
	_ = gpuv1alpha1.AddToScheme(scheme)
	statusClient, err := client.New(env.Config, client.Options{Scheme: scheme})
	if err != nil {
		t.Fatal(err)
	}
	base := t.TempDir()
	k := &kubeletSim{nodeName: nodeName, pluginDir: filepath.Join(base, "plugins", names.DriverName),
		registryDir: filepath.Join(base, "registry"), cdiRoot: filepath.Join(base, "cdi")}
	running := k.startAgent(t, statusClient)
	plugin := drapb.NewDRAPluginClient(dial(t, k.register(t, ctx)))
	waitForSlice(t, ctx, nodeName, func(s resourceapi.ResourceSlice) bool { return len(s.Spec.Devices) == 8 })
	return k, running, plugin
}

// admitThroughWebhook sends pod through the pod webhook with annotation-share
// claims on (sizes and templates through the real API server), applies its patch
// and creates the pod, which the API server must accept.
func admitThroughWebhook(t *testing.T, ctx context.Context, dyn dynamic.Interface, pod *corev1.Pod) *corev1.Pod {
	t.Helper()
	raw, _ := json.Marshal(pod)
	defaulter := webhook.PodDefaulter{Templates: webhook.DynamicTemplateEnsurer(dyn), Sizes: webhook.DynamicGPUSizes(dyn, 0)}
	resp := defaulter.Review(ctx, &admissionv1.AdmissionRequest{Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Operation: admissionv1.Create, Namespace: pod.Namespace, Object: runtime.RawExtension{Raw: raw}})
	if !resp.Allowed || len(resp.Patch) == 0 {
		t.Fatalf("webhook: allowed %v, patch %s, warnings %v", resp.Allowed, resp.Patch, resp.Warnings)
	}
	patch, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = patch.Apply(raw); err != nil {
		t.Fatal(err)
	}
	var patched corev1.Pod
	if err := json.Unmarshal(raw, &patched); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Pods(pod.Namespace).Create(ctx, &patched, metav1.CreateOptions{}); err != nil {
		t.Fatalf("the API server refuses the patched pod: %v", err)
	}
	return &patched
}

// allocateOn runs the structured allocator, as kube-scheduler and Gantry do, for
// claim on node, over the ResourceSlices and DeviceClass on the API server.
func allocateOn(t *testing.T, ctx context.Context, node *corev1.Node, claim *resourceapi.ResourceClaim) []resourceapi.AllocationResult {
	t.Helper()
	sliceList, err := env.Client.ResourceV1().ResourceSlices().List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var slices []*resourceapi.ResourceSlice
	for i := range sliceList.Items {
		slices = append(slices, &sliceList.Items[i])
	}
	class, err := env.Client.ResourceV1().DeviceClasses().Get(ctx, names.DriverName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	alloc, err := structured.NewAllocator(ctx, structured.Features{ConsumableCapacity: true, PrioritizedList: true, DeviceTaints: true, PartitionableDevices: true},
		structured.AllocatedState{AllocatedDevices: sets.New[structured.DeviceID](), AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
			AggregatedCapacity: structured.NewConsumedCapacityCollection()},
		classes{names.DriverName: class}, slices, cel.NewCache(10, cel.Features{EnableConsumableCapacity: true}))
	if err != nil {
		t.Fatal(err)
	}
	results, err := alloc.Allocate(ctx, node, []*resourceapi.ResourceClaim{claim})
	if err != nil || len(results) != 1 || len(results[0].Devices.Results) != 1 {
		t.Fatalf("allocate: %v %+v", err, results)
	}
	return results
}
