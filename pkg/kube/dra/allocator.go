package dra

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/sets"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// Claims that pkg/placement cannot place on its own (CEL selectors, other
// DeviceClasses and drivers, firstAvailable lists, constraints, "All" mode, claims
// shared between pods) go through k8s.io/dynamic-resource-allocation/structured, the
// allocator kube-scheduler uses. Each cycle it is asked, node by node, which devices
// the pod's claims would get there; the gpu.gantry.dev devices among them become the
// pod's model.Pod.DeviceChoices, so the core scores those nodes and books exactly
// those GPUs, and the full AllocationResult is written to the claim at binding.
//
// The allocator sees gpu.gantry.dev devices as the core books them (so the GPUs
// held by pods placed by count, by shares or by pods not yet confirmed count as used)
// and other drivers' devices as the ResourceClaims say, plus what this scheduler has
// allocated but the informer has not shown yet.

// draFeatures are the allocator features Gantry asks for: those of the DRA feature
// gates that are on by default in Kubernetes 1.37, but for device binding
// conditions: Gantry does not wait for a device's binding conditions before binding
// the pod, so devices that have them are not chosen.
var draFeatures = structured.Features{
	AdminAccess:          true,
	ConsumableCapacity:   true,
	DeviceTaints:         true,
	PartitionableDevices: true,
	PrioritizedList:      true,
}

// Allocator runs the structured allocator over the devices it has seen. It owns its
// state: every driver's ResourceSlices, the DeviceClasses, the allocations this
// scheduler decided that the informer has not shown yet, the CEL cache, and the
// last cycle's choices. Not safe for concurrent use.
type Allocator struct {
	slices  map[string]*resourceapi.ResourceSlice
	classes map[string]*resourceapi.DeviceClass
	// inflight are allocations this scheduler decided for claims ("namespace/name")
	// whose status the informer has not shown allocated yet.
	inflight map[string]resourceapi.AllocationResult
	celCache *cel.Cache
	// choices are, per pod, the allocation of its unallocated claims on each node
	// where one exists, from the last Choose.
	choices map[model.PodID]map[string][]resourceapi.AllocationResult
}

// NewAllocator returns an allocator that has seen nothing.
func NewAllocator() *Allocator {
	return &Allocator{
		slices:   map[string]*resourceapi.ResourceSlice{},
		classes:  map[string]*resourceapi.DeviceClass{},
		inflight: map[string]resourceapi.AllocationResult{},
		celCache: cel.NewCache(1000, cel.Features{EnableConsumableCapacity: true}),
		choices:  map[model.PodID]map[string][]resourceapi.AllocationResult{},
	}
}

// UpsertSlice records a ResourceSlice of any driver.
func (a *Allocator) UpsertSlice(sl *resourceapi.ResourceSlice) { a.slices[sl.Name] = sl }

// DeleteSlice forgets a ResourceSlice.
func (a *Allocator) DeleteSlice(name string) { delete(a.slices, name) }

// UpsertClass records a DeviceClass.
func (a *Allocator) UpsertClass(dc *resourceapi.DeviceClass) { a.classes[dc.Name] = dc }

// DeleteClass forgets a DeviceClass.
func (a *Allocator) DeleteClass(name string) { delete(a.classes, name) }

// ClaimSeen drops the in-flight allocation of a claim the informer now shows
// allocated, or deleted.
func (a *Allocator) ClaimSeen(key string) { delete(a.inflight, key) }

// classLister serves the DeviceClasses to the structured allocator.
type classLister map[string]*resourceapi.DeviceClass

func (l classLister) List() ([]*resourceapi.DeviceClass, error) {
	out := make([]*resourceapi.DeviceClass, 0, len(l))
	for _, dc := range l {
		out = append(out, dc)
	}
	return out, nil
}

func (l classLister) Get(name string) (*resourceapi.DeviceClass, error) {
	if dc, ok := l[name]; ok {
		return dc, nil
	}
	return nil, fmt.Errorf("DeviceClass %q does not exist", name)
}

