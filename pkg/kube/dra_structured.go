package kube

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/dynamic-resource-allocation/cel"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/model"
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

// draState is what the structured allocator reads, kept by the Cache under its lock.
type draState struct {
	// slices are every driver's ResourceSlices by name; classes the DeviceClasses.
	slices  map[string]*resourceapi.ResourceSlice
	classes map[string]*resourceapi.DeviceClass
	// inflight are allocations this scheduler decided for claims ("namespace/name")
	// whose status the informer has not shown allocated yet.
	inflight map[string]resourceapi.AllocationResult
	celCache *cel.Cache
	// structured are the pods whose claims need the structured allocator.
	structured map[model.PodID]struct{}
	// choices are, per such pod, the allocation of its unallocated claims on each
	// node where one exists, from the last cycle.
	choices map[model.PodID]map[string][]resourceapi.AllocationResult
	// failed are the pods whose podErrors entry the allocator wrote, cleared and
	// written again each cycle.
	failed map[model.PodID]bool
}

func newDRAState() draState {
	return draState{
		slices:     map[string]*resourceapi.ResourceSlice{},
		classes:    map[string]*resourceapi.DeviceClass{},
		inflight:   map[string]resourceapi.AllocationResult{},
		celCache:   cel.NewCache(1000, cel.Features{EnableConsumableCapacity: true}),
		structured: map[model.PodID]struct{}{},
		choices:    map[model.PodID]map[string][]resourceapi.AllocationResult{},
		failed:     map[model.PodID]bool{},
	}
}

// UpsertSlice records a ResourceSlice of any driver for the structured allocator.
func (c *Cache) UpsertSlice(sl *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dra.slices[sl.Name] = sl
	c.freed()
}

// DeleteSlice forgets a ResourceSlice.
func (c *Cache) DeleteSlice(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dra.slices, name)
	c.freed()
}

// UpsertDeviceClass records a DeviceClass.
func (c *Cache) UpsertDeviceClass(dc *resourceapi.DeviceClass) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.dra.classes[dc.Name] = dc
	c.freed()
}

// DeleteDeviceClass forgets a DeviceClass.
func (c *Cache) DeleteDeviceClass(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.dra.classes, name)
	c.freed()
}

// classLister serves the cached DeviceClasses to the allocator. Used under the
// Cache's lock only.
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

// needsAllocator reports whether a pod's claims are beyond what claimDemand
// places by itself: anything but selector-free, exact-count requests on
// gpu.gantry.dev, all of one kind (whole GPUs or shares of one size), in claims of
// the pod's own that are not allocated yet.
func needsAllocator(pod *corev1.Pod, pcs []podClaim) bool {
	kind := int64(-1)
	for _, pc := range pcs {
		c := pc.Claim
		if c.Status.Allocation != nil && !reservedOnlyFor(c, pod.UID) {
			return true // shared with other pods, or allocated ahead of the pod
		}
		if len(c.Spec.Devices.Constraints) > 0 || len(c.Spec.Devices.Config) > 0 {
			return true
		}
		for _, r := range c.Spec.Devices.Requests {
			e := r.Exactly
			if e == nil || e.DeviceClassName != DriverName || len(e.Selectors) > 0 ||
				e.AllocationMode == resourceapi.DeviceAllocationModeAll || len(e.Tolerations) > 0 ||
				(e.AdminAccess != nil && *e.AdminAccess) {
				return true
			}
			mem := requestedMemory(e)
			if kind >= 0 && mem != kind {
				return true
			}
			kind = mem
		}
	}
	return false
}

// reservedOnlyFor reports whether every consumer of an allocated claim is pod: an
// allocation left from this pod's own failed binding, which is redone.
func reservedOnlyFor(c *resourceapi.ResourceClaim, uid types.UID) bool {
	if len(c.Status.ReservedFor) == 0 {
		return false
	}
	for _, r := range c.Status.ReservedFor {
		if r.Resource != "pods" || r.UID != uid {
			return false
		}
	}
	return true
}

