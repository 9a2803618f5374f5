package e2e

import (
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/testenv"
)

// createTemplate creates a ResourceClaimTemplate whose claims have the given requests.
func createTemplate(t *testing.T, ns, name string, requests ...resourceapi.DeviceRequest) {
	t.Helper()
	tmpl := &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: requests,
		}}},
	}
	if _, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(context.Background(), tmpl, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// createDeviceClass creates, for the test, a DeviceClass selecting a driver's devices.
func createDeviceClass(t *testing.T, name, driver string) {
	t.Helper()
	dc := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", driver)},
		}}},
	}
	if _, err := env.Client.ResourceV1().DeviceClasses().Create(context.Background(), dc, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.ResourceV1().DeviceClasses().Delete(context.Background(), name, metav1.DeleteOptions{})
	})
}

// selectGPU is a request for one gpu.gantry.dev device that the CEL expression
// accepts.
func selectGPU(expr string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: names.DriverName,
		Selectors:       []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}},
	}}
}

// allocatedClaims lists the namespace's allocated claims.
func allocatedClaims(t *testing.T, ns string) []resourceapi.ResourceClaim {
	t.Helper()
	list, err := env.Client.ResourceV1().ResourceClaims(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var out []resourceapi.ResourceClaim
	for _, c := range list.Items {
		if c.Status.Allocation != nil {
			out = append(out, c)
		}
	}
	return out
}

// A claim whose CEL selector asks for one GPU model is allocated by the structured
// allocator on the node that has it, the GPUs it took are booked in the core (pods
// placed by count afterwards go elsewhere), and a claim that no device satisfies
// waits with a message that says so.
func TestDRASelectorPicksMatchingGPUs(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ensureDeviceClass(t)
	h100, l4 := gpuNode(ns+"-h100", 0, "", 0), gpuNode(ns+"-l4", 0, "", 0)
	createNodes(t, h100, l4)
	publishGPUs(t, h100.Name, 2, "NVIDIA H100 80GB HBM3", 80<<30)
	publishGPUs(t, l4.Name, 2, "NVIDIA L4", 24<<30)
	createTemplate(t, ns, "l4", selectGPU(`device.attributes["gpu.gantry.dev"].productName == "NVIDIA L4"`))
	var pods []*corev1.Pod
	for i := 0; i < 3; i++ {
		pods = append(pods, newPod(ns, fmt.Sprintf("l4-%d", i), withClaimTemplate("l4"), onTestNodes(t)))
	}
	createPods(t, pods...)
	got := waitPods(t, ns, 60*time.Second, "2 pods on the L4 node, 1 explained", func(ps []corev1.Pod) bool {
		return bound(ps) == 2 && running(ps) == 2 && strings.Contains(unschedulableMessage(ps, podLeftOut(ps)), "no devices that satisfy")
	})
	for _, p := range got {
		if p.Spec.NodeName != "" && p.Spec.NodeName != l4.Name {
			t.Errorf("pod %s bound to %s, want the L4 node %s", p.Name, p.Spec.NodeName, l4.Name)
		}
	}
	if msg := unschedulableMessage(got, podLeftOut(got)); !strings.Contains(msg, "no devices that satisfy the pod's ResourceClaims") {
		t.Errorf("left-out pod says %q, want it to say no devices satisfy its claims", msg)
	}
	devices := map[string]bool{}
	for _, c := range allocatedClaims(t, ns) {
		for _, r := range c.Status.Allocation.Devices.Results {
			if r.Pool != l4.Name {
				t.Errorf("claim %s got %s/%s, want a device of %s", c.Name, r.Pool, r.Device, l4.Name)
			}
			if devices[r.Device] {
				t.Errorf("device %s allocated twice", r.Device)
			}
			devices[r.Device] = true
		}
		if len(c.Status.ReservedFor) != 1 {
			t.Errorf("claim %s reserved for %v, want its pod", c.Name, c.Status.ReservedFor)
		}
	}
	if len(devices) != 2 {
		t.Errorf("%d L4 devices allocated, want 2", len(devices))
	}
	// gantry explain shows a bound pod's claim and its device.
	var boundPod string
	for _, p := range got {
		if p.Spec.NodeName != "" {
			boundPod = p.Name
		}
	}
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(bin, "gantry"), "explain", boundPod, "-n", ns, "--kubeconfig", env.Kubeconfig).CombinedOutput()
	if err != nil {
		t.Fatalf("gantry explain: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "ResourceClaims") || !strings.Contains(string(out), "allocated gpu.gantry.dev/"+l4.Name+"/gpu-") {
		t.Errorf("gantry explain does not show the pod's allocated claim:\n%s", out)
	}

	// Plain claims now: the L4 GPUs are taken, so they go to the H100 node, and a
	// third waits.
	if _, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, claimTemplate(ns, "any", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var plain []*corev1.Pod
	for i := 0; i < 3; i++ {
		plain = append(plain, newPod(ns, fmt.Sprintf("any-%d", i), withClaimTemplate("any"), onTestNodes(t)))
	}
	createPods(t, plain...)
	got = waitPods(t, ns, 60*time.Second, "2 plain pods on the H100 node", func(ps []corev1.Pod) bool {
		n := 0
		for _, p := range ps {
			if strings.HasPrefix(p.Name, "any-") && p.Spec.NodeName == h100.Name {
				n++
			}
		}
		return n == 2
	})
	holdPods(t, ns, 2*time.Second, "no GPU given twice", func(ps []corev1.Pod) bool {
		return bound(ps) == 4
	})
}

// A claim that also asks for a device of another driver (a NIC here, through its
// own DeviceClass) goes to the node that has one, gets both devices in one
// allocation, and a second such claim waits while the only NIC is taken.
func TestDRAOtherDriverDevicesAreAllocated(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ensureDeviceClass(t)
	const nicDriver = "nic.example.com"
	createDeviceClass(t, nicDriver, nicDriver)
	a, b := gpuNode(ns+"-a", 0, "", 0), gpuNode(ns+"-b", 0, "", 0)
	createNodes(t, a, b)
	publishGPUs(t, a.Name, 4, "NVIDIA H100 80GB HBM3", 80<<30)
	publishGPUs(t, b.Name, 4, "NVIDIA H100 80GB HBM3", 80<<30)
	nics := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: b.Name + "-nic"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   nicDriver,
			NodeName: ptr.To(b.Name),
			Pool:     resourceapi.ResourcePool{Name: b.Name, ResourceSliceCount: 1},
			Devices:  []resourceapi.Device{{Name: "nic-0"}},
		},
	}
	if _, err := env.Client.ResourceV1().ResourceSlices().Create(ctx, nics, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = env.Client.ResourceV1().ResourceSlices().Delete(context.Background(), nics.Name, metav1.DeleteOptions{})
	})
	createTemplate(t, ns, "gpu-and-nic",
		resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: names.DriverName}},
		resourceapi.DeviceRequest{Name: "nic", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: nicDriver}},
	)
	createPods(t,
		newPod(ns, "x", withClaimTemplate("gpu-and-nic"), onTestNodes(t)),
		newPod(ns, "y", withClaimTemplate("gpu-and-nic"), onTestNodes(t)),
	)
	got := waitPods(t, ns, 60*time.Second, "one pod on the NIC node, one explained", func(ps []corev1.Pod) bool {
		return bound(ps) == 1 && running(ps) == 1 && unschedulableMessage(ps, podLeftOut(ps)) != ""
	})
	for _, p := range got {
		if p.Spec.NodeName != "" && p.Spec.NodeName != b.Name {
			t.Errorf("pod %s bound to %s, want %s, the node with the NIC", p.Name, p.Spec.NodeName, b.Name)
		}
	}
	claims := allocatedClaims(t, ns)
	if len(claims) != 1 {
		t.Fatalf("%d claims allocated, want 1", len(claims))
	}
	drivers := map[string]string{}
	for _, r := range claims[0].Status.Allocation.Devices.Results {
		drivers[r.Driver] = r.Pool + "/" + r.Device
	}
	if drivers[nicDriver] != b.Name+"/nic-0" || !strings.HasPrefix(drivers[names.DriverName], b.Name+"/gpu-") {
		t.Errorf("allocation %v, want a GPU and nic-0 of %s", drivers, b.Name)
	}
	holdPods(t, ns, 2*time.Second, "the second pod waits for the NIC", func(ps []corev1.Pod) bool { return bound(ps) == 1 })

	// When the first pod goes, its claim is deallocated by kube-controller-manager
	// and the NIC passes to the second.
	first := got[0].Name
	if got[0].Spec.NodeName == "" {
		first = got[1].Name
	}
	grace := int64(0)
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, first, metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	waitPods(t, ns, 60*time.Second, "the second pod bound once the NIC is free", func(ps []corev1.Pod) bool {
		return len(ps) == 1 && bound(ps) == 1 && ps[0].Spec.NodeName == b.Name
	})
}

