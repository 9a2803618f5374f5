package informers

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/model"
)

// A GPUNode whose agent reports its readings Stale (NVML gone, hung, or
// released for a driver upgrade) gives the scheduler no free memory to trust;
// health still counts, and the sample time travels for the age bound.
func TestStaleGPUNodeGivesNoLiveFreeMemory(t *testing.T) {
	sampled := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	gn := &gpuv1alpha1.GPUNode{Status: gpuv1alpha1.GPUNodeStatus{
		SampleTime: sampled,
		GPUs: []gpuv1alpha1.GPUStatus{
			{UUID: "GPU-a", MemoryFree: resource.NewQuantity(10<<30, resource.BinarySI), Health: gpuv1alpha1.Healthy},
			{UUID: "GPU-b", MemoryFree: resource.NewQuantity(20<<30, resource.BinarySI), Health: gpuv1alpha1.Unhealthy},
		},
	}}
	live := liveGPUs(gn)
	if l := live["GPU-a"]; l.FreeBytes != 10<<30 || !l.Healthy || !l.SampledAt.Equal(sampled.Time) {
		t.Errorf("live GPU-a = %+v, want 10Gi free, healthy, sampled at %v", l, sampled)
	}
	gn.Status.Conditions = []metav1.Condition{{Type: gpuv1alpha1.GPUNodeConditionStale, Status: metav1.ConditionTrue, Reason: "NVMLNotAnswering"}}
	live = liveGPUs(gn)
	if l := live["GPU-a"]; l.FreeBytes != model.UnknownBytes || !l.Healthy {
		t.Errorf("stale GPU-a = %+v, want unknown free memory, healthy", l)
	}
	if l := live["GPU-b"]; l.FreeBytes != model.UnknownBytes || l.Healthy {
		t.Errorf("stale GPU-b = %+v, want unknown free memory, unhealthy", l)
	}
}