// structuredDemand estimates, for messages, ordering and queue charges, the
// gpu.gantry.dev GPUs a pod's claims ask for; the allocator decides the devices.
// Claims allocated already (shared) take no new GPU.
func structuredDemand(pod *corev1.Pod, pcs []podClaim, d model.GPUDemand) model.GPUDemand {
	unallocated, _ := toAllocate(pod, pcs)
	for _, cl := range unallocated {
		for _, r := range cl.Spec.Devices.Requests {
			e := r.Exactly
			if e == nil && len(r.FirstAvailable) > 0 {
				s := r.FirstAvailable[0]
				e = &resourceapi.ExactDeviceRequest{DeviceClassName: s.DeviceClassName, Count: s.Count, Capacity: s.Capacity}
			}
			if e == nil || e.DeviceClassName != DriverName {
				continue
			}
			d.Count += max(int(e.Count), 1)
			d.MemoryBytes = max(d.MemoryBytes, requestedMemory(e))
		}
	}
	d.ByDevice = true
	return d
}

// toAllocate returns the claims of a pod the allocator must allocate (copies without
// a stale allocation of the pod's own) and the allocated claims it must share.
func toAllocate(pod *corev1.Pod, pcs []podClaim) (unallocated, shared []*resourceapi.ResourceClaim) {
	for _, pc := range pcs {
		c := pc.Claim
		switch {
		case c.Status.Allocation == nil:
			unallocated = append(unallocated, c)
		case reservedOnlyFor(c, pod.UID):
			cp := c.DeepCopy()
			cp.Status.Allocation, cp.Status.ReservedFor = nil, nil
			unallocated = append(unallocated, cp)
		default:
			shared = append(shared, c)
		}
	}
	return unallocated, shared
}

