package scheduler

import (
	"fmt"
	"maps"
	"math"
	"math/rand"
	"slices"
	"sort"
	"testing"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
)

// sharesDiff describes the first queue resource on which a and b differ beyond
// float rounding, or "".
func sharesDiff(snap *model.Snapshot, a, b *fairshare.Shares) string {
	names := make([]string, 0, len(snap.Queues))
	for q := range snap.Queues {
		names = append(names, q)
	}
	sort.Strings(names)
	near := func(x, y float64) bool { return math.Abs(x-y) <= 1e-9*math.Max(1, math.Abs(y)) }
	for _, q := range names {
		qa, qb := a.Queue(q), b.Queue(q)
		if (qa == nil) != (qb == nil) {
			return fmt.Sprintf("queue %s: %v against %v", q, qa, qb)
		}
		if qa == nil {
			continue
		}
		if len(qa.Resources) != len(qb.Resources) {
			return fmt.Sprintf("queue %s: resources %d against %d", q, len(qa.Resources), len(qb.Resources))
		}
		for r, ra := range qa.Resources {
			rb := qb.Resources[r]
			if rb == nil || !near(ra.Requested, rb.Requested) || !near(ra.Allocated, rb.Allocated) ||
				!near(ra.AllocatedNonPreemptible, rb.AllocatedNonPreemptible) || !near(ra.FairShare, rb.FairShare) {
				return fmt.Sprintf("queue %s, %s: %+v against %+v", q, r, ra, rb)
			}
		}
		if !near(a.DominantShare(q), b.DominantShare(q)) {
			return fmt.Sprintf("queue %s: dominant share %v against %v", q, a.DominantShare(q), b.DominantShare(q))
		}
	}
	return ""
}

func chargedSnapshot(r *rand.Rand) *model.Snapshot {
	snap := randomOrderSnapshot(r, 150)
	snap.Queues = map[string]*model.Queue{
		"qa": {Name: "qa", Resources: map[model.ResourceName]model.QueueResource{model.ResourceGPU: {Quota: 4, Limit: model.Unlimited, OverQuotaWeight: 1}}},
		"qb": {Name: "qb", Resources: map[model.ResourceName]model.QueueResource{model.ResourceGPU: {Quota: 2, Limit: model.Unlimited, OverQuotaWeight: 2}}},
	}
	for i := 0; i < 6; i++ {
		snap.AddNode(randomNode(r, i))
	}
	for _, p := range snap.Pods {
		chargePod(r, p)
	}
	return snap
}

func randomNode(r *rand.Rand, i int) *model.Node {
	n := &model.Node{Name: fmt.Sprintf("n%d", i), Unschedulable: r.Intn(5) == 0,
		Allocatable: model.Resources{MilliCPU: 64000, MemoryBytes: 256 << 30}}
	for g := 0; g < 4; g++ {
		n.GPUs = append(n.GPUs, model.GPU{Index: g, Healthy: r.Intn(6) != 0, Model: []string{"", "H100", "A100"}[r.Intn(3)], MemoryBytes: 80 << 30})
	}
	return n
}

// chargePod gives p requests, a GPU demand and, when bound, GPUs on its node.
func chargePod(r *rand.Rand, p *model.Pod) {
	p.Requests = model.Resources{MilliCPU: int64(100 * (1 + r.Intn(8))), MemoryBytes: int64(1+r.Intn(4)) << 30}
	p.GPU = model.GPUDemand{Count: r.Intn(3)}
	p.Preemptible = r.Intn(2) == 0
	p.GPUs = nil
	if p.Bound() {
		p.Node = fmt.Sprintf("n%d", r.Intn(7)) // n6 does not exist
		for i := 0; i < p.GPU.Count; i++ {
			p.GPUs = append(p.GPUs, model.GPUBinding{Index: i, Whole: true})
		}
	}
}

// The queues' charges kept gang by gang and node by node divide the cluster as
// Shares does from scratch, whatever the changes: pods bound and unbound, gangs
// moved, deleted and created, nodes changed, cordoned and removed.
func TestChargesKeptAsShares(t *testing.T) {
	r := rand.New(rand.NewSource(3))
	snap := chargedSnapshot(r)
	o := NewOrder()
	for id := range snap.Gangs {
		o.Refresh(snap, id)
	}
	for _, n := range snap.Nodes {
		o.RefreshNode(snap, n.Name)
	}
	next := 1000
	for step := 0; step < 2000; step++ {
		id := randomGang(r, snap)
		g := *snap.Gangs[id]
		switch r.Intn(6) {
		case 0:
			p := *snap.Pods[g.Members[r.Intn(len(g.Members))]]
			mutatePod(r, &p)
			chargePod(r, &p)
			snap.Pods[p.ID] = &p
		case 1:
			// a gang's queue is stamped on its pods (pkg/kube/cache applyGang)
			g.Queue = []string{"", "qa", "qb", "gone"}[r.Intn(4)]
			for _, m := range g.Members {
				p := *snap.Pods[m]
				p.Queue = g.Queue
				snap.Pods[m] = &p
			}
			snap.Gangs[id] = &g
		case 2:
			for _, m := range g.Members {
				delete(snap.Pods, m)
			}
			delete(snap.Gangs, id)
		case 3:
			i := r.Intn(7)
			if r.Intn(4) == 0 {
				snap.RemoveNode(fmt.Sprintf("n%d", i))
			} else {
				snap.AddNode(randomNode(r, i))
			}
			o.RefreshNode(snap, fmt.Sprintf("n%d", i))
			for _, gid := range slices.Sorted(maps.Keys(snap.Gangs)) { // the gangs bound there: every gang, simply
				o.Refresh(snap, gid)
			}
		default:
			id = model.GangID(fmt.Sprintf("g%04d", next))
			next++
			addRandomGang(r, snap, string(id))
			for _, m := range snap.Gangs[id].Members {
				chargePod(r, snap.Pods[m])
			}
		}
		o.Refresh(snap, id)
		kept, keptErr := o.Shares(snap)
		fresh, freshErr := (&Scheduler{}).Shares(snap)
		if (keptErr == nil) != (freshErr == nil) {
			t.Fatalf("step %d: error %v against %v", step, keptErr, freshErr)
		}
		if d := sharesDiff(snap, kept, fresh); d != "" {
			t.Fatalf("step %d: kept charges differ from Shares: %s", step, d)
		}
	}
}
