package scheduler

import (
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
		queue := snap.QueueOf(p.Queue)
		if queue == "" || p.Foreign {
			continue
		}
		u := usage[queue]
		if u.Allocated == nil {
			u = fairshare.Usage{Allocated: fairshare.Amounts{}, Requested: fairshare.Amounts{}, NonPreemptible: fairshare.Amounts{}}
		}
		a := boundAmounts(snap, p)
		for r, v := range a {
			u.Requested[r] += v
			if p.Bound() {
				u.Allocated[r] += v
				if !p.Preemptible {
					u.NonPreemptible[r] += v
				}
			}
		}
		usage[queue] = u
	}
	return fairshare.Compute(snap.Queues, capacity, usage)
}

// boundAmounts is what a pod counts against its queue, on its node if bound.
func boundAmounts(snap *model.Snapshot, p *model.Pod) fairshare.Amounts {
	var n *model.Node
	if p.Bound() {
		n = snap.Node(p.Node)
	}
	return fairshare.PodCharge(p, n)
}

// podAmounts is what a pending pod asks of its queue.
func podAmounts(p *model.Pod) fairshare.Amounts { return fairshare.PodCharge(p, nil) }

func podsAmounts(pods []*model.Pod) fairshare.Amounts {
	total := fairshare.Amounts{}
	for _, p := range pods {
		for r, v := range podAmounts(p) {
			total[r] += v
		}
	}
	return total
}
