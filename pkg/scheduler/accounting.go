package scheduler

import (
	"fmt"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
)

// Shares divides the cluster between the snapshot's queues. It returns nil Shares when
// there are no queues: then pods schedule first come, first served, as with
// kube-scheduler. A tree with problems still yields Shares for its healthy part.
func (s *Scheduler) Shares(snap *model.Snapshot) (*fairshare.Shares, error) {
	if len(snap.Queues) == 0 {
		return nil, nil
	}
	capacity := fairshare.Amounts{}
	for _, n := range snap.Nodes {
		if n.Unschedulable {
			continue
		}
		capacity[model.ResourceCPU] += float64(n.Allocatable.MilliCPU)
		capacity[model.ResourceMemory] += float64(n.Allocatable.MemoryBytes)
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if !g.Healthy {
				continue
			}
			capacity[model.ResourceGPU]++
			if g.Model != "" {
				capacity[model.GPUModelResource(g.Model)]++
			}
		}
	}
	usage := map[string]fairshare.Usage{}
	for _, p := range snap.Pods {
		if p.Queue == "" || p.Foreign {
			continue
		}
		u := usage[p.Queue]
		if u.Allocated == nil {
			u = fairshare.Usage{Allocated: fairshare.Amounts{}, Requested: fairshare.Amounts{}}
		}
		a := boundAmounts(snap, p)
		for r, v := range a {
			u.Requested[r] += v
			if p.Bound() {
				u.Allocated[r] += v
			}
		}
		usage[p.Queue] = u
	}
	return fairshare.Compute(snap.Queues, capacity, usage)
}

// boundAmounts is what a pod counts against its queue: for a bound pod, its real GPU
// shares on its node's GPUs (with their model); for a pending one, its demand.
func boundAmounts(snap *model.Snapshot, p *model.Pod) fairshare.Amounts {
	if !p.Bound() || len(p.GPUs) == 0 {
		return podAmounts(p)
	}
	a := fairshare.Amounts{
		model.ResourceCPU:    float64(p.Requests.MilliCPU),
		model.ResourceMemory: float64(p.Requests.MemoryBytes),
	}
	n := snap.Node(p.Node)
	for _, b := range p.GPUs {
		gpus := 1.0
		model_ := ""
		if n != nil && b.Index < len(n.GPUs) {
			g := &n.GPUs[b.Index]
			model_ = g.Model
			if !b.Whole && g.MemoryBytes > 0 {
				gpus = float64(b.MemoryBytes) / float64(g.MemoryBytes)
			}
		}
		a[model.ResourceGPU] += gpus
		if model_ != "" {
			a[model.GPUModelResource(model_)] += gpus
		}
	}
	return a
}

// podAmounts is what a pod asks of its queue: GPUs (a share counts as its fraction),
// millicores and bytes. A share given in bytes counts as a fraction of the smallest
// GPU it could land on, which is unknown before placement; it is counted as a fraction
// only when given as one, else as one GPU's worth at most.
func podAmounts(p *model.Pod) fairshare.Amounts {
	a := fairshare.Amounts{
		model.ResourceCPU:    float64(p.Requests.MilliCPU),
		model.ResourceMemory: float64(p.Requests.MemoryBytes),
	}
	if p.GPU.Count == 0 {
		return a
	}
	per := 1.0
	switch {
	case p.GPU.FractionMilli > 0:
		per = float64(p.GPU.FractionMilli) / model.MilliPerGPU
	case p.GPU.MemoryBytes > 0:
		per = shareOfTypicalGPU(p.GPU.MemoryBytes)
	}
	a[model.ResourceGPU] = per * float64(p.GPU.Count)
	if len(p.GPU.Models) == 1 {
		a[model.GPUModelResource(p.GPU.Models[0])] = per * float64(p.GPU.Count)
	}
	return a
}

// shareOfTypicalGPU converts a memory share to a GPU fraction before the GPU is known,
// against an 80 GB GPU (the most common data-centre size), at most one GPU.
func shareOfTypicalGPU(bytes int64) float64 {
	const typical = 80e9
	f := float64(bytes) / typical
	if f > 1 {
		return 1
	}
	return f
}

func podsAmounts(pods []*model.Pod) fairshare.Amounts {
	total := fairshare.Amounts{}
	for _, p := range pods {
		for r, v := range podAmounts(p) {
			total[r] += v
		}
	}
	return total
}

// withinQuota refuses non-preemptible work beyond its queue's guaranteed quota: it
// could never be reclaimed, so it may not borrow.
func withinQuota(shares *fairshare.Shares, queue string, amounts fairshare.Amounts) error {
	qs := shares.Queue(queue)
	if qs == nil {
		return nil
	}
	for r, add := range amounts {
		rs := qs.Resources[r]
		if rs == nil || add <= 0 || rs.Quota == model.Unlimited {
			continue
		}
		if rs.Allocated+add > rs.Quota+1e-9 {
			return fmt.Errorf("queue %s would go past its %s quota (%.4g in use, %.4g more asked for) with non-preemptible work, which may not borrow: mark the work preemptible (gantry.dev/preemptible: \"true\" or a preemptible priority class such as train) or raise the queue's quota",
				queue, r, rs.Allocated, add)
		}
	}
	return nil
}
