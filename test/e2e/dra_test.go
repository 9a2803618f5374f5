package e2e

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/names"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
)

// publishGPUs publishes a node's GPUs as the node agent does: one device per GPU with
// its memory as consumable capacity, shareable.
func publishGPUs(t *testing.T, node string, gpus int, product string, memBytes int64) {
	t.Helper()
	var devices []resourceapi.Device
	for i := 0; i < gpus; i++ {
		total := resource.NewQuantity(memBytes, resource.BinarySI)
		devices = append(devices, resourceapi.Device{
			Name: dra.DeviceName(i),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
				"index":       {IntValue: ptr.To(int64(i))},
				"uuid":        {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", node, i))},
				"productName": {StringValue: ptr.To(product)},
			},
			Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
				"memory": {Value: *total, RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: total}},
			},
			AllowMultipleAllocations: ptr.To(true),
		})
	}
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu.gantry.dev"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver:   names.DriverName,
			NodeName: ptr.To(node),
			Pool:     resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1},
			Devices:  devices,
		},
	}
	if _, err := env.Client.ResourceV1().ResourceSlices().Create(context.Background(), slice, metav1.CreateOptions{}); err != nil {
		t.Fatalf("publish slice: %v", err)
	}
	t.Cleanup(func() {
		_ = env.Client.ResourceV1().ResourceSlices().Delete(context.Background(), slice.Name, metav1.DeleteOptions{})
	})
}

func ensureDeviceClass(t *testing.T) {
	t.Helper()
	dc := &resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: names.DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.gantry.dev"`},
		}}},
	}
	_, _ = env.Client.ResourceV1().DeviceClasses().Create(context.Background(), dc, metav1.CreateOptions{})
}

func claimTemplate(ns, name string, memory string) *resourceapi.ResourceClaimTemplate {
	req := resourceapi.ExactDeviceRequest{DeviceClassName: names.DriverName}
	if memory != "" {
		req.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse(memory)}}
	}
	return &resourceapi.ResourceClaimTemplate{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name},
		Spec: resourceapi.ResourceClaimTemplateSpec{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{
			Requests: []resourceapi.DeviceRequest{{Name: "gpu", Exactly: &req}},
		}}},
	}
}

func withClaimTemplate(template string) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.ResourceClaims = append(p.Spec.ResourceClaims, corev1.PodResourceClaim{Name: "gpu", ResourceClaimTemplateName: ptr.To(template)})
		p.Spec.Containers[0].Resources.Claims = append(p.Spec.Containers[0].Resources.Claims, corev1.ResourceClaim{Name: "gpu"})
	}
}

// Pods take 20Gi shares of GPUs through ResourceClaimTemplates: gantry allocates each
// claim (device and consumed memory) before binding, and no GPU is ever given more
// than its memory.
func TestDRAMemorySharesAreAllocatedAndBound(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	ns := namespace(t)
	ensureDeviceClass(t)
	node := gpuNode(ns+"-a", 0, "", 0)
	createNodes(t, node)
	const gpuMemory = 80 << 30
	publishGPUs(t, node.Name, 2, "NVIDIA H100 80GB HBM3", gpuMemory)
	if _, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Create(ctx, claimTemplate(ns, "share-20gi", "20Gi"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var pods []*corev1.Pod
	for i := 0; i < 9; i++ {
		pods = append(pods, newPod(ns, fmt.Sprintf("s%d", i), withClaimTemplate("share-20gi"), onTestNodes(t)))
	}
	createPods(t, pods...)
	// Two 80Gi GPUs hold eight 20Gi shares; the ninth waits.
	got := waitPods(t, ns, 60*time.Second, "8 shares bound, 1 explained", func(ps []corev1.Pod) bool {
		return bound(ps) == 8 && running(ps) == 8 && unschedulableMessage(ps, podLeftOut(ps)) != ""
	})
	claims, err := env.Client.ResourceV1().ResourceClaims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	perDevice := map[string]int64{}
	allocated := 0
	for _, c := range claims.Items {
		if c.Status.Allocation == nil {
			continue
		}
		allocated++
		if len(c.Status.ReservedFor) != 1 {
			t.Errorf("claim %s reserved for %v, want its one pod", c.Name, c.Status.ReservedFor)
		}
		for _, r := range c.Status.Allocation.Devices.Results {
			q := r.ConsumedCapacity["memory"]
			if q.Value() != 20<<30 {
				t.Errorf("claim %s consumes %s of %s, want 20Gi", c.Name, q.String(), r.Device)
			}
			perDevice[r.Device] += q.Value()
		}
	}
	if allocated != 8 {
		t.Errorf("%d claims allocated, want 8", allocated)
	}
	for dev, used := range perDevice {
		if used > gpuMemory {
			t.Errorf("device %s given %d bytes, has %d", dev, used, gpuMemory)
		}
	}
	_ = got
}
