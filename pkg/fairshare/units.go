package fairshare

import (
	"fmt"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
)

// epsilon absorbs floating-point error when amounts are compared.
const epsilon = 1e-9

// bytesPerMB is the unit of a Queue's memory figures (KAI Scheduler's megabytes).
const bytesPerMB = 1e6

const gpuModelPrefix = "gpu/"

// Amounts maps resources to amounts in the units of model.QueueResource.
type Amounts map[model.ResourceName]float64

// Add returns a + b as a new map.
func (a Amounts) Add(b Amounts) Amounts {
	out := make(Amounts, len(a)+len(b))
	for r, v := range a {
		out[r] = v
	}
	for r, v := range b {
		out[r] += v
	}
	return out
}

// gpuModelOf returns the model of a per-model GPU resource, and false for others.
func gpuModelOf(r model.ResourceName) (string, bool) {
	return strings.CutPrefix(string(r), gpuModelPrefix)
}

// resourceTitle names a resource for people: "GPU", "CPU", "memory", "NVIDIA A10G GPU".
func resourceTitle(r model.ResourceName) string {
	switch r {
	case model.ResourceGPU:
		return "GPU"
	case model.ResourceCPU:
		return "CPU"
	case model.ResourceMemory:
		return "memory"
	}
	if m, ok := gpuModelOf(r); ok {
		return m + " GPU"
	}
	return string(r)
}

// specField is where the resource is set in a Queue's spec.
func specField(r model.ResourceName) string {
	if m, ok := gpuModelOf(r); ok {
		return fmt.Sprintf("spec.resources.gpuModels[model=%q]", m)
	}
	return "spec.resources." + string(r)
}

// amount formats v in the unit the Queue spec uses for r: megabytes for memory,
// millicores for cpu, GPUs otherwise. -1 stays -1.
func amount(r model.ResourceName, v float64) string {
	if v == model.Unlimited {
		return "-1"
	}
	switch r {
	case model.ResourceMemory:
		return formatNumber(v/bytesPerMB) + " MB"
	case model.ResourceCPU:
		return formatNumber(v) + " millicores"
	}
	return formatNumber(v)
}

// ofAmounts formats "used of limit" in the spec's unit: "8 of 8", "3000 of 4000
// millicores", "2000 of 2000 MB".
func ofAmounts(r model.ResourceName, used, limit float64) string {
	unit := ""
	switch r {
	case model.ResourceMemory:
		used, limit, unit = used/bytesPerMB, limit/bytesPerMB, " MB"
	case model.ResourceCPU:
		unit = " millicores"
	}
	return formatNumber(used) + " of " + formatNumber(limit) + unit
}

func formatNumber(v float64) string {
	// Round away binary noise (0.30000000000000004) before printing.
	rounded, _ := strconv.ParseFloat(strconv.FormatFloat(v, 'f', 6, 64), 64)
	return strconv.FormatFloat(rounded, 'f', -1, 64)
}