// A claim the allocator refuses as invalid (its DeviceClass does not exist) holds
// the pod back with the allocator's words, until the class is created.
func TestDRAMissingDeviceClassIsExplained(t *testing.T) {
	requireEnv(t)
	ns := namespace(t)
	ensureDeviceClass(t)
	a := gpuNode(ns+"-a", 0, "", 0)
	createNodes(t, a)
	publishGPUs(t, a.Name, 1, "NVIDIA H100 80GB HBM3", 80<<30)
	createTemplate(t, ns, "nowhere", resourceapi.DeviceRequest{Name: "dev", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: "no-such-class.example.com"}})
	createPods(t, newPod(ns, "p", withClaimTemplate("nowhere"), onTestNodes(t)))
	waitPods(t, ns, 60*time.Second, "pod told its DeviceClass is missing", func(ps []corev1.Pod) bool {
		return len(ps) == 1 && strings.Contains(unschedulableMessage(ps, "p"), "no-such-class.example.com")
	})
	// Once the class exists (selecting the GPUs), the pod is scheduled.
	createDeviceClass(t, "no-such-class.example.com", names.DriverName)
	waitPods(t, ns, 60*time.Second, "pod bound once its DeviceClass exists", func(ps []corev1.Pod) bool { return bound(ps) == 1 })
}

