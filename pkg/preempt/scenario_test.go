package preempt

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// This file builds scenarios in the manner of KAI Scheduler's integration tests:
// nodes, queues, running gangs and a pending gang, written as data, turned into a
// model.Snapshot, a placement.View and fair shares exactly as the cycle has them.

const (
	GiB = int64(1) << 30
	// now is the scenarios' clock; StartedAt is now minus startedAgo.
	now = int64(1_000_000)
)

type nodeSpec struct {
	name string
	gpus int
	// gpuMemory defaults to 80 GiB, model to "NVIDIA H100".
	gpuMemory int64
	model     string
	// cpu (millicores) and memory default to 64 cores and 512 GiB.
	cpu, memory int64
	// liveFree overrides, per GPU index, the free memory the node agent measured,
	// which otherwise agrees with the bookkeeping.
	liveFree map[int]int64
}

type queueSpec struct {
	name, parent         string
	quota, limit, weight float64
}

type podSpec struct {
	name string
	// node defaults to the scenario's first node, for running gangs.
	node        string
	cpu, memory int64
	// gpus are what a running pod holds (whole(i), share(i, bytes)).
	gpus []model.GPUBinding
	// demand is what a pending pod asks for; a running pod's follows from gpus.
	demand model.GPUDemand
	// choices and preemptChoices are a pending pod's DeviceChoices and
	// PreemptionDeviceChoices (devices a DRA allocator chose).
	choices, preemptChoices map[string][]model.GPUBinding
	elastic                 bool
	notPreemptible          bool
	foreign                 bool
	terminating             bool
	// startedAgo defaults to the gang's, then to an hour.
	startedAgo int64
}

type gangSpec struct {
	// id is "namespace/name"; pod IDs are id + "-" + pod name.
	id          string
	queue       string
	priority    int32
	preemptible bool
	// min defaults to the number of members that are not elastic.
	min        int
	startedAgo int64
	pods       []podSpec
}

func whole(index int) model.GPUBinding { return model.GPUBinding{Index: index, Whole: true} }
func share(index int, bytes int64) model.GPUBinding {
	return model.GPUBinding{Index: index, MemoryBytes: bytes}
}
func wholeGPUs(count int) model.GPUDemand { return model.GPUDemand{Count: count} }
func memoryShare(bytes int64) model.GPUDemand {
	return model.GPUDemand{Count: 1, MemoryBytes: bytes}
}

// world is a built scenario.
type world struct {
	snapshot *model.Snapshot
	queues   []queueSpec
	pending  *model.Gang
}

// build makes the world: running gangs bound where their pods say, the pending gang
// and the queued ones (other pending work, which counts in fair shares) unbound.
func build(t testing.TB, nodes []nodeSpec, queues []queueSpec, running []gangSpec, pending gangSpec, queued ...gangSpec) *world {
	t.Helper()
	s := model.NewSnapshot()
	s.Now = now
	for _, ns := range nodes {
		s.AddNode(newNode(ns))
	}
	for _, q := range queues {
		res := map[model.ResourceName]model.QueueResource{model.ResourceGPU: {Quota: q.quota, Limit: q.limit, OverQuotaWeight: q.weight}}
		s.Queues[q.name] = &model.Queue{Name: q.name, Parent: q.parent, Priority: 100, Resources: res}
	}
	root := placement.NewView(s)
	for _, gs := range running {
		g := addGang(s, gs)
		for _, pod := range s.GangPods(g) {
			if pod.Node == "" {
				pod.Node = nodes[0].name
			}
			pod.StartedAt = now - pod.StartedAt
			if s.Node(pod.Node) == nil {
				continue // bound to a node that is gone: known, booked nowhere
			}
			root.Assign(pod, placement.Placement{Pod: pod.ID, Node: pod.Node, GPUs: pod.GPUs})
		}
	}
	root.Commit()
	for _, ns := range nodes {
		n := s.Node(ns.name)
		for index, free := range ns.liveFree {
			n.GPUs[index].LiveFreeBytes = free
		}
	}
	w := &world{snapshot: s, queues: queues}
	for _, gs := range append(queued, pending) {
		w.pending = addGang(s, gs)
		for _, pod := range s.GangPods(w.pending) {
			pod.Node, pod.GPUs, pod.StartedAt = "", nil, 0
		}
	}
	return w
}

func newNode(ns nodeSpec) *model.Node {
	n := &model.Node{
		Name:        ns.name,
		Allocatable: model.Resources{MilliCPU: or(ns.cpu, 64000), MemoryBytes: or(ns.memory, 512*GiB), Pods: 110},
	}
	for i := 0; i < ns.gpus; i++ {
		memory := or(ns.gpuMemory, 80*GiB)
		modelName := ns.model
		if modelName == "" {
			modelName = "NVIDIA H100"
		}
		n.GPUs = append(n.GPUs, model.GPU{
			Index: i, UUID: fmt.Sprintf("GPU-%s-%d", ns.name, i), Model: modelName,
			MemoryBytes: memory, LiveFreeBytes: memory, Healthy: true,
		})
	}
	return n
}