// allocatedState is what is taken, as the allocator needs it: gpu.gantry.dev
// devices from the core's bookings, other drivers' devices from the claims and from
// this scheduler's allocations in flight. Claims in skip (stale allocations about to
// be redone) do not count. GPU memory in evictable (from evictableGPUs) counts as
// free: with it, the state a preemptor's search starts from. Caller holds mu.
func (c *Cache) allocatedState(skip map[string]bool, evictable map[structured.DeviceID]int64) structured.AllocatedState {
	st := structured.AllocatedState{
		AllocatedDevices:         sets.New[structured.DeviceID](),
		AllocatedSharedDeviceIDs: sets.New[structured.SharedDeviceID](),
		AggregatedCapacity:       structured.NewConsumedCapacityCollection(),
	}
	for _, n := range c.snap.Nodes {
		if n.GPUsByCountOnly {
			continue
		}
		for i := range n.GPUs {
			g := &n.GPUs[i]
			id := structured.MakeDeviceID(DriverName, n.Name, DeviceName(g.Index))
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
	for key, cl := range c.claims {
		if skip[key] {
			continue
		}
		if cl.Status.Allocation != nil {
			addResults(&st, cl.Status.Allocation, false)
		} else if a, ok := c.dra.inflight[key]; ok {
			addResults(&st, &a, false)
		}
	}
	return st
}

// evictableGPUs is the GPU memory a preemption could free, per GPU, -1 for a GPU
// held whole: what preemptible or terminating pods hold. Caller holds mu.
func (c *Cache) evictableGPUs() map[structured.DeviceID]int64 {
	evictable := map[structured.DeviceID]int64{}
	for _, p := range c.snap.Pods {
		if !p.Bound() || !(p.Preemptible || p.Terminating) {
			continue
		}
		for _, b := range p.GPUs {
			id := structured.MakeDeviceID(DriverName, p.Node, DeviceName(b.Index))
			if b.Whole {
				evictable[id] = -1
			} else if evictable[id] >= 0 {
				evictable[id] += b.MemoryBytes
			}
		}
	}
	return evictable
}

// chooseDevices runs the structured allocator for the pending pods that need it
// (reporting whether there were any) and records, on each pod, the nodes where its
// claims can be allocated and the GPUs they would take there. A claim the allocator rejects as invalid (a CEL error, a
// missing DeviceClass) holds the pod back with the allocator's words. Pods for
// which skip is true (gangs the cycle will not try) keep last cycle's choices.
// Caller holds mu.
//
// Pods whose claims are alike (replicas from one ResourceClaimTemplate) are asked
// about once: the allocator is run in levels, each with the devices of the levels
// before it taken, so the pod in slot i gets level i (modulo the number of levels)
// and pods that share a node get different devices there. The cost is levels × nodes
// allocator calls per kind of claim, not pods × nodes.
func (c *Cache) chooseDevices(ctx context.Context, skip func(model.GangID) bool) (asked bool) {
	previous := c.dra.failed
	for id := range previous {
		delete(c.podErrors, id)
	}
	c.dra.failed = map[model.PodID]bool{}
	defer func() {
		// A gang held back by an allocator error that is gone now (its DeviceClass
		// was created, say) is read afresh, without the error as its reason.
		for id := range previous {
			if !c.dra.failed[id] && c.gangOf[id] != "" {
				c.regroup(c.gangOf[id])
			}
		}
	}()
	clear(c.dra.choices)
	groups := map[string][]model.PodID{}
	groupOf := map[model.PodID]string{}
	var all []model.PodID
	stale := map[string]bool{}
	for id := range c.dra.structured {
		p, api := c.snap.Pods[id], c.apiPods[id]
		if p == nil || api == nil || p.Bound() || c.podErrors[id] != "" {
			continue
		}
		for _, pc := range c.podClaims[id] {
			if pc.Claim.Status.Allocation != nil && reservedOnlyFor(pc.Claim, api.UID) {
				stale[api.Namespace+"/"+pc.Name] = true
			}
		}
		if skip != nil && skip(p.Gang) {
			continue
		}
		key := claimsKey(api, c.podClaims[id], id)
		groups[key] = append(groups[key], id)
		groupOf[id] = key
		all = append(all, id)
	}
	if len(groups) == 0 {
		return false
	}
	// Every pod takes a slot, and the level of its slot: slots differ between pods
	// alike (one kind of claims) and between members of one gang, so that members of
	// a gang whose claims are of different kinds get different devices where the
	// answers overlap too (a gang on one node would otherwise be offered the same GPU
	// twice, and fail every cycle). Pods of different gangs and kinds may share a
	// slot; the core sorts out what they both want.
	sort.Slice(all, func(i, j int) bool {
		a, b := c.snap.Pods[all[i]], c.snap.Pods[all[j]]
		if a.Gang != b.Gang {
			return a.Gang < b.Gang
		}
		if a.CreatedAt != b.CreatedAt {
			return a.CreatedAt < b.CreatedAt
		}
		return all[i] < all[j]
	})
	slot := make(map[model.PodID]int, len(all))
	nextInGroup, nextInGang, slots := map[string]int{}, map[model.GangID]int{}, map[string]int{}
	for _, id := range all {
		key, gang := groupOf[id], c.snap.Pods[id].Gang
		n := max(nextInGroup[key], nextInGang[gang])
		slot[id] = n
		nextInGroup[key], nextInGang[gang] = n+1, n+1
		slots[key] = max(slots[key], n+1)
	}
	keys := make([]string, 0, len(groups))
	for k := range groups {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	slices := make([]*resourceapi.ResourceSlice, 0, len(c.dra.slices))
	onNode := map[string]bool{}
	networked := false
	for _, sl := range c.dra.slices {
		slices = append(slices, sl)
		if sl.Spec.NodeName != nil {
			onNode[*sl.Spec.NodeName] = true
		} else {
			networked = true
		}
	}
	var nodes []*corev1.Node
	for name, n := range c.apiNodes {
		if networked || onNode[name] {
			nodes = append(nodes, n)
		}
	}
	sort.Slice(nodes, func(i, j int) bool { return nodes[i].Name < nodes[j].Name })
	slices = c.packedFirst(slices)
	base := c.allocatedState(stale, nil)
	var ifPreempted *structured.AllocatedState
	if evictable := c.evictableGPUs(); len(evictable) > 0 {
		st := c.allocatedState(stale, evictable)
		ifPreempted = &st
	}
	for _, key := range keys {
		ids := groups[key]
		sort.Slice(ids, func(i, j int) bool { return slot[ids[i]] < slot[ids[j]] })
		levels, err := c.allocationLevels(ctx, base, slices, nodes, c.apiPods[ids[0]], c.podClaims[ids[0]], slots[key])
		// The choices a preemption search would start from: only where the GPUs
		// now held by pods it could evict are what stands in the way.
		var preemptLevels []allocationLevel
		if err == nil && ifPreempted != nil {
			preemptLevels, err = c.allocationLevels(ctx, *ifPreempted, slices, nodes, c.apiPods[ids[0]], c.podClaims[ids[0]], slots[key])
		}
		for _, id := range ids {
			i := slot[id]
			p := *c.snap.Pods[id]
			p.DeviceChoices = map[string][]model.GPUBinding{}
			p.PreemptionDeviceChoices = nil
			if len(preemptLevels) > 0 {
				p.PreemptionDeviceChoices = preemptLevels[i%len(preemptLevels)].gpus
			}
			switch {
			case err != nil:
				c.podErrors[id] = "ResourceClaims cannot be allocated: " + err.Error()
				c.dra.failed[id] = true
			case len(levels) > 0:
				l := levels[i%len(levels)]
				p.DeviceChoices = l.gpus
				c.dra.choices[id] = l.results
			default:
				c.dra.choices[id] = nil
			}
			c.snap.Pods[id] = &p
		}
	}
	return true
}

// packedFirst returns the slices with each node's gpu.gantry.dev devices ordered
// as the core would fill them: GPUs already shared first, least free memory first,
// idle GPUs last. The allocator takes the first device that fits, so a share packs
// onto a GPU that is shared already and idle GPUs stay whole for whole-GPU work.
// Slices are copied only where the order changes. Caller holds mu.
func (c *Cache) packedFirst(slices []*resourceapi.ResourceSlice) []*resourceapi.ResourceSlice {
	out := make([]*resourceapi.ResourceSlice, len(slices))
	for i, sl := range slices {
		out[i] = sl
		if sl.Spec.Driver != DriverName || sl.Spec.NodeName == nil {
			continue
		}
		n := c.snap.Node(*sl.Spec.NodeName)
		if n == nil {
			continue
		}
		// rank: idle GPUs after used ones, then by free memory.
		rank := func(d *resourceapi.Device) (idle bool, free int64) {
			index, err := deviceIndex(d.Name)
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
func claimsKey(api *corev1.Pod, pcs []podClaim, id model.PodID) string {
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
func (c *Cache) allocationLevels(ctx context.Context, base structured.AllocatedState, slices []*resourceapi.ResourceSlice, nodes []*corev1.Node, api *corev1.Pod, pcs []podClaim, want int) ([]allocationLevel, error) {
	unallocated, shared := toAllocate(api, pcs)
	candidates := nodes
	if len(unallocated) == 0 {
		candidates = nil
		for _, n := range c.apiNodes {
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
		allocator, err := structured.NewAllocator(ctx, draFeatures, state, classLister(c.dra.classes), slices, c.dra.celCache)
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
			gpus, err := c.gpusOfAllocation(n.Name, results)
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
		if r.Driver == DriverName && !gantry {
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

// gpusOfAllocation turns the gpu.gantry.dev devices of allocation results on a node
// into the GPUs the core books: a whole GPU, or a share of the memory consumed.
func (c *Cache) gpusOfAllocation(node string, results []resourceapi.AllocationResult) ([]model.GPUBinding, error) {
	var out []model.GPUBinding
	n := c.snap.Node(node)
	for _, a := range results {
		for _, r := range a.Devices.Results {
			if r.Driver != DriverName {
				continue
			}
			index, err := deviceIndex(r.Device)
			var g *model.GPU
			if err == nil && n != nil {
				g = n.GPUByIndex(index)
			}
			if g == nil || r.Pool != node {
				return nil, fmt.Errorf("device %s/%s is not a GPU of node %s", r.Pool, r.Device, node)
			}
			b, _ := gpuOfResult(r, node, g.MemoryBytes)
			out = append(out, b)
		}
	}
	return out, nil
}

// deviceIndex reads the GPU index from a device name DeviceName made.
func deviceIndex(name string) (int, error) {
	s, ok := strings.CutPrefix(name, "gpu-")
	if !ok {
		return 0, fmt.Errorf("not a GPU device: %s", name)
	}
	return strconv.Atoi(s)
}

// takeAllocations returns, for a pod the cycle placed on node, whether the
// structured allocator chose its devices and, if so, the allocation of its
// unallocated claims there. ok is false when another pod of the same plan already
// took one of the other drivers' devices in them (the core books only GPUs, so it
// cannot see that clash). Caller holds mu.
func (c *Cache) takeAllocations(id model.PodID, node string, taken sets.Set[structured.DeviceID]) (allocs []resourceapi.AllocationResult, viaAllocator, ok bool) {
	perNode, viaAllocator := c.dra.choices[id]
	if !viaAllocator {
		return nil, false, true
	}
	// Pods alike share their answers (chooseDevices): each gets its own copy, with
	// share ids of its own.
	for _, a := range perNode[node] {
		a := *a.DeepCopy()
		for i := range a.Devices.Results {
			if a.Devices.Results[i].ShareID != nil {
				a.Devices.Results[i].ShareID = ptr.To(types.UID(uuid.NewString()))
			}
		}
		allocs = append(allocs, a)
	}
	var ids []structured.DeviceID
	for _, a := range allocs {
		for _, r := range a.Devices.Results {
			if r.Driver == DriverName || r.ShareID != nil {
				continue
			}
			did := structured.MakeDeviceID(r.Driver, r.Pool, r.Device)
			if taken.Has(did) {
				return nil, true, false
			}
			ids = append(ids, did)
		}
	}
	taken.Insert(ids...)
	return allocs, true, true
}

// markInflight records allocations about to be written, so the next cycle's
// allocator counts them before the informer shows them. Caller holds mu.
func (c *Cache) markInflight(api *corev1.Pod, pcs []podClaim, allocs []resourceapi.AllocationResult) {
	if api == nil {
		return
	}
	unallocated, _ := toAllocate(api, pcs)
	for i, cl := range unallocated {
		if i < len(allocs) {
			c.dra.inflight[cl.Namespace+"/"+cl.Name] = allocs[i]
		}
	}
}

// dropInflight forgets the in-flight allocations of a pod whose binding failed.
// Caller holds mu.
func (c *Cache) dropInflight(id model.PodID) {
	for _, pc := range c.podClaims[id] {
		delete(c.dra.inflight, pc.Claim.Namespace+"/"+pc.Name)
	}
}

// writeAllocations writes the structured allocator's results into the pod's
// unallocated claims (redoing a stale allocation of the pod's own) and reserves
// every claim, shared ones included, for the pod. It runs before the Binding.
func writeAllocations(ctx context.Context, client kubernetes.Interface, pod *model.Pod, pcs []podClaim, allocs []resourceapi.AllocationResult) error {
	uid := types.UID(pod.UID)
	next := 0
	for _, pc := range pcs {
		c := pc.Claim.DeepCopy()
		switch {
		case c.Status.Allocation == nil || reservedOnlyFor(c, uid):
			if next >= len(allocs) {
				return fmt.Errorf("ResourceClaim %s/%s: no allocation was chosen for it", c.Namespace, c.Name)
			}
			if c.Status.Allocation != nil {
				var err error
				if c, err = releaseAllocation(ctx, client, c); err != nil {
					return err
				}
			}
			a := allocs[next].DeepCopy()
			next++
			if a.AllocationTimestamp == nil {
				now := metav1.Now()
				a.AllocationTimestamp = &now
			}
			c.Status.Allocation = a
		case reservedFor(c, uid):
			continue
		case len(c.Status.ReservedFor) >= resourceapi.ResourceClaimReservedForMaxSize:
			return fmt.Errorf("ResourceClaim %s/%s is shared by %d consumers already, the most it can have", c.Namespace, c.Name, len(c.Status.ReservedFor))
		}
		c.Status.ReservedFor = append(c.Status.ReservedFor, resourceapi.ResourceClaimConsumerReference{
			Resource: "pods", Name: podName(pod.ID), UID: uid,
		})
		if _, err := client.ResourceV1().ResourceClaims(c.Namespace).UpdateStatus(ctx, c, metav1.UpdateOptions{}); err != nil {
			return fmt.Errorf("allocate ResourceClaim %s/%s: %w", c.Namespace, c.Name, err)
		}
	}
	return nil
}