// GPUs that another scheduler gave a pod through its claims are taken: Gantry does
// not place its own pods on them.
func TestDRAClaimsOfOtherSchedulersCountAsUsed(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ensureDeviceClass(t)
	a := gpuNode(ns+"-a", 0, "", 0)
	createNodes(t, a)
	publishGPUs(t, a.Name, 2, "NVIDIA H100 80GB HBM3", 80<<30)
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "theirs"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: names.DriverName, Count: 2},
		}}}},
	}
	claim, err := env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// A pod placed by someone else: bound by nodeName, its claim allocated by them.
	theirs := newPod(ns, "theirs", withScheduler("default-scheduler"), onTestNodes(t), func(p *corev1.Pod) {
		p.Spec.NodeName = a.Name
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("theirs")}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	})
	createPods(t, theirs)
	pod, err := env.Client.CoreV1().Pods(ns).Get(ctx, "theirs", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	claim.Status.Allocation = &resourceapi.AllocationResult{
		Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{
			{Request: "gpu", Driver: names.DriverName, Pool: a.Name, Device: dra.DeviceName(0)},
			{Request: "gpu", Driver: names.DriverName, Pool: a.Name, Device: dra.DeviceName(1)},
		}},
		NodeSelector: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{a.Name}}},
		}}},
	}
	claim.Status.ReservedFor = []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: pod.Name, UID: pod.UID}}
	if _, err := env.Client.ResourceV1().ResourceClaims(ns).UpdateStatus(ctx, claim, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, claimTemplate(ns, "one", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPods(t, newPod(ns, "ours", withClaimTemplate("one"), onTestNodes(t)))
	// (Until kwok reports the node ready, the message is about its not-ready taint.)
	waitPods(t, ns, 60*time.Second, "our pod told the GPUs are taken", func(ps []corev1.Pod) bool {
		return strings.Contains(unschedulableMessage(ps, "ours"), "insufficient free GPUs")
	})
	holdPods(t, ns, 2*time.Second, "our pod stays pending", func(ps []corev1.Pod) bool { return bound(ps) == 1 })
}

// Inference whose claim selects H100s preempts training that holds the only H100s,
// although free L4s exist: the preemption search starts from the devices the
// allocator would give were the preemptible pods gone.
func TestDRASelectorClaimPreemptsTraining(t *testing.T) {
	requireEnv(t)
	ns := namespace(t)
	ensureDeviceClass(t)
	applyPriorityClasses(t)
	h100, l4 := gpuNode(ns+"-h100", 0, "", 0), gpuNode(ns+"-l4", 0, "", 0)
	createNodes(t, h100, l4)
	publishGPUs(t, h100.Name, 2, "NVIDIA H100 80GB HBM3", 80<<30)
	publishGPUs(t, l4.Name, 2, "NVIDIA L4", 24<<30)
	createTemplate(t, ns, "h100", selectGPU(`device.attributes["gpu.gantry.dev"].productName.startsWith("NVIDIA H100")`))
	class := func(c string) podOpt { return func(p *corev1.Pod) { p.Spec.PriorityClassName = c } }
	gangOf := func(group string, n int) podOpt {
		return withAnnotations(names.AnnotationPodGroup, group, names.AnnotationMinMember, fmt.Sprint(n))
	}
	createPods(t,
		newPod(ns, "train-0", withClaimTemplate("h100"), onTestNodes(t), class("train"), gangOf("train", 2)),
		newPod(ns, "train-1", withClaimTemplate("h100"), onTestNodes(t), class("train"), gangOf("train", 2)),
	)
	waitPods(t, ns, 60*time.Second, "training on both H100s", func(ps []corev1.Pod) bool {
		return bound(ps) == 2 && ps[0].Spec.NodeName == h100.Name && ps[1].Spec.NodeName == h100.Name
	})
	createPods(t, newPod(ns, "serve", withClaimTemplate("h100"), onTestNodes(t), class("inference")))
	got := waitPods(t, ns, 60*time.Second, "inference bound on the H100 node, training gone whole", func(ps []corev1.Pod) bool {
		return len(ps) == 1 && ps[0].Name == "serve" && ps[0].Spec.NodeName == h100.Name
	})
	_ = got
	victimsOf := func(es []corev1.Event) map[string]bool {
		victims := map[string]bool{}
		for _, e := range es {
			victims[e.InvolvedObject.Name] = true
		}
		return victims
	}
	events := waitEvents(t, ns, "reason=Preempted", 60*time.Second, "Preempted Events on train-0 and train-1", func(es []corev1.Event) bool {
		v := victimsOf(es)
		return v["train-0"] && v["train-1"]
	})
	if victims := victimsOf(events); len(victims) != 2 {
		t.Errorf("Preempted events for %v, want train-0 and train-1", victims)
	}
}

// Memory shares through the structured allocator (a selector and a capacity request):
// the allocator's consumable capacity decides how many fit on a GPU, each share gets
// its own share id, and the core books the shares so no GPU is given more than its
// memory.
func TestDRASelectorMemorySharesAreConsumableCapacity(t *testing.T) {
	requireEnv(t)
	ns := namespace(t)
	ensureDeviceClass(t)
	a := gpuNode(ns+"-a", 0, "", 0)
	createNodes(t, a)
	publishGPUs(t, a.Name, 1, "NVIDIA L4", 24<<30)
	share := selectGPU(`device.attributes["gpu.gantry.dev"].productName == "NVIDIA L4"`)
	share.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("10Gi")}}
	createTemplate(t, ns, "l4-10gi", share)
	var pods []*corev1.Pod
	for i := 0; i < 3; i++ {
		pods = append(pods, newPod(ns, fmt.Sprintf("s%d", i), withClaimTemplate("l4-10gi"), onTestNodes(t)))
	}
	createPods(t, pods...)
	// A 24Gi GPU holds two 10Gi shares; the third waits.
	waitPods(t, ns, 60*time.Second, "2 shares bound, 1 explained", func(ps []corev1.Pod) bool {
		return bound(ps) == 2 && unschedulableMessage(ps, podLeftOut(ps)) != ""
	})
	holdPods(t, ns, 2*time.Second, "the third share waits", func(ps []corev1.Pod) bool { return bound(ps) == 2 })
	shareIDs := map[string]bool{}
	var consumed int64
	for _, c := range allocatedClaims(t, ns) {
		for _, r := range c.Status.Allocation.Devices.Results {
			q := r.ConsumedCapacity["memory"]
			if r.ShareID == nil || q.Value() != 10<<30 {
				t.Errorf("claim %s: share id %v, consumed %s; want a share id and 10Gi", c.Name, r.ShareID, q.String())
				continue
			}
			if shareIDs[string(*r.ShareID)] {
				t.Errorf("share id %s given twice", *r.ShareID)
			}
			shareIDs[string(*r.ShareID)] = true
			consumed += q.Value()
		}
	}
	if len(shareIDs) != 2 || consumed != 20<<30 {
		t.Errorf("%d shares, %d bytes consumed; want 2 and 20Gi", len(shareIDs), consumed)
	}
}

