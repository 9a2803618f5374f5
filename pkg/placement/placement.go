package placement

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Placement is where one pod goes.
type Placement struct {
	Pod  model.PodID
	Node string
	// GPUs are the GPUs (or shares of them) the pod takes on Node; empty for a pod
	// that asks for no GPU.
	GPUs []model.GPUBinding
	// Volumes are the available PersistentVolumes the pod's WaitForFirstConsumer
	// claims take on Node, in claim order ("" where a volume is to be provisioned
	// there); nil when the pod has no such claim. See VolumesFor.
	Volumes []string
}

// Unschedulable says why a pod or gang cannot be placed, in a user's words, e.g.
// "needs 3 pods with 1 H100 each, at most 2 fit (node-a, node-b)".
type Unschedulable struct {
	Message string
	// Reasons counts nodes by the reason they were rejected
	// ("insufficient GPU memory": 12).
	Reasons map[string]int
}

func (u *Unschedulable) Error() string { return u.Message }

// reasonSummary renders Reasons as "12 insufficient GPU memory, 3 untolerated taint
// x", most frequent first, so the common cause leads.
func reasonSummary(reasons map[string]int) string {
	type count struct {
		reason string
		nodes  int
	}
	counts := make([]count, 0, len(reasons))
	for r, n := range reasons {
		counts = append(counts, count{r, n})
	}
	sort.Slice(counts, func(i, j int) bool {
		if counts[i].nodes != counts[j].nodes {
			return counts[i].nodes > counts[j].nodes
		}
		return counts[i].reason < counts[j].reason
	})
	parts := make([]string, len(counts))
	for i, c := range counts {
		parts[i] = fmt.Sprintf("%d %s", c.nodes, c.reason)
	}
	return strings.Join(parts, ", ")
}

// DescribeDemand says what a pod asks for in a user's words: "1 H100",
// "2 GPUs", "a 20 GiB share of 1 GPU", "4 CPUs and 16 GiB memory".
func DescribeDemand(p *model.Pod) string {
	d := p.GPU
	if d.Count == 0 {
		cpus := "CPUs"
		if p.Requests.MilliCPU == 1000 {
			cpus = "CPU"
		}
		return fmt.Sprintf("%s %s and %s memory", formatCPU(p.Requests.MilliCPU), cpus, FormatBytes(p.Requests.MemoryBytes))
	}
	kind := "GPU"
	if len(d.Models) > 0 {
		kind = strings.Join(d.Models, " or ")
	}
	plural := ""
	if d.Count > 1 && len(d.Models) == 0 {
		plural = "s"
	}
	unit := fmt.Sprintf("%d %s%s", d.Count, kind, plural)
	switch {
	case d.MemoryBytes > 0:
		return fmt.Sprintf("a %s share of %s", FormatBytes(d.MemoryBytes), unit)
	case d.FractionMilli > 0:
		return fmt.Sprintf("a %s share of %s", strconv.FormatFloat(float64(d.FractionMilli)/model.MilliPerGPU, 'f', -1, 64), unit)
	}
	return unit
}

func formatCPU(milli int64) string {
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
}

// FormatBytes shows GPU memory the way messages to users do: in GiB, the unit
// nvidia-smi and the node agent report, or MiB below one GiB.
func FormatBytes(b int64) string {
	const gib = 1 << 30
	switch {
	case b%gib == 0:
		return fmt.Sprintf("%d GiB", b/gib)
	case b >= gib:
		return fmt.Sprintf("%.1f GiB", float64(b)/gib)
	default:
		return fmt.Sprintf("%d MiB", b>>20)
	}
}
