package cache

import (
	"context"
	"fmt"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

const testScheduler = "gantry-scheduler"

// draCluster is a Cache fed as the informers would: nodes whose GPUs are published
// as gpu.gantry.dev ResourceSlices, and the DeviceClass.
func draCluster(t testing.TB, nodes, gpus int, product func(node int) string) *Cache {
	t.Helper()
	c := New([]string{testScheduler}, &gang.StaticLookup{}, "")
	c.UpsertDeviceClass(&resourceapi.DeviceClass{
		ObjectMeta: metav1.ObjectMeta{Name: names.DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{
			CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.gantry.dev"`},
		}}},
	})
	for i := 0; i < nodes; i++ {
		name := fmt.Sprintf("node-%04d", i)
		capacity := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110"),
		}
		c.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity}})
		var devices []resourceapi.Device
		for g := 0; g < gpus; g++ {
			total := resource.NewQuantity(80<<30, resource.BinarySI)
			devices = append(devices, resourceapi.Device{
				Name: dra.DeviceName(g),
				Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
					"index":       {IntValue: ptr.To(int64(g))},
					"uuid":        {StringValue: ptr.To(fmt.Sprintf("GPU-%s-%d", name, g))},
					"productName": {StringValue: ptr.To(product(i))},
				},
				Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
					"memory": {Value: *total, RequestPolicy: &resourceapi.CapacityRequestPolicy{Default: total}},
				},
				AllowMultipleAllocations: ptr.To(true),
			})
		}
		c.UpsertSlice(&resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: name + "-gpu"},
			Spec: resourceapi.ResourceSliceSpec{
				Driver: names.DriverName, NodeName: ptr.To(name), Pool: resourceapi.ResourcePool{Name: name, ResourceSliceCount: 1}, Devices: devices,
			},
		})
	}
	return c
}

// addClaimPod adds a pending pod with its own claim of the given requests.
func addClaimPod(c *Cache, name string, requests ...resourceapi.DeviceRequest) {
	addGangClaimPod(c, name, nil, requests...)
}

// addGangClaimPod is addClaimPod with annotations (a gang's, say).
func addGangClaimPod(c *Cache, name string, annotations map[string]string, requests ...resourceapi.DeviceRequest) {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-gpu"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: requests}},
	}
	c.UpsertClaim(claim)
	c.UpsertPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), Annotations: annotations},
		Spec: corev1.PodSpec{
			SchedulerName:  testScheduler,
			Containers:     []corev1.Container{{Name: "c"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}},
		},
	})
}

func selectorRequest(expr string) resourceapi.DeviceRequest {
	return resourceapi.DeviceRequest{Name: "gpu", Exactly: &resourceapi.ExactDeviceRequest{
		DeviceClassName: names.DriverName,
		AllocationMode:  resourceapi.DeviceAllocationModeExactCount, Count: 1, // as the API server defaults them
		Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}},
	}}
}

// chooseNow runs one cycle's device choice and returns the snapshot's pods.
func chooseNow(c *Cache) map[model.PodID]*model.Pod {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.chooseDevices(context.Background(), nil)
	return c.snap.Pods
}

// BenchmarkChooseDevices is one cycle's structured allocation for 2,000 pending
// pods whose claims select a GPU model, on 500 nodes × 8 GPUs.
func BenchmarkChooseDevices(b *testing.B) {
	c := draCluster(b, 500, 8, func(int) string { return "NVIDIA H100 80GB HBM3" })
	for i := 0; i < 2000; i++ {
		addClaimPod(c, fmt.Sprintf("p%04d", i), selectorRequest(`device.attributes["gpu.gantry.dev"].productName == "NVIDIA H100 80GB HBM3"`))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		chooseNow(c)
	}
}

// Only nodes with a device the selector accepts qualify.
func TestChooseDevicesHonoursSelectors(t *testing.T) {
	c := draCluster(t, 4, 2, func(i int) string {
		if i%2 == 0 {
			return "NVIDIA H100 80GB HBM3"
		}
		return "NVIDIA L4"
	})
	addClaimPod(c, "l4", selectorRequest(`device.attributes["gpu.gantry.dev"].productName == "NVIDIA L4"`))
	addClaimPod(c, "a100", selectorRequest(`device.attributes["gpu.gantry.dev"].productName == "NVIDIA A100"`))
	addClaimPod(c, "bad", selectorRequest(`device.attributes["gpu.gantry.dev"].nosuchattribute == "x"`))
	pods := chooseNow(c)
	if got := pods["ns/l4"].DeviceChoices; len(got) != 2 || got["node-0001"] == nil || got["node-0003"] == nil {
		t.Errorf("L4 pod may go to %v, want node-0001 and node-0003", got)
	}
	if got := pods["ns/a100"].DeviceChoices; got == nil || len(got) != 0 {
		t.Errorf("A100 pod may go to %v, want no node", got)
	}
	if msg := c.podErrors["ns/bad"]; !strings.Contains(msg, "ResourceClaims cannot be allocated") {
		t.Errorf("pod with a CEL type error: %q, want the allocator's error", msg)
	}
}