// One ResourceClaim named by two pods: the second goes where the first's claim was
// allocated, both are reserved, and the GPU is booked once, also after its first pod
// is gone.
func TestDRASharedClaimIsBookedOnce(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ensureDeviceClass(t)
	a, b := gpuNode(ns+"-a", 0, "", 0), gpuNode(ns+"-b", 0, "", 0)
	createNodes(t, a, b)
	publishGPUs(t, a.Name, 2, "NVIDIA H100 80GB HBM3", 80<<30)
	publishGPUs(t, b.Name, 1, "NVIDIA H100 80GB HBM3", 80<<30)
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "shared"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{
			Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: names.DriverName},
		}}}},
	}
	if _, err := env.Client.ResourceV1().ResourceClaims(ns).Create(ctx, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	useShared := func(p *corev1.Pod) {
		p.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared")}}
		p.Spec.Containers[0].Resources.Claims = []corev1.ResourceClaim{{Name: "gpu"}}
	}
	createPods(t, newPod(ns, "first", useShared, onTestNodes(t)))
	got := waitPods(t, ns, 60*time.Second, "first pod bound", func(ps []corev1.Pod) bool { return bound(ps) == 1 })
	node := got[0].Spec.NodeName
	createPods(t, newPod(ns, "second", useShared, onTestNodes(t)))
	waitPods(t, ns, 60*time.Second, "second pod bound beside the first", func(ps []corev1.Pod) bool {
		return bound(ps) == 2 && ps[0].Spec.NodeName == ps[1].Spec.NodeName
	})
	c, err := env.Client.ResourceV1().ResourceClaims(ns).Get(ctx, "shared", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Status.ReservedFor) != 2 || len(c.Status.Allocation.Devices.Results) != 1 {
		t.Fatalf("claim reserved for %v with %d devices, want both pods and 1 device", c.Status.ReservedFor, len(c.Status.Allocation.Devices.Results))
	}
	// Three GPUs, one held by the shared claim: two more whole-GPU pods fit, a third
	// does not.
	if _, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, claimTemplate(ns, "one", ""), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	createPods(t,
		newPod(ns, "w0", withClaimTemplate("one"), onTestNodes(t)),
		newPod(ns, "w1", withClaimTemplate("one"), onTestNodes(t)),
		newPod(ns, "w2", withClaimTemplate("one"), onTestNodes(t)),
	)
	waitPods(t, ns, 60*time.Second, "two more bound, the third told no GPU is free", func(ps []corev1.Pod) bool {
		return bound(ps) == 4 && strings.Contains(unschedulableMessage(ps, podLeftOut(ps)), "insufficient free GPUs")
	})
	// The first pod goes; the second still holds the shared GPU.
	grace := int64(0)
	if err := env.Client.CoreV1().Pods(ns).Delete(ctx, "first", metav1.DeleteOptions{GracePeriodSeconds: &grace}); err != nil {
		t.Fatal(err)
	}
	holdPods(t, ns, 3*time.Second, "the third still waits", func(ps []corev1.Pod) bool {
		for _, p := range ps {
			if p.Name == "first" {
				return true // not gone yet
			}
		}
		return bound(ps) == 3
	})
	_ = node
}

