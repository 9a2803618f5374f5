package cache

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/names"
)

// wholeClaim is a claim allocated gpu-<index> of node-0000 whole, reserved for the
// given pods.
func wholeClaim(name string, index int, reservedFor ...string) *resourceapi.ResourceClaim {
	cl := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Spec:       resourceapi.ResourceClaimSpec{Devices: resourceapi.DeviceClaim{Requests: []resourceapi.DeviceRequest{selectorRequest(`device.attributes["gpu.gantry.dev"].index >= 0`)}}},
		Status: resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{Devices: resourceapi.DeviceAllocationResult{
			Results: []resourceapi.DeviceRequestAllocationResult{{Request: "gpu", Driver: names.DriverName, Pool: "node-0000", Device: dra.DeviceName(index)}},
		}}},
	}
	for _, p := range reservedFor {
		cl.Status.ReservedFor = append(cl.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{Resource: "pods", Name: p, UID: types.UID("uid-" + p)})
	}
	return cl
}

func claimPod(name, claim, node string, phase corev1.PodPhase) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)},
		Spec: corev1.PodSpec{
			SchedulerName: testScheduler, NodeName: node, Containers: []corev1.Container{{Name: "c"}},
			ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: ptr.To(claim)}},
		},
		Status: corev1.PodStatus{Phase: phase},
	}
}

func gpuZeroIdle(c *Cache) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap.Node("node-0000").GPUs[0].Idle()
}

// A claim stays booked on its GPU from its holder's end until it is deallocated: in
// between, the allocator must not offer that GPU to another claim (chaos finding: two
// claims allocated the same device).
func TestOrphanedClaimKeepsItsGPU(t *testing.T) {
	c := draCluster(t, 1, 1, func(int) string { return "NVIDIA H100 80GB HBM3" })
	c.UpsertClaim(wholeClaim("held", 0, "holder"))
	c.UpsertPod(claimPod("holder", "held", "node-0000", corev1.PodRunning))
	if gpuZeroIdle(c) {
		t.Fatal("GPU 0 idle while a running pod holds its claim")
	}
	c.UpsertPod(claimPod("holder", "held", "node-0000", corev1.PodSucceeded))
	if gpuZeroIdle(c) {
		t.Error("GPU 0 idle once the holder succeeded, while its claim is still allocated")
	}
	c.DeletePod("ns", "holder")
	addClaimPod(c, "next", selectorRequest(`device.attributes["gpu.gantry.dev"].index >= 0`))
	if got := chooseNow(c)["ns/next"].DeviceChoices; len(got) != 0 {
		t.Errorf("another claim would be given %v while the device is still allocated to ns/held", got)
	}
	// kube-controller-manager deallocates the claim: the GPU is free again.
	c.UpsertClaim(&resourceapi.ResourceClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "held"}})
	if !gpuZeroIdle(c) {
		t.Error("GPU 0 still booked after its claim was deallocated")
	}
	if got := chooseNow(c)["ns/next"].DeviceChoices["node-0000"]; len(got) != 1 || got[0].Index != 0 {
		t.Errorf("after deallocation the pending claim would be given %v, want GPU 0", got)
	}
}

// A claim allocated before any pod of it is seen (a restart: claims listed before
// pods) is booked, and passes to its pod once the pod shows up running.
func TestClaimSeenBeforeItsPodIsBookedOnce(t *testing.T) {
	c := draCluster(t, 1, 1, func(int) string { return "NVIDIA H100 80GB HBM3" })
	c.UpsertClaim(wholeClaim("early", 0, "late"))
	if gpuZeroIdle(c) {
		t.Fatal("GPU 0 idle while its claim is allocated and its pod not seen yet")
	}
	c.UpsertPod(claimPod("late", "early", "node-0000", corev1.PodRunning))
	c.mu.Lock()
	g := c.snap.Node("node-0000").GPUs[0]
	orphans := len(c.orphans)
	c.mu.Unlock()
	if !g.Exclusive || g.AllocatedBytes != 80<<30 || orphans != 0 {
		t.Errorf("GPU 0 once its pod runs: exclusive=%v allocated=%d orphans=%d; want it booked once, on the pod", g.Exclusive, g.AllocatedBytes, orphans)
	}
}

// A pending pod's own allocation left from a failed binding is not booked: the
// allocator redoes it, and booked, it would keep the pod from the only GPU there is.
func TestStaleAllocationOfPendingPodIsNotBooked(t *testing.T) {
	c := draCluster(t, 1, 1, func(int) string { return "NVIDIA H100 80GB HBM3" })
	c.UpsertClaim(wholeClaim("mine", 0, "retry"))
	c.UpsertPod(claimPod("retry", "mine", "", corev1.PodPending))
	if !gpuZeroIdle(c) {
		t.Error("GPU 0 booked for the pending pod's own stale allocation")
	}
	if got := chooseNow(c)["ns/retry"].DeviceChoices["node-0000"]; len(got) != 1 || got[0].Index != 0 {
		t.Errorf("the pending pod would be given %v, want GPU 0 again", got)
	}
	// Deleted before it was placed: the allocation has nobody now and is booked.
	c.DeletePod("ns", "retry")
	if gpuZeroIdle(c) {
		t.Error("GPU 0 idle after the pod of a still-allocated claim was deleted")
	}
}
