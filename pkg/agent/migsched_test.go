package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// migCluster is the scheduler's cache fed with the ResourceSlice this agent
// builds for two A100s, the second in MIG mode (3g.20gb, 2g.10gb, 1g.5gb).
func migCluster(t *testing.T) (*cache.Cache, map[string]string) {
	t.Helper()
	f, _ := discover(t, "2xA100")
	if err := f.GPUs[1].EnableMIG(nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	inv := mustRediscover(t, f)
	byProfile := map[string]string{}
	for _, m := range inv.Devices[1].MIG.Devices {
		byProfile[m.Profile] = MIGDeviceName(1, m)
	}
	c := cache.New([]string{"gantry-scheduler"}, &gang.StaticLookup{}, "")
	c.UpsertDeviceClass(DeviceClass())
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
	c.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: testNode}, Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity}})
	devices := BuildResources(testNode, inv, Staleness{}).Pools[testNode].Slices[0].Devices
	c.UpsertSlice(&resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: testNode + "-gpu"},
		Spec: resourceapi.ResourceSliceSpec{Driver: names.DriverName, NodeName: ptr.To(testNode),
			Pool: resourceapi.ResourcePool{Name: testNode, ResourceSliceCount: 1}, Devices: devices},
	})
	return c, byProfile
}

func migRequest(memory string, selectors ...string) resourceapi.DeviceRequest {
	e := &resourceapi.ExactDeviceRequest{DeviceClassName: names.DriverName, AllocationMode: resourceapi.DeviceAllocationModeExactCount, Count: 1}
	for _, s := range selectors {
		e.Selectors = append(e.Selectors, resourceapi.DeviceSelector{CEL: &resourceapi.CELDeviceSelector{Expression: s}})
	}
	if memory != "" {
		e.Capacity = &resourceapi.CapacityRequirements{Requests: map[resourceapi.QualifiedName]resource.Quantity{MemoryCapacity: resource.MustParse(memory)}}
	}
	return resourceapi.DeviceRequest{Name: "gpu", Exactly: e}
}

func addMIGPod(c *cache.Cache, name string, req resourceapi.DeviceRequest) {
	claim := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-gpu"},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{req}}},
	}
	c.UpsertClaim(claim)
	c.UpsertPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{SchedulerName: "gantry-scheduler", Containers: []corev1.Container{{Name: "c"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim.Name)}}},
	})
}

// placeOne runs one cycle and returns the devices the pod's claim gets
// (structured allocation, or the core's GPUs named as the claim would be),
// nil if it stays pending.
func placeOne(t *testing.T, c *cache.Cache, s *scheduler.Scheduler, at time.Time, pod string) []string {
	t.Helper()
	prep := c.Prepare(context.Background(), at, s.ScheduleSkipping)
	d := c.Commit(prep.Plan, at)
	for _, b := range d.Batches {
		for _, r := range b.Reqs {
			if string(r.Pod.ID) != "ns/"+pod {
				continue
			}
			var got []string
			for _, a := range r.Allocations {
				for _, res := range a.Devices.Results {
					got = append(got, res.Device)
				}
			}
			if !r.Structured {
				for _, g := range r.Placement.GPUs {
					got = append(got, fmt.Sprintf("gpu-%d", g.Index))
				}
			}
			return got
		}
	}
	return nil
}

// The scheduler places MIG requests on the A100 in MIG mode: by profile, and by
// a memory size that a MIG device serves whole (the smallest free one that is
// large enough). Requests that do not ask for MIG never get a MIG device: a
// selector-free share or whole GPU goes to the GPU not in MIG mode.
func TestSchedulerPlacesMIGRequests(t *testing.T) {
	c, byProfile := migCluster(t)
	s, err := scheduler.New("bestfit", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(10000, 0)
	isMIG := `device.attributes["gpu.gantry.dev"].type == "mig"`

	addMIGPod(c, "by-profile", migRequest("", `device.attributes["gpu.gantry.dev"].profile == "2g.10gb"`))
	if got := placeOne(t, c, s, t0, "by-profile"); len(got) != 1 || got[0] != byProfile["2g.10gb"] {
		t.Fatalf("profile 2g.10gb placed on %v, want %s", got, byProfile["2g.10gb"])
	}
	// 8Gi fits 2g.10gb (taken) and 3g.20gb, not 1g.5gb.
	addMIGPod(c, "by-memory", migRequest("8Gi", isMIG))
	if got := placeOne(t, c, s, t0.Add(time.Second), "by-memory"); len(got) != 1 || got[0] != byProfile["3g.20gb"] {
		t.Fatalf("8Gi on a MIG device placed on %v, want %s", got, byProfile["3g.20gb"])
	}
	addMIGPod(c, "too-big", migRequest("30Gi", isMIG))
	if got := placeOne(t, c, s, t0.Add(2*time.Second), "too-big"); got != nil {
		t.Fatalf("30Gi on a MIG device placed on %v; no MIG device is that large", got)
	}
	addMIGPod(c, "small", migRequest("2Gi", isMIG))
	if got := placeOne(t, c, s, t0.Add(3*time.Second), "small"); len(got) != 1 || got[0] != byProfile["1g.5gb"] {
		t.Fatalf("2Gi on a MIG device placed on %v, want the last one, %s", got, byProfile["1g.5gb"])
	}
	// Every MIG device is taken now; a selector-free share goes to gpu-0.
	addMIGPod(c, "share", migRequest("4Gi"))
	if got := placeOne(t, c, s, t0.Add(4*time.Second), "share"); len(got) != 1 || got[0] != "gpu-0" {
		t.Fatalf("selector-free 4Gi share placed on %v, want gpu-0", got)
	}
	addMIGPod(c, "another-mig", migRequest("", isMIG))
	if got := placeOne(t, c, s, t0.Add(5*time.Second), "another-mig"); got != nil {
		t.Fatalf("a fourth MIG request placed on %v; all three MIG devices are taken", got)
	}
}

// A whole GPU asked for by count alone is never a MIG device.
func TestWholeGPURequestSkipsMIGDevices(t *testing.T) {
	c, _ := migCluster(t)
	s, err := scheduler.New("bestfit", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Unix(10000, 0)
	addMIGPod(c, "first", migRequest(""))
	if got := placeOne(t, c, s, t0, "first"); len(got) != 1 || got[0] != "gpu-0" {
		t.Fatalf("whole GPU placed on %v, want gpu-0", got)
	}
	addMIGPod(c, "second", migRequest(""))
	if got := placeOne(t, c, s, t0.Add(time.Second), "second"); got != nil {
		t.Fatalf("second whole GPU placed on %v; the other GPU is in MIG mode", got)
	}
}