func addGang(s *model.Snapshot, gs gangSpec) *model.Gang {
	g := &model.Gang{ID: model.GangID(gs.id), Queue: gs.queue, Priority: gs.priority, Preemptible: gs.preemptible, MinMember: gs.min}
	core := 0
	for _, ps := range gs.pods {
		demand := ps.demand
		if len(ps.gpus) > 0 {
			demand = model.GPUDemand{Count: len(ps.gpus)}
			if !ps.gpus[0].Whole {
				demand.MemoryBytes = ps.gpus[0].MemoryBytes
			}
		}
		pod := &model.Pod{
			ID: model.PodID(gs.id + "-" + ps.name), UID: gs.id + "-" + ps.name, Gang: g.ID,
			Queue: gs.queue, Priority: gs.priority, Preemptible: gs.preemptible && !ps.notPreemptible,
			Requests: model.Resources{MilliCPU: or(ps.cpu, 1000), MemoryBytes: or(ps.memory, GiB), Pods: 1},
			GPU:      demand, Node: ps.node, GPUs: ps.gpus, Elastic: ps.elastic, Foreign: ps.foreign, Terminating: ps.terminating,
			// build turns this into StartedAt once the pod is bound.
			StartedAt:     or(ps.startedAgo, or(gs.startedAgo, 3600)),
			DeviceChoices: ps.choices, PreemptionDeviceChoices: ps.preemptChoices,
		}
		s.Pods[pod.ID] = pod
		g.Members = append(g.Members, pod.ID)
		if !ps.elastic {
			core++
		}
	}
	if g.MinMember == 0 {
		g.MinMember = core
	}
	s.Gangs[g.ID] = g
	return g
}

func or(v, fallback int64) int64 {
	if v != 0 {
		return v
	}
	return fallback
}

// shares computes fair shares of GPUs from the snapshot, charging each pod as Find
// does: bound pods by what they hold, pending ones by what they ask for.
func (w *world) shares(t testing.TB) *fairshare.Shares {
	t.Helper()
	if len(w.queues) == 0 {
		return nil
	}
	var capacity float64
	for _, n := range w.snapshot.Nodes {
		capacity += float64(len(n.GPUs))
	}
	usage := map[string]fairshare.Usage{}
	for _, pod := range w.snapshot.Pods {
		u := usage[pod.Queue]
		if u.Allocated == nil {
			u = fairshare.Usage{Allocated: fairshare.Amounts{}, Requested: fairshare.Amounts{}}
		}
		if pod.Bound() {
			gpus := boundGPUs(pod, w.snapshot.Node(pod.Node))
			u.Allocated[model.ResourceGPU] += gpus
			u.Requested[model.ResourceGPU] += gpus
		} else {
			u.Requested[model.ResourceGPU] += estimateGPUs([]*model.Pod{pod})
		}
		usage[pod.Queue] = u
	}
	shares, err := fairshare.Compute(w.snapshot.Queues, fairshare.Amounts{model.ResourceGPU: capacity}, usage)
	if err != nil {
		t.Fatalf("fair shares: %v", err)
	}
	return shares
}

// request is what the cycle hands Find for the pending gang.
func (w *world) request(t testing.TB, minRuntime int64) Request {
	t.Helper()
	placer, err := placement.New("")
	if err != nil {
		t.Fatal(err)
	}
	return Request{
		Gang: w.pending, Pods: w.snapshot.GangPods(w.pending), Snapshot: w.snapshot,
		View: placement.NewView(w.snapshot), Placer: placer, Shares: w.shares(t),
		Now: now, MinRuntimeSeconds: minRuntime,
	}
}

// apply carries a result out as the cluster would: victims go back to pending, the
// preemptor's pods are bound where the result placed them.
func (w *world) apply(r *Result) {
	root := placement.NewView(w.snapshot)
	for _, victim := range r.Victims {
		root.Release(victim)
		victim.Node, victim.GPUs, victim.StartedAt = "", nil, 0
	}
	for _, pl := range r.Placements {
		pod := w.snapshot.Pods[pl.Pod]
		root.Assign(pod, pl)
		pod.Node, pod.GPUs, pod.StartedAt = pl.Node, pl.GPUs, w.snapshot.Now
	}
	root.Commit()
}

func podIDs(pods []*model.Pod) []string {
	ids := make([]string, len(pods))
	for i, p := range pods {
		ids[i] = string(p.ID)
	}
	slices.Sort(ids)
	return ids
}
