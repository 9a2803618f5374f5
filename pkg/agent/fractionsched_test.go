package agent

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/gpu/fake"
	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	"github.com/gantry-dev/gantry/pkg/webhook"
)

// fractionCluster is the scheduler's cache fed with the ResourceSlices this agent
// builds for an A100 (40 GB) node and an H100 (80 GB) node, and the GPU sizes the
// pod webhook reads from them.
func fractionCluster(t *testing.T) (*cache.Cache, map[string]int64, []int64) {
	t.Helper()
	c := cache.New([]string{"gantry-scheduler"}, &gang.StaticLookup{}, "")
	c.UpsertDeviceClass(DeviceClass())
	capacity := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"), corev1.ResourcePods: resource.MustParse("110")}
	sizeOf := map[string]int64{}
	var slices []resourceapi.ResourceSlice
	for node, profile := range map[string]string{"a100-node": "1xA100", "h100-node": "1xH100"} {
		f, err := fake.New(profile, node)
		if err != nil {
			t.Fatal(err)
		}
		inv, err := gpu.Discover(f)
		if err != nil {
			t.Fatal(err)
		}
		sizeOf[node] = ShareableBytes(inv.Devices[0].Memory)
		c.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: corev1.NodeStatus{Capacity: capacity, Allocatable: capacity}})
		sl := &resourceapi.ResourceSlice{
			ObjectMeta: metav1.ObjectMeta{Name: node + "-gpu"},
			Spec: resourceapi.ResourceSliceSpec{Driver: names.DriverName, NodeName: ptr.To(node),
				Pool: resourceapi.ResourcePool{Name: node, ResourceSliceCount: 1}, Devices: BuildResources(node, inv, Staleness{}).Pools[node].Slices[0].Devices},
		}
		c.UpsertSlice(sl)
		slices = append(slices, *sl)
	}
	return c, sizeOf, webhook.SizesOf(slices)
}

// placed is where one cycle put a pod: the node, the structured allocator's result
// for its claim, and the GPU the core booked.
type placed struct {
	node    string
	result  resourceapi.DeviceRequestAllocationResult
	booking []int64
}

func placeFraction(t *testing.T, c *cache.Cache, s *scheduler.Scheduler, at time.Time, pod string) *placed {
	t.Helper()
	prep := c.Prepare(context.Background(), at, s.ScheduleSkipping)
	d := c.Commit(prep.Plan, at)
	for _, b := range d.Batches {
		for _, r := range b.Reqs {
			if string(r.Pod.ID) != "ns/"+pod {
				continue
			}
			if !r.Structured || len(r.Allocations) != 1 || len(r.Allocations[0].Devices.Results) != 1 {
				t.Fatalf("%s: structured %v, allocations %+v", pod, r.Structured, r.Allocations)
			}
			p := &placed{node: r.Placement.Node, result: r.Allocations[0].Devices.Results[0]}
			for _, g := range r.Placement.GPUs {
				p.booking = append(p.booking, g.MemoryBytes)
			}
			return p
		}
	}
	return nil
}

// KAI's gpu-fraction, as the pod webhook turns it into a claim, placed by the
// scheduler on an A100 node and an H100 node: the structured allocator picks the
// subrequest of the GPU's size, consumes that fraction of that GPU, and the core
// books exactly what the allocation consumes, so two halves fill each GPU and a
// fifth half finds no room.
func TestSchedulerPlacesFractionClaims(t *testing.T) {
	c, sizeOf, sizes := fractionCluster(t)
	if len(sizes) != 2 || sizes[0] != sizeOf["a100-node"] || sizes[1] != sizeOf["h100-node"] {
		t.Fatalf("sizes %v, want the A100's then the H100's (%v)", sizes, sizeOf)
	}
	s, err := scheduler.New("bestfit", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	tmpl := webhook.FractionTemplate("ns", 500, sizes)
	subFor := map[int64]string{}
	for _, sub := range tmpl.Spec.Spec.Devices.Requests[0].FirstAvailable {
		q := sub.Capacity.Requests[names.MemoryCapacity]
		subFor[q.Value()] = "gpu/" + sub.Name
	}
	t0 := time.Unix(10000, 0)
	perNode := map[string]int{}
	var order []string
	for i := range 4 {
		name := fmt.Sprintf("half-%d", i)
		addFractionPod(c, name, tmpl)
		p := placeFraction(t, c, s, t0.Add(time.Duration(i)*time.Second), name)
		if p == nil {
			t.Fatalf("%s stays pending; %v placed so far", name, perNode)
		}
		half := sizeOf[p.node] / 2 >> 20 << 20 // rounded down to MiB
		consumed := p.result.ConsumedCapacity[names.MemoryCapacity]
		if p.result.Pool != p.node || p.result.Device != "gpu-0" || consumed.Value() != half || p.result.Request != subFor[half] {
			t.Errorf("%s on %s: result %+v (consumed %s), want gpu-0, subrequest %s, %d bytes", name, p.node, p.result, consumed.String(), subFor[half], half)
		}
		if len(p.booking) != 1 || p.booking[0] != half {
			t.Errorf("%s on %s: the core booked %v, the allocator consumed %d", name, p.node, p.booking, half)
		}
		perNode[p.node]++
		order = append(order, p.node)
	}
	if perNode["a100-node"] != 2 || perNode["h100-node"] != 2 {
		t.Errorf("halves per node %v, want two on each GPU", perNode)
	}
	// The smallest GPU that fits first: within a node by the subrequests' order,
	// across nodes by the core's best fit (least memory left over).
	if order[0] != "a100-node" || order[1] != "a100-node" {
		t.Errorf("halves placed on %v, want the A100 filled first", order)
	}
	addFractionPod(c, "fifth", tmpl)
	if p := placeFraction(t, c, s, t0.Add(10*time.Second), "fifth"); p != nil {
		t.Errorf("a fifth half placed on %s; both GPUs are full", p.node)
	}
	// A firstAvailable claim is the structured allocator's to place (dra.Demand,
	// the core's own translation, reads exact requests only), and the estimate for
	// messages and queue charges is a share of the smallest GPU, not a whole GPU.
	claim := &resourceapi.ResourceClaim{Spec: tmpl.Spec.Spec}
	if !dra.NeedsAllocator(&corev1.Pod{}, []dra.Claim{{Claim: claim}}) {
		t.Error("a firstAvailable claim is not sent to the structured allocator")
	}
	if d := dra.StructuredDemand(&corev1.Pod{}, []dra.Claim{{Claim: claim}}, model.GPUDemand{}); d.Count != 1 || d.MemoryBytes != sizeOf["a100-node"]/2>>20<<20 {
		t.Errorf("structured demand %+v, want one share of the smallest GPU", d)
	}
}

func addFractionPod(c *cache.Cache, name string, tmpl *resourceapi.ResourceClaimTemplate) {
	claim := &resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-share"}, Spec: tmpl.Spec.Spec}
	c.UpsertClaim(claim)
	c.UpsertPod(&corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name),
			Annotations: map[string]string{names.AnnotationGPUFraction: "0.5"}},
		Spec: corev1.PodSpec{SchedulerName: "gantry-scheduler", Containers: []corev1.Container{{Name: "c"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: webhook.ShareClaimRef, ResourceClaimName: ptr.To(claim.Name)}}},
	})
}