// A gang whose members claim through different templates that the same GPUs satisfy
// fits on one node with just enough GPUs: the members are offered different GPUs.
func TestDRAGangOfDifferentClaimsFitsOneNode(t *testing.T) {
	requireEnv(t)
	ns := namespace(t)
	ensureDeviceClass(t)
	a := gpuNode(ns+"-a", 0, "", 0)
	createNodes(t, a)
	publishGPUs(t, a.Name, 2, "NVIDIA H100 80GB HBM3", 80<<30)
	createTemplate(t, ns, "by-model", selectGPU(`device.attributes["gpu.gantry.dev"].productName.startsWith("NVIDIA H100")`))
	createTemplate(t, ns, "by-index", selectGPU(`device.attributes["gpu.gantry.dev"].index >= 0`))
	gang := withAnnotations(names.AnnotationPodGroup, "g", names.AnnotationMinMember, "2")
	createPods(t,
		newPod(ns, "head", withClaimTemplate("by-model"), onTestNodes(t), gang),
		newPod(ns, "worker", withClaimTemplate("by-index"), onTestNodes(t), gang),
	)
	waitPods(t, ns, 60*time.Second, "both members bound", func(ps []corev1.Pod) bool { return bound(ps) == 2 })
	devices := map[string]bool{}
	for _, c := range allocatedClaims(t, ns) {
		devices[c.Status.Allocation.Devices.Results[0].Device] = true
	}
	if len(devices) != 2 {
		t.Errorf("devices allocated: %v, want the node's two GPUs", devices)
	}
}