// allocatedState is what is taken, as the allocator needs it: gpu.gantry.dev
// devices from the core's bookings, other drivers' devices from the claims and from
// this scheduler's allocations in flight. Claims in skip (stale allocations about to
// be redone) do not count. GPU memory in evictable (from evictableGPUs) counts as
// free: with it, the state a preemptor's search starts from.
func (a *Allocator) allocatedState(in Input, skip map[string]bool, evictable map[structured.DeviceID]int64) structured.AllocatedState {
	st := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, n := range in.Snap.Nodes {
		if n.GPUsByCountOnly {
			continue
		}
		for i := range n.GPUs {
			g := &n.GPUs[i]
			id := structured.MakeDeviceID(names.DriverName, n.Name, DeviceName(g.Index))
			free, held := evictable[id]
			switch {
			case !g.Healthy:
				st.AllocatedDevices.Insert(id)
			case g.Exclusive:
				if !held || free >= 0 {
					st.AllocatedDevices.Insert(id)
				}
			case g.AllocatedBytes-max(free, 0) > 0:
				st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, map[resourceapi.QualifiedName]resource.Quantity{
					memoryCapacity: *resource.NewQuantity(g.AllocatedBytes-max(free, 0), resource.BinarySI),
				}))
			}
		}
	}
	for key, cl := range in.Claims {
		if skip[key] {
			continue
		}
		if cl.Status.Allocation != nil {
			addResults(&st, cl.Status.Allocation, false)
		} else if r, ok := a.inflight[key]; ok {
			addResults(&st, &r, false)
		}
	}
	return st
}

// evictableGPUs is the GPU memory a preemption could free, per GPU, -1 for a GPU
// held whole: what preemptible or terminating pods hold.
func evictableGPUs(snap *model.Snapshot) map[structured.DeviceID]int64 {
	evictable := map[structured.DeviceID]int64{}
	for _, p := range snap.Pods {
		if !p.Bound() || !(p.Preemptible || p.Terminating) {
			continue
		}
		for _, b := range p.GPUs {
			id := structured.MakeDeviceID(names.DriverName, p.Node, DeviceName(b.Index))
			if b.Whole {
				evictable[id] = -1
			} else if evictable[id] >= 0 {
				evictable[id] += b.MemoryBytes
			}
		}
	}
	return evictable
}

// Input is what Choose reads, owned by the caller and only read.
type Input struct {
	// Snap is the core's bookings: gpu.gantry.dev devices count as taken as the core
	// booked them.
	Snap *model.Snapshot
	// Nodes are the API nodes by name; Claims every ResourceClaim by "ns/name".
	Nodes  map[string]*corev1.Node
	Claims map[string]*resourceapi.ResourceClaim
}

// Request is one pending pod whose claims need the allocator.
type Request struct {
	ID        model.PodID
	Gang      model.GangID
	CreatedAt int64
	Pod       *corev1.Pod
	Claims    []Claim
	// Skip is set for a pod the cycle will not try: it is not asked about, but the
	// stale allocations of its own that would be redone do not count as taken.
	Skip bool
	// StartFreeFraction is the share of each GPU's memory the pod's engine needs
	// free to start (vLLM's gpu_memory_utilization; model.GPUDemand): a share it is
	// given is booked for at least that much (BookedFor).
	StartFreeFraction float64
}

// Choice is the allocator's answer for one pod: per node, the GPUs its claims take
// there, now and if the preemptible pods were gone. Err is the allocator's refusal
// of the claims themselves (a CEL error, a missing DeviceClass).
type Choice struct {
	Devices, IfPreempted map[string][]model.GPUBinding
	Err                  error
}

