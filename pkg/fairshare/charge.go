package fairshare

import "github.com/gantry-dev/gantry/pkg/model"

// typicalGPUBytes converts a memory share to a GPU fraction before the pod is placed,
// when the GPU it will land on is not known: an 80 GB GPU, the most common data-centre
// size. Once placed, the share is charged against its real GPU.
const typicalGPUBytes = 80e9

// PodCharge is what a pod counts against its queue: millicores, bytes, and GPUs (a
// share as its fraction of a GPU), per model where the model is known. A bound pod
// (Node set, node given) is charged its real shares on that node's GPUs; a pending
// one its demand, estimated.
func PodCharge(p *model.Pod, node *model.Node) Amounts {
	return AddPodCharge(Amounts{}, p, node)
}

// AddPodCharge adds PodCharge(p, node) to a and returns a. A cycle charges every pod
// of the cluster, so this path allocates nothing once a's keys exist.
func AddPodCharge(a Amounts, p *model.Pod, node *model.Node) Amounts {
	a[model.ResourceCPU] += float64(p.Requests.MilliCPU)
	a[model.ResourceMemory] += float64(p.Requests.MemoryBytes)
	if p.Bound() && len(p.GPUs) > 0 {
		for _, b := range p.GPUs {
			gpus, modelName := bindingGPUs(p, b, node)
			a[model.ResourceGPU] += gpus
			if modelName != "" {
				a[model.GPUModelResource(modelName)] += gpus
			}
		}
		return a
	}
	gpus := PendingGPUs(p)
	if gpus > 0 {
		a[model.ResourceGPU] += gpus
		if len(p.GPU.Models) == 1 {
			a[model.GPUModelResource(p.GPU.Models[0])] += gpus
		}
	}
	return a
}

// BoundGPUs is the GPU part of PodCharge for a bound pod.
func BoundGPUs(p *model.Pod, node *model.Node) float64 {
	var gpus float64
	for _, b := range p.GPUs {
		g, _ := bindingGPUs(p, b, node)
		gpus += g
	}
	return gpus
}

func bindingGPUs(p *model.Pod, b model.GPUBinding, node *model.Node) (float64, string) {
	var g *model.GPU
	if node != nil {
		g = node.GPUByIndex(b.Index)
	}
	modelName := ""
	if g != nil {
		modelName = g.Model
	}
	switch {
	case b.Whole:
		return 1, modelName
	case g != nil && g.MemoryBytes > 0:
		return float64(b.MemoryBytes) / float64(g.MemoryBytes), modelName
	case p.GPU.FractionMilli > 0:
		return float64(p.GPU.FractionMilli) / model.MilliPerGPU, modelName
	default:
		return min(1, float64(b.MemoryBytes)/typicalGPUBytes), modelName
	}
}

// PendingGPUs is the GPU part of PodCharge for a pod not placed yet.
func PendingGPUs(p *model.Pod) float64 {
	d := p.GPU
	switch {
	case d.Count == 0:
		return 0
	case d.Whole():
		return float64(d.Count)
	case d.FractionMilli > 0:
		return float64(d.Count) * float64(d.FractionMilli) / model.MilliPerGPU
	default:
		return float64(d.Count) * min(1, float64(d.MemoryBytes)/typicalGPUBytes)
	}
}
