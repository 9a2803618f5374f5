package placement

import (
	"math"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// TestStrandingRatiosCountCPUOnlyPodsByTheSpareTheyNeed: GPU pods of the mix ask 10
// cores per GPU, CPU-only pods 10/3 more per GPU. Where the cluster has 10 cores per
// GPU to spare, CPU-only pods need a third of it, and a third of their CPU counts;
// where it has 2 to spare, they need more than all of it, and all of it counts.
func TestStrandingRatiosCountCPUOnlyPodsByTheSpareTheyNeed(t *testing.T) {
	shapes := []Shape{
		{Requests: model.Resources{MilliCPU: 10000, MemoryBytes: 10 << 30}, GPU: model.GPUDemand{Count: 1}, Weight: 3},
		{Requests: model.Resources{MilliCPU: 10000, MemoryBytes: 10 << 30}, Weight: 1},
	}
	const gib = float64(1 << 30)
	tests := []struct {
		name     string
		capacity clusterCapacity
		cpu, mem float64 // per GPU, in cores and GiB
	}{
		{"ample spare", clusterCapacity{cpuPerMilli: 20, memoryPerMilli: 20 * gib / 1000}, 10 + 10.0/3/3, 10 + 10.0/3/3},
		{"short spare", clusterCapacity{cpuPerMilli: 12, memoryPerMilli: 100 * gib / 1000}, 10 + 10.0/3, 10 + 10.0/3*(10.0/3)/90},
		{"unknown cluster", clusterCapacity{}, 10 + 10.0/3, 10 + 10.0/3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cpu, mem := strandingRatios(shapes, nil, tt.capacity)
			if math.Abs(cpu-tt.cpu) > 1e-9 || math.Abs(mem*1000/gib-tt.mem) > 1e-9 {
				t.Fatalf("CPU, memory per GPU = %v cores, %v GiB; want %v, %v", cpu, mem*1000/gib, tt.cpu, tt.mem)
			}
		})
	}
}

// TestCPUOnlyPodsDoNotBreakWholeNodes is the multi-GPU collapse of issue 14 in
// small: an empty 8-GPU node with 12 cores per GPU, a half-used one with CPU to
// spare, a CPU-only node, and a mix with 8-GPU pods whose GPU pods ask 10 cores per
// GPU and whose CPU-only pods 2.8 more. Counted in full, the CPU-only pods' CPU made
// the empty node look short of CPU (12.8 cores per GPU asked), and a one-GPU pod
// with little CPU was sent to break it up, "feeding" its GPUs; the cluster has 8
// cores per GPU to spare, of which CPU-only pods need about a third, so the empty
// node is not short, and the pod goes to the half-used node.
func TestCPUOnlyPodsDoNotBreakWholeNodes(t *testing.T) {
	whole := gpuNode("whole", 8, "G2", 32<<30)
	whole.Allocatable.MilliCPU = 96000
	half := gpuNode("half", 8, "G2", 32<<30)
	half.Allocatable.MilliCPU = 128000
	for i := 0; i < 4; i++ {
		half.GPUs[i].Exclusive, half.GPUs[i].AllocatedBytes = true, 32<<30
	}
	half.Requested.MilliCPU = 40000
	cpuOnly := &model.Node{Name: "cpu", Allocatable: model.Resources{MilliCPU: 64000, MemoryBytes: 512 << 30, Pods: 110}}
	s := snapshotOf(whole, half, cpuOnly)
	mix := []Shape{
		{Requests: model.Resources{MilliCPU: 10000, MemoryBytes: 1 << 30}, GPU: model.GPUDemand{Count: 1}, Weight: 90},
		{Requests: model.Resources{MilliCPU: 80000, MemoryBytes: 8 << 30}, GPU: model.GPUDemand{Count: 8}, Weight: 3},
		{Requests: model.Resources{MilliCPU: 16000, MemoryBytes: 1 << 30}, Weight: 20},
	}
	p, _ := New("")
	p.SetWorkload(mix)
	pl, u := p.PlacePod(NewView(s), gpuPod("small", 1, 4000, 1<<30))
	if u != nil || pl.Node != "half" {
		t.Fatalf("a one-GPU, 4-core pod went to %q (%v), want half: whole must stay whole for 8-GPU pods (CPU per GPU expected: %.2f cores)",
			pl.Node, u, p.workload.cpuPerMilli)
	}
}

// TestModelBoundNodesDoNotPullOtherPods: a P100 node with 8 cores per GPU, which
// some pods of the mix require, and a half-used G2 node with CPU to spare; the mix
// asks 12 cores per GPU. Measured at the mix's 12, the empty P100 node is short of
// CPU for a third of its GPUs, and a pod that may run anywhere, with little CPU, is
// pulled there to "feed" them, taking a GPU from the pods that can run nowhere else
// (openb's gpuspec families). Measured at its own 8 cores per GPU, it is not short,
// and the pod goes to the G2 node.
func TestModelBoundNodesDoNotPullOtherPods(t *testing.T) {
	p100 := gpuNode("p100", 2, "P100", 16<<30)
	p100.Allocatable = model.Resources{MilliCPU: 16000, MemoryBytes: 120 << 30, Pods: 110}
	g2 := gpuNode("g2", 8, "G2", 32<<30)
	g2.Allocatable = model.Resources{MilliCPU: 96000, MemoryBytes: 384 << 30, Pods: 110}
	for i := 0; i < 4; i++ {
		g2.GPUs[i].Exclusive, g2.GPUs[i].AllocatedBytes = true, 32<<30
	}
	g2.Requested.MilliCPU = 40000
	bound := model.GPUDemand{Count: 1, Models: []string{"P100"}}
	mix := []Shape{
		{Requests: model.Resources{MilliCPU: 12000, MemoryBytes: 1 << 30}, GPU: model.GPUDemand{Count: 1}, Weight: 70},
		{Requests: model.Resources{MilliCPU: 12000, MemoryBytes: 1 << 30}, GPU: bound, Weight: 10},
	}
	p, _ := New("")
	p.SetWorkload(mix)
	pl, u := p.PlacePod(NewView(snapshotOf(p100, g2)), gpuPod("light", 1, 2000, 1<<30))
	if u != nil || pl.Node != "g2" {
		t.Fatalf("a one-GPU, 2-core pod that may run anywhere went to %q (%v), want g2: the P100 node is kept for the pods that need P100", pl.Node, u)
	}

	// Without model-bound pods in the mix, the pull stays: the P100 node is the
	// place for CPU-light pods.
	p.SetWorkload(mix[:1])
	pl, u = p.PlacePod(NewView(snapshotOf(p100, g2)), gpuPod("light", 1, 2000, 1<<30))
	if u != nil || pl.Node != "p100" {
		t.Fatalf("with no model-bound pods, a one-GPU, 2-core pod went to %q (%v), want p100, the node short of CPU", pl.Node, u)
	}
}
