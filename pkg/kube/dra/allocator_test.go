package dra

import (
	"context"
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// world is one node n1 with two 80 GiB GPUs of product, as the allocator and the core
// see it, and the gpu.gantry.dev DeviceClass; plus one device of another driver.
func world(product string) (*Allocator, Input) {
	a := NewAllocator()
	a.UpsertClass(&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: names.DriverName},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "gpu.gantry.dev"`}}}}})
	a.UpsertClass(&resourceapi.DeviceClass{ObjectMeta: metav1.ObjectMeta{Name: "nic"},
		Spec: resourceapi.DeviceClassSpec{Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: `device.driver == "nic.example.com"`}}}}})
	snap := model.NewSnapshot()
	node := &model.Node{Name: "n1"}
	var devices []resourceapi.Device
	for g := 0; g < 2; g++ {
		total := resource.NewQuantity(80<<30, resource.BinarySI)
		devices = append(devices, resourceapi.Device{Name: DeviceName(g),
			Attributes: map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{"index": {IntValue: ptr.To(int64(g))}, "productName": {StringValue: ptr.To(product)}},
			Capacity:   map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{"memory": {Value: *total}}})
		node.GPUs = append(node.GPUs, model.GPU{Index: g, Model: product, MemoryBytes: 80 << 30, LiveFreeBytes: model.UnknownBytes, Healthy: true})
	}
	snap.AddNode(node)
	a.UpsertSlice(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-gpu"},
		Spec: resourceapi.ResourceSliceSpec{Driver: names.DriverName, NodeName: ptr.To("n1"), Pool: resourceapi.ResourcePool{Name: "n1", ResourceSliceCount: 1}, Devices: devices}})
	a.UpsertSlice(&resourceapi.ResourceSlice{ObjectMeta: metav1.ObjectMeta{Name: "n1-nic"},
		Spec: resourceapi.ResourceSliceSpec{Driver: "nic.example.com", NodeName: ptr.To("n1"), Pool: resourceapi.ResourcePool{Name: "n1", ResourceSliceCount: 1},
			Devices: []resourceapi.Device{{Name: "nic-0"}}}})
	apiNode := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	return a, Input{Snap: snap, Nodes: map[string]*corev1.Node{"n1": apiNode}, Claims: map[string]*resourceapi.ResourceClaim{}}
}

func request(name, class, expr string) Request {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-c"},
		Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{
			DeviceClassName: class, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1,
			Selectors: []resourceapi.DeviceSelector{{CEL: &resourceapi.CELDeviceSelector{Expression: expr}}}}}}}}}
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}}
	return Request{ID: model.PodID("ns/" + name), Gang: model.GangID("ns/" + name), Pod: pod, Claims: []Claim{{Name: claim.Name, Ref: "gpu", Claim: claim}}}
}

func TestChooseGivesAlikePodsDifferentGPUsAndHonoursSelectors(t *testing.T) {
	a, in := world("NVIDIA H100 80GB HBM3")
	h100 := `device.attributes["gpu.gantry.dev"].productName == "NVIDIA H100 80GB HBM3"`
	got := a.Choose(context.Background(), in, []Request{request("p1", names.DriverName, h100), request("p2", names.DriverName, h100),
		request("l4", names.DriverName, `device.attributes["gpu.gantry.dev"].productName == "NVIDIA L4"`)})
	g1, g2 := got["ns/p1"].Devices["n1"], got["ns/p2"].Devices["n1"]
	if len(g1) != 1 || len(g2) != 1 || g1[0].Index == g2[0].Index {
		t.Fatalf("p1 gets %v and p2 %v on n1, want one GPU each, different", g1, g2)
	}
	if len(got["ns/l4"].Devices) != 0 || got["ns/l4"].Err != nil {
		t.Fatalf("an L4 claim got %+v on a node of H100s", got["ns/l4"])
	}
}

func TestChooseReportsAnInvalidClaim(t *testing.T) {
	a, in := world("NVIDIA H100 80GB HBM3")
	got := a.Choose(context.Background(), in, []Request{request("p", "no-such-class", `true`)})
	if got["ns/p"].Err == nil {
		t.Fatal("a claim of a DeviceClass that does not exist was not refused")
	}
}

func TestTakeRefusesAnotherDriversDeviceTakenTwice(t *testing.T) {
	a, in := world("NVIDIA H100 80GB HBM3")
	got := a.Choose(context.Background(), in, []Request{request("p1", "nic", `true`), request("p2", "nic", `true`)})
	for _, id := range []model.PodID{"ns/p1", "ns/p2"} {
		if got[id].Err != nil {
			t.Fatalf("%s: %v", id, got[id].Err)
		}
	}
	taken := sets.New[structured.DeviceID]()
	if _, via, ok := a.Take("ns/p1", "n1", taken); !via || !ok {
		t.Fatalf("first Take: viaAllocator %v ok %v, want both", via, ok)
	}
	if _, _, ok := a.Take("ns/p2", "n1", taken); ok {
		t.Fatal("the one NIC was taken twice in one plan")
	}
}

func TestInflightAllocationsCountAsTaken(t *testing.T) {
	a, in := world("NVIDIA H100 80GB HBM3")
	r := request("p1", "nic", `true`)
	a.Choose(context.Background(), in, []Request{r})
	allocs, _, _ := a.Take("ns/p1", "n1", sets.New[structured.DeviceID]())
	in.Claims["ns/"+r.Claims[0].Name] = r.Claims[0].Claim
	a.MarkInflight(r.Pod, r.Claims, allocs)
	got := a.Choose(context.Background(), in, []Request{request("p2", "nic", `true`)})
	if len(got["ns/p2"].Devices) != 0 {
		t.Fatalf("p2 got %v: the NIC allocated in flight to p1 was offered again", got["ns/p2"].Devices)
	}
	a.DropInflight(r.Claims)
	got = a.Choose(context.Background(), in, []Request{request("p2", "nic", `true`)})
	if _, ok := got["ns/p2"].Devices["n1"]; !ok {
		t.Fatal("after DropInflight the NIC is still taken")
	}
}

func TestNeedsAllocator(t *testing.T) {
	plain := Request{}
	plain.Claims = []Claim{{Claim: &resourceapi.ResourceClaim{Spec: resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{
		{Name: "r", Exactly: &resourceapi.ExactDeviceRequest{DeviceClassName: names.DriverName, Count: 2}}}}}}}}
	pod := &corev1.Pod{}
	if NeedsAllocator(pod, plain.Claims) {
		t.Error("plain whole-GPU claims need the allocator")
	}
	if d := Demand(plain.Claims, model.GPUDemand{}); d.Count != 2 || !d.ByDevice {
		t.Errorf("Demand = %+v, want 2 GPUs by device", d)
	}
	sel := request("p", names.DriverName, "true")
	if !NeedsAllocator(pod, sel.Claims) {
		t.Error("a claim with a selector does not need the allocator")
	}
}
