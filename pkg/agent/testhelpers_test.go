package agent

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/gpu/fake"
	"github.com/gantry-dev/gantry/pkg/names"
)

const testNode = "node-a"

func discover(t *testing.T, profile string) (*fake.Fleet, *gpu.Inventory) {
	t.Helper()
	f, err := fake.New(profile, testNode)
	if err != nil {
		t.Fatal(err)
	}
	inv, err := gpu.Discover(f)
	if err != nil {
		t.Fatal(err)
	}
	return f, inv
}

// share is one allocation result: memory "" means no consumed capacity (whole GPU).
type share struct {
	device, memory, shareID string
}

func allocatedClaim(uid, name string, shares ...share) *resourceapi.ResourceClaim {
	c := &resourceapi.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "team-a", Name: name, UID: types.UID(uid)},
		Status:     resourceapi.ResourceClaimStatus{Allocation: &resourceapi.AllocationResult{}},
	}
	for _, s := range shares {
		r := resourceapi.DeviceRequestAllocationResult{Request: "gpu", Driver: names.DriverName, Pool: testNode, Device: s.device}
		if s.memory != "" {
			r.ConsumedCapacity = map[resourceapi.QualifiedName]resource.Quantity{MemoryCapacity: resource.MustParse(s.memory)}
		}
		if s.shareID != "" {
			id := types.UID(s.shareID)
			r.ShareID = &id
		}
		c.Status.Allocation.Devices.Results = append(c.Status.Allocation.Devices.Results, r)
	}
	return c
}

func mustRediscover(t *testing.T, f *fake.Fleet) *gpu.Inventory {
	t.Helper()
	inv, err := gpu.Discover(f)
	if err != nil {
		t.Fatal(err)
	}
	return inv
}
