package placement

import (
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// A pod whose devices were chosen outside the core goes only to a node it has a
// choice for, takes exactly the chosen GPUs there, and the core refuses a choice whose
// GPUs its own view shows as taken.
func TestDeviceChoicesAreHonoured(t *testing.T) {
	const gib = int64(1) << 30
	a, b, c := gpuNode("a", 4, "NVIDIA-H100", 80*gib), gpuNode("b", 4, "NVIDIA-H100", 80*gib), gpuNode("c", 4, "NVIDIA-H100", 80*gib)
	v := NewView(snapshotOf(a, b, c))
	pl, err := New("")
	if err != nil {
		t.Fatal(err)
	}
	// Fill GPU 2 of node b whole, and half of GPU 3 of node c.
	busy := gpuPod("busy", 1, 0, 0)
	v.Assign(busy, Placement{Pod: busy.ID, Node: "b", GPUs: []model.GPUBinding{{Index: 2, MemoryBytes: 80 * gib, Whole: true}}})
	half := memSharePod("half", 40*gib)
	v.Assign(half, Placement{Pod: half.ID, Node: "c", GPUs: []model.GPUBinding{{Index: 3, MemoryBytes: 40 * gib}}})

	p := gpuPod("chosen", 1, 1000, gib)
	p.GPU.ByDevice = true
	p.DeviceChoices = map[string][]model.GPUBinding{
		"b": {{Index: 2, MemoryBytes: 80 * gib, Whole: true}}, // taken whole by busy
		"c": {{Index: 3, MemoryBytes: 80 * gib, Whole: true}}, // half taken: not idle
	}
	if _, u := pl.PlacePod(v, p); u == nil {
		t.Fatal("placed a pod on GPUs the view shows taken")
	} else if u.Reasons[ReasonChosenGPUsTaken] != 2 || u.Reasons[ReasonDevices] != 1 {
		t.Errorf("reasons %v, want 2 %q and 1 %q", u.Reasons, ReasonChosenGPUsTaken, ReasonDevices)
	}

	// A 40 GiB share on c's GPU 3 fits beside the other half; a share on b's GPU 1 too.
	// Both score; the exact GPU of the choice is what the placement returns.
	p.DeviceChoices = map[string][]model.GPUBinding{
		"b": {{Index: 1, MemoryBytes: 40 * gib}},
		"c": {{Index: 3, MemoryBytes: 40 * gib}},
	}
	got, u := pl.PlacePod(v, p)
	if u != nil {
		t.Fatal(u)
	}
	// Filling c's half-used GPU leaves no fragment; opening b's idle GPU 1 would.
	if got.Node != "c" || len(got.GPUs) != 1 || got.GPUs[0].Index != 3 || got.GPUs[0].MemoryBytes != 40*gib {
		t.Errorf("placed on %s %+v, want c GPU 3 40 GiB", got.Node, got.GPUs)
	}

	// A node without GPUs chosen (another driver's devices only) still qualifies.
	p.DeviceChoices = map[string][]model.GPUBinding{"a": nil}
	got, u = pl.PlacePod(v, p)
	if u != nil || got.Node != "a" || len(got.GPUs) != 0 {
		t.Errorf("placed %+v (%v), want node a with no GPUs", got, u)
	}
	ok, why := Feasible(b, p)
	if ok || !strings.Contains(why, ReasonDevices) {
		t.Errorf("Feasible(b) = %v %q, want %q", ok, why, ReasonDevices)
	}

	// Measured free memory counts as for any pod: a share the booking allows but
	// NVML shows no room for does not start there.
	live := gpuNode("live", 1, "NVIDIA-H100", 80*gib)
	live.GPUs[0].LiveFreeBytes = 10 * gib
	p.DeviceChoices = map[string][]model.GPUBinding{"live": {{Index: 0, MemoryBytes: 20 * gib}}}
	if ok, why := Feasible(live, p); ok || !strings.Contains(why, ReasonLiveGPUMemory) {
		t.Errorf("Feasible = %v %q, want %q", ok, why, ReasonLiveGPUMemory)
	}
}