// Choose asks the allocator, for each request not skipped, on which nodes its claims
// can be allocated and which GPUs they would take there. The answers are kept for
// Take.
//
// Pods whose claims are alike (replicas from one ResourceClaimTemplate) are asked
// about once: the allocator is run in levels, each with the devices of the levels
// before it taken, so the pod in slot i gets level i (modulo the number of levels)
// and pods that share a node get different devices there. The cost is levels × nodes
// allocator calls per kind of claim, not pods × nodes.
func (a *Allocator) Choose(ctx context.Context, in Input, reqs []Request) map[model.PodID]Choice {
	clear(a.choices)
	stale := map[string]bool{}
	var all []*Request
	for i := range reqs {
		r := &reqs[i]
		for _, pc := range r.Claims {
			if pc.Claim.Status.Allocation != nil && reservedOnlyFor(pc.Claim, r.Pod.UID) {
				stale[r.Pod.Namespace+"/"+pc.Name] = true
			}
		}
		if !r.Skip {
			all = append(all, r)
		}
	}
	if len(all) == 0 {
		return nil
	}
	groups, slot, slots := groupRequests(all)
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	slices, nodes := a.slicesAndNodes(in)
	base := a.allocatedState(in, stale, nil)
	var ifPreempted *structured.AllocatedState
	if evictable := evictableGPUs(in.Snap); len(evictable) > 0 {
		st := a.allocatedState(in, stale, evictable)
		ifPreempted = &st
	}
	out := make(map[model.PodID]Choice, len(all))
	for _, key := range keys {
		rs := groups[key]
		sort.Slice(rs, func(i, j int) bool { return slot[rs[i].ID] < slot[rs[j].ID] })
		levels, err := a.allocationLevels(ctx, in, base, slices, nodes, rs[0].Pod, rs[0].Claims, slots[key])
		// The choices a preemption search would start from: only where the GPUs
		// now held by pods it could evict are what stands in the way.
		var preemptLevels []allocationLevel
		if err == nil && ifPreempted != nil {
			preemptLevels, err = a.allocationLevels(ctx, in, *ifPreempted, slices, nodes, rs[0].Pod, rs[0].Claims, slots[key])
		}
		for _, r := range rs {
			i := slot[r.ID]
			ch := Choice{Devices: map[string][]model.GPUBinding{}, Err: err}
			if len(preemptLevels) > 0 {
				ch.IfPreempted = BookedFor(in.Snap, preemptLevels[i%len(preemptLevels)].gpus, r.StartFreeFraction)
			}
			switch {
			case err != nil:
			case len(levels) > 0:
				l := levels[i%len(levels)]
				ch.Devices = BookedFor(in.Snap, l.gpus, r.StartFreeFraction)
				a.choices[r.ID] = l.results
			default:
				a.choices[r.ID] = nil
			}
			out[r.ID] = ch
		}
	}
	return out
}

// groupRequests groups requests by the kind of their claims and gives every pod a
// slot: slots differ between pods alike (one kind of claims) and between members of
// one gang, so that members of a gang whose claims are of different kinds get
// different devices where the answers overlap too (a gang on one node would
// otherwise be offered the same GPU twice, and fail every cycle). Pods of different
// gangs and kinds may share a slot; the core sorts out what they both want.
func groupRequests(all []*Request) (groups map[string][]*Request, slot map[model.PodID]int, slots map[string]int) {
	groups = map[string][]*Request{}
	groupOf := map[model.PodID]string{}
	for _, r := range all {
		key := claimsKey(r.Pod, r.Claims, r.ID)
		groups[key] = append(groups[key], r)
		groupOf[r.ID] = key
	}
	sort.Slice(all, func(i, j int) bool {
		a, b := all[i], all[j]
		if a.Gang != b.Gang {
			return a.Gang < b.Gang
		}
		if a.CreatedAt != b.CreatedAt {
			return a.CreatedAt < b.CreatedAt
		}
		return a.ID < b.ID
	})
	slot = make(map[model.PodID]int, len(all))
	slots = map[string]int{}
	nextInGroup, nextInGang := map[string]int{}, map[model.GangID]int{}
	for _, r := range all {
		key := groupOf[r.ID]
		n := max(nextInGroup[key], nextInGang[r.Gang])
		slot[r.ID] = n
		nextInGroup[key], nextInGang[r.Gang] = n+1, n+1
		slots[key] = max(slots[key], n+1)
	}
	return groups, slot, slots
}