// Pods alike (one template) get different GPUs of one node, so a gang of them fits
// on the node, and the allocator is asked once per level, not once per pod.
func TestChooseDevicesGivesAlikePodsDifferentGPUs(t *testing.T) {
	c := draCluster(t, 1, 8, func(int) string { return "NVIDIA H100 80GB HBM3" })
	for i := 0; i < 10; i++ {
		addClaimPod(c, fmt.Sprintf("p%d", i), selectorRequest(`device.attributes["gpu.gantry.dev"].index >= 0`))
	}
	pods := chooseNow(c)
	seen := map[int]int{}
	for i := 0; i < 10; i++ {
		got := pods[model.PodID(fmt.Sprintf("ns/p%d", i))].DeviceChoices["node-0000"]
		if len(got) != 1 || !got[0].Whole {
			t.Fatalf("pod p%d would take %v, want one whole GPU", i, got)
		}
		seen[got[0].Index]++
	}
	if len(seen) != 8 {
		t.Errorf("10 pods were offered %d different GPUs (%v), want all 8", len(seen), seen)
	}
}

// A claim shared by two running pods books its share once, on its first consumer,
// and on the second once the first is gone.
func TestSharedClaimIsBookedOnce(t *testing.T) {
	c := draCluster(t, 1, 1, func(int) string { return "NVIDIA H100 80GB HBM3" })
	share := types.UID("share-1")
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "shared"},
		Status: resourceapi.ResourceClaimStatus{
			Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{Results: []resourceapi.DeviceRequestAllocationResult{{
				Request: "gpu", Driver: names.DriverName, Pool: "node-0000", Device: dra.DeviceName(0), ShareID: &share,
				ConsumedCapacity: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")},
			}}}},
			ReservedFor: []resourceapi.ResourceClaimConsumerReference{{Resource: "pods", Name: "p1", UID: "uid-p1"}, {Resource: "pods", Name: "p2", UID: "uid-p2"}},
		},
	}
	c.UpsertClaim(claim)
	for _, name := range []string{"p1", "p2"} {
		c.UpsertPod(&corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
			Spec: corev1.PodSpec{
				SchedulerName: "default-scheduler", NodeName: "node-0000",
				Containers:     []corev1.Container{{Name: "c"}},
				ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To("shared")}},
			},
			Status: corev1.PodStatus{Phase: corev1.PodRunning},
		})
	}
	booked := func() int64 {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.snap.Node("node-0000").GPUs[0].AllocatedBytes
	}
	if got := booked(); got != 20<<30 {
		t.Errorf("GPU 0 has %d bytes booked with two pods sharing a 20Gi claim, want 20Gi", got)
	}
	c.DeletePod("ns", "p1")
	if got := booked(); got != 20<<30 {
		t.Errorf("GPU 0 has %d bytes booked after the first consumer left, want 20Gi (the second holds it)", got)
	}
	c.DeletePod("ns", "p2")
	if got := booked(); got != 20<<30 {
		t.Errorf("GPU 0 has %d bytes booked with no consumer but the claim allocated, want 20Gi (orphans.go)", got)
	}
	claim = claim.DeepCopy()
	claim.Status = resourceapi.ResourceClaimStatus{}
	c.UpsertClaim(claim)
	if got := booked(); got != 0 {
		t.Errorf("GPU 0 has %d bytes booked once the claim was deallocated, want 0", got)
	}
}

// A share through the allocator packs onto the GPU that is shared already, not onto
// an idle one that whole-GPU work could use.
func TestChooseDevicesPacksShares(t *testing.T) {
	c := draCluster(t, 1, 2, func(int) string { return "NVIDIA H100 80GB HBM3" })
	c.UpsertPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "half", UID: "uid-half",
			Annotations: map[string]string{names.AnnotationGPUs: FormatGPUs([]model.GPUBinding{{Index: 1, MemoryBytes: 40 << 30}})}},
		Spec:   corev1.PodSpec{SchedulerName: testScheduler, NodeName: "node-0000", Containers: []corev1.Container{{Name: "c"}}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	})
	req := selectorRequest(`device.attributes["gpu.gantry.dev"].productName.startsWith("NVIDIA H100")`)
	req.Exactly.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{"memory": resource.MustParse("20Gi")}}
	addClaimPod(c, "share", req)
	got := chooseNow(c)["ns/share"].DeviceChoices["node-0000"]
	if len(got) != 1 || got[0].Index != 1 || got[0].Whole || got[0].MemoryBytes != 20<<30 {
		t.Errorf("share would take %+v, want 20 GiB of GPU 1 (already half shared)", got)
	}
}

// Members of one gang whose claims are of different kinds, both satisfied by the same
// GPUs, are offered different GPUs of a node: offered the same one, the gang could
// never fit on the node.
func TestChooseDevicesGivesGangMembersDifferentGPUs(t *testing.T) {
	c := draCluster(t, 1, 2, func(int) string { return "NVIDIA H100 80GB HBM3" })
	gang := map[string]string{names.AnnotationPodGroup: "g", names.AnnotationMinMember: "2"}
	addGangClaimPod(c, "head", gang, selectorRequest(`device.attributes["gpu.gantry.dev"].index >= 0`))
	addGangClaimPod(c, "worker", gang, selectorRequest(`device.attributes["gpu.gantry.dev"].productName.startsWith("NVIDIA")`))
	pods := chooseNow(c)
	head, worker := pods["ns/head"].DeviceChoices["node-0000"], pods["ns/worker"].DeviceChoices["node-0000"]
	if len(head) != 1 || len(worker) != 1 || head[0].Index == worker[0].Index {
		t.Errorf("head would take %v, worker %v; want one GPU each, different", head, worker)
	}
}
