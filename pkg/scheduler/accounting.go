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
	// Every pod of the cluster is charged each cycle: add into the queue's sums
	// directly, with no map per pod.
	usage := map[string]fairshare.Usage{}
	for _, p := range snap.Pods {
		queue := snap.QueueOf(p.Queue)
		if queue == "" || p.Foreign {
			continue
		}
		u, ok := usage[queue]
		if !ok {
			u = fairshare.Usage{Allocated: fairshare.Amounts{}, Requested: fairshare.Amounts{}, NonPreemptible: fairshare.Amounts{}}
			usage[queue] = u
		}
		var n *model.Node
		if p.Bound() {
			n = snap.Node(p.Node)
		}
		fairshare.AddPodCharge(u.Requested, p, n)
		if p.Bound() {
			fairshare.AddPodCharge(u.Allocated, p, n)
			if !p.Preemptible {
				fairshare.AddPodCharge(u.NonPreemptible, p, n)
			}
		}
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
