// From the allocator's device choices to the GPUs the core books.

package dra

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// BookedFor returns the GPUs chosen per node as the pod is booked on them: a share
// for the larger of the memory its claim consumes and startFree × the GPU's memory
// (model.GPUDemand.BytesOnMemory), so that a 20Gi claim of a vLLM engine at 0.75 on
// an 80 GiB GPU is booked, placed and annotated for the 60 GiB it needs, and keeps
// that booking once the allocation comes back through the informer (the cache reads
// the gantry.dev/gpus annotation before the claim's consumed capacity). Whole GPUs,
// and every GPU when startFree is 0, are as chosen; choices is not changed.
func BookedFor(snap *model.Snapshot, choices map[string][]model.GPUBinding, startFree float64) map[string][]model.GPUBinding {
	if startFree <= 0 || len(choices) == 0 {
		return choices
	}
	out := make(map[string][]model.GPUBinding, len(choices))
	for node, gpus := range choices {
		n := snap.Node(node)
		booked := make([]model.GPUBinding, len(gpus))
		for i, b := range gpus {
			if !b.Whole && n != nil {
				if g := n.GPUByIndex(b.Index); g != nil {
					d := model.GPUDemand{Count: 1, MemoryBytes: b.MemoryBytes, StartFreeFraction: startFree}
					b.MemoryBytes = d.BytesOnMemory(g.MemoryBytes)
				}
			}
			booked[i] = b
		}
		out[node] = booked
	}
	return out
}

// gpusOfAllocation turns the gpu.gantry.dev devices of allocation results on a node
// into the GPUs the core books: a whole GPU, or a share of the memory consumed.
func gpusOfAllocation(snap *model.Snapshot, node string, results []resourceapi.AllocationResult) ([]model.GPUBinding, error) {
	var out []model.GPUBinding
	n := snap.Node(node)
	for _, res := range results {
		for _, r := range res.Devices.Results {
			if r.Driver != names.DriverName {
				continue
			}
			index, err := DeviceIndex(r.Device)
			var g *model.GPU
			if err == nil && n != nil {
				g = n.GPUByIndex(index)
			}
			if g == nil || r.Pool != node {
				return nil, fmt.Errorf("device %s/%s is not a GPU of node %s", r.Pool, r.Device, node)
			}
			b, _ := GPUOfResult(r, node, g.MemoryBytes)
			out = append(out, b)
		}
	}
	return out, nil
}

// DeviceIndex reads the model index from a device name DeviceName made: a GPU's
// NVML index, or a MIG device's MIGIndex.
func DeviceIndex(name string) (int, error) {
	s, ok := strings.CutPrefix(name, "gpu-")
	if parent, mig, isMIG := strings.Cut(s, "-mig-"); ok && isMIG {
		gi, ci, _ := strings.Cut(mig, "-")
		p, err1 := strconv.Atoi(parent)
		g, err2 := strconv.Atoi(gi)
		c, err3 := strconv.Atoi(ci)
		i, inRange := MIGIndex(p, g, c)
		if err1 != nil || err2 != nil || err3 != nil || !inRange || DeviceName(i) != name {
			return 0, fmt.Errorf("not a GPU device: %s", name)
		}
		return i, nil
	}
	i, err := strconv.Atoi(s)
	// Only the name DeviceName gives: "gpu--1" would be index -1 and "gpu-01" an
	// alias of gpu-1 (fuzz findings).
	if !ok || err != nil || i < 0 || i >= migIndexBase || DeviceName(i) != name {
		return 0, fmt.Errorf("not a GPU device: %s", name)
	}
	return i, nil
}
