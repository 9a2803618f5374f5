package dra

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// translate is what the cache does with a pending pod's resolved claims (podDemand,
// source 1): the structured allocator's demand when NeedsAllocator says so, else
// the core's own.
func translate(pod *corev1.Pod, pcs []Claim) (model.GPUDemand, bool) {
	if NeedsAllocator(pod, pcs) {
		return StructuredDemand(pod, pcs, model.GPUDemand{}), true
	}
	return Demand(pcs, model.GPUDemand{}), false
}

// FuzzClaimTranslation reads any ResourceClaim (what the API server could store: its
// validation bounds neither a request's count nor its capacity requests) as one claim
// of a pending pod, and each allocation result in its status as a bound pod's GPU.
//
// What must hold: nothing panics; a demand has no negative count or memory; every
// gpu.gantry.dev request that the core places itself asks for at least one GPU, so
// a pod whose claim asks for GPUs is never taken for a pod that needs none; a result
// read as a GPU has a real index (≥ 0, its device named gpu-INDEX) and a share a
// positive amount under the GPU's memory, else it is the whole GPU.
func FuzzClaimTranslation(f *testing.F) {
	f.Add([]byte(`{"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.gantry.dev","count":2}}]}}}`), "node-a", int64(80<<30))
	f.Add([]byte(`{"spec":{"devices":{"requests":[{"name":"gpu","exactly":{"deviceClassName":"gpu.gantry.dev","capacity":{"requests":{"memory":"20Gi"}}}}]}}}`), "node-a", int64(80<<30))
	f.Add([]byte(`{"spec":{"devices":{"requests":[{"name":"a","exactly":{"deviceClassName":"gpu.gantry.dev","count":4611686018427387904}},{"name":"b","exactly":{"deviceClassName":"gpu.gantry.dev","count":4611686018427387904}}]}}}`), "n", int64(0))
	f.Add([]byte(`{"spec":{"devices":{"requests":[{"name":"a","exactly":{"deviceClassName":"gpu.gantry.dev","capacity":{"requests":{"memory":"-1Gi"}}}}]}}}`), "n", int64(0))
	f.Add([]byte(`{"spec":{"devices":{"requests":[{"name":"a","firstAvailable":[{"name":"x","deviceClassName":"gpu.gantry.dev","count":1}]}]}}}`), "n", int64(0))
	f.Add([]byte(`{"spec":{"devices":{"requests":[{"name":"a","exactly":{"deviceClassName":"gpu.gantry.dev"}}]}},"status":{"allocation":{"devices":{"results":[{"request":"a","driver":"gpu.gantry.dev","pool":"n","device":"gpu--1"},{"request":"a","driver":"gpu.gantry.dev","pool":"n","device":"gpu-2","shareID":"s","consumedCapacity":{"memory":"-5Gi"}}]}},"reservedFor":[{"resource":"pods","name":"p","uid":"u"}]}}`), "n", int64(80<<30))
	f.Fuzz(func(t *testing.T, raw []byte, node string, gpuMemory int64) {
		var claim resourceapi.ResourceClaim
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &claim); err != nil {
			return
		}
		claim.Namespace, claim.Name = "ns", "c"
		pod := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p", UID: "u"},
			Spec:       corev1.PodSpec{ResourceClaims: []corev1.PodResourceClaim{{Name: "gpu", ResourceClaimName: &claim.Name}}},
		}
		pcs, waiting := Resolve(pod, map[string]*resourceapi.ResourceClaim{"ns/c": &claim})
		if waiting != "" || len(pcs) != 1 {
			t.Fatalf("a claim that exists is not resolved: %q", waiting)
		}
		d, structured := translate(pod, pcs)
		if d.Count < 0 || d.MemoryBytes < 0 {
			t.Fatalf("demand %+v (structured %v) from %s: negative", d, structured, raw)
		}
		if !structured {
			for _, r := range claim.Spec.Devices.Requests {
				if r.Exactly != nil && r.Exactly.DeviceClassName == names.DriverName && d.Count < 1 {
					t.Fatalf("a claim asking gpu.gantry.dev for devices reads as %+v: no GPU", d)
				}
			}
		}
		if claim.Status.Allocation == nil {
			return
		}
		for _, r := range claim.Status.Allocation.Devices.Results {
			b, ok := GPUOfResult(r, node, gpuMemory)
			if !ok {
				continue
			}
			if b.Index < 0 || DeviceName(b.Index) != r.Device {
				t.Fatalf("result for device %q read as GPU index %d", r.Device, b.Index)
			}
			if !b.Whole && (b.MemoryBytes <= 0 || (gpuMemory > 0 && b.MemoryBytes >= gpuMemory)) {
				t.Fatalf("result %+v read as a share of %d bytes of a %d-byte GPU", r, b.MemoryBytes, gpuMemory)
			}
		}
	})
}