// slicesAndNodes returns every slice (gpu.gantry.dev devices packed first) and the
// nodes that have devices: all of them when a slice is not bound to a node.
func (a *Allocator) slicesAndNodes(in Input) ([]*resourceapi.ResourceSlice, []*corev1.Node) {
	slices := make([]*resourceapi.ResourceSlice, 0, len(a.slices))
	onNode := map[string]bool{}
	networked := false
	for _, sl := range a.slices {
		slices = append(slices, sl)
		if sl.Spec.NodeName != nil {
			onNode[*sl.Spec.NodeName] = true
		} else {
			networked = true
		}
	}
	var nodes []*corev1.Node
	for name, n := range in.Nodes {
		if networked || onNode[name] {
			nodes = append(nodes, n)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	return packedFirst(in.Snap, slices), nodes
}

// packedFirst returns the slices with each node's gpu.gantry.dev devices ordered
// as the core would fill them: GPUs already shared first, least free memory first,
// idle GPUs last. The allocator takes the first device that fits, so a share packs
// onto a GPU that is shared already and idle GPUs stay whole for whole-GPU work.
// Slices are copied only where the order changes.
func packedFirst(snap *model.Snapshot, slices []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(slices))
	for i, sl := range slices {
		out[i] = sl
		if sl.Spec.Driver != names.DriverName || sl.Spec.NodeName == nil {
			continue
		}
		n := snap.Node(*sl.Spec.NodeName)
		if n == nil {
			continue
		}
		// rank: idle GPUs after used ones, then by free memory.
		rank := func(d *resourceapi.Device) (idle bool, free int64) {
			index, err := DeviceIndex(d.Name)
			if err != nil {
				return true, 1 << 62
			}
			g := n.GPUByIndex(index)
			if g == nil {
				return true, 1 << 62
			}
			return g.Idle(), g.FreeBytes()
		}
		less := func(a, b *resourceapi.Device) bool {
			ia, fa := rank(a)
			ib, fb := rank(b)
			if ia != ib {
				return !ia
			}
			return fa < fb
		}
		sorted := true
		for j := 1; j < len(sl.Spec.Devices); j++ {
			if less(&sl.Spec.Devices[j], &sl.Spec.Devices[j-1]) {
				sorted = false
				break
			}
		}
		if sorted {
			continue
		}
		cp := *sl
		cp.Spec.Devices = append([]resourceapi.Device(nil), sl.Spec.Devices...)
		sort.SliceStable(cp.Spec.Devices, func(a, b int) bool { return less(&cp.Spec.Devices[a], &cp.Spec.Devices[b]) })
		out[i] = &cp
	}
	return out
}

// claimsKey groups pods whose claims the allocator would treat alike: the same
// unallocated claim specs. A pod that shares an allocated claim is its own group.
func claimsKey(api *corev1.Pod, pcs []Claim, id model.PodID) string {
	unallocated, shared := toAllocate(api, pcs)
	if len(shared) > 0 {
		return "pod " + string(id)
	}
	var b strings.Builder
	for _, cl := range unallocated {
		spec, _ := json.Marshal(cl.Spec)
		b.Write(spec)
		b.WriteByte('\n')
	}
	return b.String()
}

// allocationLevel is one allocator answer for a kind of claims: per node, the GPUs
// the pod would take and the allocation results.
type allocationLevel struct {
	gpus    map[string][]model.GPUBinding
	results map[string][]resourceapi.AllocationResult
}

// allocationLevels asks the allocator about the claims of one pod on each node, up
// to want times, each time with the devices of the answers before taken; it stops
// when no node has room for another. The pod's claims stand for all pods alike.
func (a *Allocator) allocationLevels(ctx context.Context, in Input, base structured.AllocatedState, slices []*resourceapi.ResourceSlice, nodes []*corev1.Node, api *corev1.Pod, pcs []Claim, want int) ([]allocationLevel, error) {
	unallocated, shared := toAllocate(api, pcs)
	candidates := nodes
	if len(unallocated) == 0 {
		candidates = nil
		for _, n := range in.Nodes {
			candidates = append(candidates, n)
		}
	}
	var kept []*corev1.Node
	for _, n := range candidates {
		if sharedClaimsReach(n, shared) {
			kept = append(kept, n)
		}
	}
	candidates = kept
	state := base
	var levels []allocationLevel
	for len(levels) < want && len(candidates) > 0 {
		allocator, err := structured.NewAllocator(ctx, draFeatures, state, classLister(a.classes), slices, a.celCache)
		if err != nil {
			return nil, err
		}
		level := allocationLevel{gpus: map[string][]model.GPUBinding{}, results: map[string][]resourceapi.AllocationResult{}}
		var next []*corev1.Node
		for _, n := range candidates {
			var results []resourceapi.AllocationResult
			if len(unallocated) > 0 {
				results, err = allocator.Allocate(ctx, n, unallocated)
				if err != nil && !errors.Is(err, structured.ErrFailedAllocationOnNode) {
					return nil, err
				}
				if err != nil || results == nil {
					continue
				}
			}
			gpus, err := gpusOfAllocation(in.Snap, n.Name, results)
			if err != nil {
				continue
			}
			level.gpus[n.Name], level.results[n.Name] = gpus, results
			next = append(next, n)
		}
		if len(next) == 0 {
			break
		}
		levels = append(levels, level)
		if len(unallocated) == 0 {
			break // nothing is taken: every pod gets the same answer
		}
		candidates = next
		if len(levels) < want {
			state = withResults(state, level.results)
		}
	}
	return levels, nil
}

// sharedClaimsReach reports whether the devices of every allocated claim are
// reachable from node n.
func sharedClaimsReach(n *corev1.Node, shared []*resourceapi.ResourceClaim) bool {
	for _, sc := range shared {
		if sel := sc.Status.Allocation.NodeSelector; sel != nil {
			if match, err := corev1helpers.MatchNodeSelectorTerms(n, sel); err != nil || !match {
				return false
			}
		}
	}
	return true
}

// withResults returns a copy of st with the devices of results taken as well.
func withResults(st structured.AllocatedState, results map[string][]resourceapi.AllocationResult) structured.AllocatedState {
	out := structured.AllocatedState{
		AllocatedDevices:         st.AllocatedDevices.Clone(),
		AllocatedSharedDeviceIDs: st.AllocatedSharedDeviceIDs.Clone(),
		AggregatedCapacity:       st.AggregatedCapacity.Clone(),
	}
	for _, rs := range results {
		for i := range rs {
			addResults(&out, &rs[i], true)
		}
	}
	return out
}

// addResults takes the devices of an allocation in st; gpu.gantry.dev devices only
// with gantry set (otherwise the core's bookings stand for them).
func addResults(st *structured.AllocatedState, a *resourceapi.AllocationResult, gantry bool) {
	for _, r := range a.Devices.Results {
		if r.Driver == names.DriverName && !gantry {
			continue
		}
		id := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
		if r.ShareID == nil {
			st.AllocatedDevices.Insert(id)
			continue
		}
		// A share is counted by the capacity it consumes; only a share without
		// one is recorded by id (the allocator scans those ids for every device).
		if len(r.ConsumedCapacity) > 0 {
			st.AggregatedCapacity.Insert(structured.NewDeviceConsumedCapacity(id, r.ConsumedCapacity))
		} else {
			st.AllocatedSharedDeviceIDs.Insert(structured.MakeSharedDeviceID(id, r.ShareID))
		}
	}
}
