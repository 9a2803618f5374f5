package scheduler

import (
	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
)

// Shares sums every pod and every GPU of the cluster, each cycle: 40-50 ms at
// 100,000 pods on 5,000 nodes. An Order made by NewOrder keeps the same sums across
// cycles instead, charged on change: per gang (Refresh) and per node (RefreshNode),
// and ScheduleOrdered divides the cluster from them. The sums are the same as
// Shares', added in another order (float rounding aside, which Shares' walk over a
// map has too); a queue that holds nothing holds exactly nothing.

// amounts is fairshare.Amounts in fields: a gang's charges are kept for every gang,
// so they must be small.
type amounts struct {
	cpu, memory, gpu float64
	// models are the per-model GPU resources (GPUModelResource), rarely set.
	models map[model.ResourceName]float64
}

func (a *amounts) add(b *amounts, sign float64) {
	a.cpu += sign * b.cpu
	a.memory += sign * b.memory
	a.gpu += sign * b.gpu
	for r, v := range b.models {
		if a.models == nil {
			a.models = map[model.ResourceName]float64{}
		}
		a.models[r] += sign * v
	}
}

// fold adds x, a PodCharge, to a.
func (a *amounts) fold(x fairshare.Amounts) {
	for r, v := range x {
		switch r {
		case model.ResourceCPU:
			a.cpu += v
		case model.ResourceMemory:
			a.memory += v
		case model.ResourceGPU:
			a.gpu += v
		default:
			if a.models == nil {
				a.models = map[model.ResourceName]float64{}
			}
			a.models[r] += v
		}
	}
}

func (a *amounts) toAmounts() fairshare.Amounts {
	out := fairshare.Amounts{model.ResourceCPU: a.cpu, model.ResourceMemory: a.memory, model.ResourceGPU: a.gpu}
	for r, v := range a.models {
		out[r] = v
	}
	return out
}

// usage is fairshare.Usage in fields.
type usage struct {
	requested, allocated, nonPreemptible amounts
}

func (u *usage) add(v *usage, sign float64) {
	u.requested.add(&v.requested, sign)
	u.allocated.add(&v.allocated, sign)
	u.nonPreemptible.add(&v.nonPreemptible, sign)
}

// queueCharge is what one gang's pods charge one queue.
type queueCharge struct {
	queue string
	usage
}

type queueSum struct {
	usage
	// gangs charging the queue; at zero the queue's sums are dropped, not left at a
	// rounding error.
	gangs int
}

// charges are the sums Shares makes, kept.
type charges struct {
	gangs    map[model.GangID][]queueCharge
	queues   map[string]*queueSum
	nodes    map[string]amounts
	capacity amounts
	scratch  fairshare.Amounts
}

func newCharges() *charges {
	return &charges{gangs: map[model.GangID][]queueCharge{}, queues: map[string]*queueSum{},
		nodes: map[string]amounts{}, scratch: fairshare.Amounts{}}
}

// refreshGang charges g's pods again, as Shares charges every pod.
func (c *charges) refreshGang(snap *model.Snapshot, g model.GangID) {
	for _, qc := range c.gangs[g] {
		q := c.queues[qc.queue]
		q.add(&qc.usage, -1)
		if q.gangs--; q.gangs == 0 {
			delete(c.queues, qc.queue)
		}
	}
	delete(c.gangs, g)
	gang := snap.Gangs[g]
	if gang == nil {
		return
	}
	var out []queueCharge
	for _, id := range gang.Members {
		p := snap.Pods[id]
		if p == nil || p.Foreign {
			continue
		}
		queue := snap.QueueOf(p.Queue)
		if queue == "" {
			continue
		}
		i := 0
		for i < len(out) && out[i].queue != queue {
			i++
		}
		if i == len(out) {
			out = append(out, queueCharge{queue: queue})
		}
		var n *model.Node
		if p.Bound() {
			n = snap.Node(p.Node)
		}
		clear(c.scratch)
		fairshare.AddPodCharge(c.scratch, p, n)
		out[i].requested.fold(c.scratch)
		if p.Bound() {
			out[i].allocated.fold(c.scratch)
			if !p.Preemptible {
				out[i].nonPreemptible.fold(c.scratch)
			}
		}
	}
	if len(out) == 0 {
		return
	}
	for i := range out {
		q := c.queues[out[i].queue]
		if q == nil {
			q = &queueSum{}
			c.queues[out[i].queue] = q
		}
		q.add(&out[i].usage, 1)
		q.gangs++
	}
	c.gangs[g] = out
}

// refreshNode counts the node's capacity again, as Shares counts every node.
func (c *charges) refreshNode(snap *model.Snapshot, name string) {
	if old, ok := c.nodes[name]; ok {
		c.capacity.add(&old, -1)
		delete(c.nodes, name)
	}
	n := snap.Node(name)
	if n == nil || n.Unschedulable {
		return
	}
	a := amounts{cpu: float64(n.Allocatable.MilliCPU), memory: float64(n.Allocatable.MemoryBytes)}
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !g.Healthy {
			continue
		}
		a.gpu++
		if g.Model != "" {
			if a.models == nil {
				a.models = map[model.ResourceName]float64{}
			}
			a.models[model.GPUModelResource(g.Model)]++
		}
	}
	c.capacity.add(&a, 1)
	c.nodes[name] = a
}

// shares divides the cluster from the kept sums: Shares, without the walk.
func (c *charges) shares(snap *model.Snapshot) (*fairshare.Shares, error) {
	if len(snap.Queues) == 0 {
		return nil, nil
	}
	byQueue := make(map[string]fairshare.Usage, len(c.queues))
	for q, s := range c.queues {
		byQueue[q] = fairshare.Usage{Allocated: s.allocated.toAmounts(), Requested: s.requested.toAmounts(),
			NonPreemptible: s.nonPreemptible.toAmounts()}
	}
	capacity := c.capacity.toAmounts()
	for r, v := range capacity {
		if v == 0 && r != model.ResourceCPU && r != model.ResourceMemory && r != model.ResourceGPU {
			delete(capacity, r) // a model whose last GPU left, as Shares would not list it
		}
	}
	return fairshare.Compute(snap.Queues, capacity, byQueue)
}
