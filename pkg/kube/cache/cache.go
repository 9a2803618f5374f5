package cache

import (
	"errors"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// Cache keeps the scheduler's snapshot current from informer events, one object at a
// time: a pod event re-books one pod on one node, a node event rebuilds one node. No
// cycle rebuilds the snapshot from scratch (PITFALLS: 2–3 s cycles at 4,000 nodes).
//
// Nodes in the snapshot are replaced, never changed in place, so a placement View
// and the Placer's per-node caches can hold them by pointer.
type Cache struct {
	mu sync.Mutex

	names  map[string]bool
	lookup gang.Lookup
	snap   *model.Snapshot
	// order is snap's pending gangs in the order a cycle tries them, kept with
	// snap.PendingGangs (refreshPending) so that a cycle does not sort them all.
	order *scheduler.Order

	apiNodes  map[string]*corev1.Node
	inventory map[string][]model.GPU
	// slices are the gpu.gantry.dev ResourceSlices of each node, by name: its
	// inventory.
	slices     map[string]map[string]*resourceapi.ResourceSlice
	podsOnNode map[string]map[model.PodID]struct{}
	apiPods    map[model.PodID]*corev1.Pod
	// assumed are pods bound by this scheduler that the informer has not shown bound yet.
	assumed map[model.PodID]bool
	// podErrors are pods whose spec Gantry cannot read, with what to change.
	podErrors map[model.PodID]string
	// gangOf and gangPods index gang membership of pods this scheduler serves.
	gangOf   map[model.PodID]model.GangID
	gangPods map[model.GangID]podSet
	// priorities are PriorityClass values and preemptibility by name.
	priorities map[string]priorityClass
	// changed is signalled (without blocking) when something a cycle reads changes.
	changed chan struct{}
	// live is the last GPUNode report per node: GPU UUID to live free bytes and health.
	live map[string]map[string]LiveGPU
	// claims are ResourceClaims by "namespace/name"; claimUsers indexes the pods that
	// reference each, so a claim event re-reads them; podClaims are each pod's
	// resolved claims, for allocation at binding.
	claims     map[string]*resourceapi.ResourceClaim
	claimUsers map[string]map[model.PodID]struct{}
	podClaims  map[model.PodID][]dra.Claim
	// orphans are allocated claims whose devices no live pod holds, booked on
	// their node without a pod (orphans.go), and indexed by node.
	orphans       map[string]orphanClaim
	orphansOnNode map[string]map[string]struct{}
	// alloc is the structured allocator; structured are the pending pods whose
	// claims need it, and draFailed those whose podErrors entry it wrote (cleared and
	// written again each cycle).
	alloc      *dra.Allocator
	structured map[model.PodID]struct{}
	draFailed  map[model.PodID]bool
	// cycle is what the cycles decided that the API has not shown yet (cycle.go).
	cycle cycleState
	// health tracks gangs running below their minimum or incomplete (health.go).
	health   gangHealth
	timeouts Timeouts
	// clock is the time of informer events (time.Now; tests replace it).
	clock func() time.Time
	// capacityVersion counts changes that could let a waiting gang fit (capacity
	// freed or added, queues or priorities changed); gangVersion counts changes to
	// each gang. A gang that failed at the same pair of versions cannot fit now.
	capacityVersion uint64
	gangVersion     map[model.GangID]uint64
	// storage is what pods' constraints are translated with (constraints.go).
	storage storageState
	// liveMaxAge bounds the age of trusted free memory; liveExpires is, per node,
	// when its oldest trusted measurement expires (Prepare rebuilds the node then).
	liveMaxAge  time.Duration
	liveExpires map[string]time.Time
}

type priorityClass struct {
	value       int32
	preemptible *bool
}

// LiveGPU is the node agent's live measurement of one GPU (GPUNode status).
type LiveGPU struct {
	FreeBytes int64
	Healthy   bool
	// SampledAt is when FreeBytes was measured (GPUNode status.sampleTime); zero
	// if not known. Free memory older than the cache's live bound (SetLiveMaxAge)
	// is not trusted: the node agent or its NVML may be dead.
	SampledAt time.Time
}

// DefaultLiveMaxAge is how old a measurement of free GPU memory may be and still
// be trusted: twice the agent's longest interval between two GPUNode writes
// (5 minutes when nothing changes).
const DefaultLiveMaxAge = 10 * time.Minute

// New returns an empty cache serving pods whose schedulerName is in schedulers,
// charging pods with no queue to defaultQueue.
func New(schedulers []string, lookup gang.Lookup, defaultQueue string) *Cache {
	c := &Cache{
		names:       map[string]bool{},
		lookup:      lookup,
		snap:        newIndexedSnapshot(),
		order:       scheduler.NewOrder(),
		apiNodes:    map[string]*corev1.Node{},
		inventory:   map[string][]model.GPU{},
		slices:      map[string]map[string]*resourceapi.ResourceSlice{},
		podsOnNode:  map[string]map[model.PodID]struct{}{},
		apiPods:     map[model.PodID]*corev1.Pod{},
		assumed:     map[model.PodID]bool{},
		podErrors:   map[model.PodID]string{},
		gangOf:      map[model.PodID]model.GangID{},
		gangPods:    map[model.GangID]podSet{},
		priorities:  map[string]priorityClass{},
		changed:     make(chan struct{}, 1),
		live:        map[string]map[string]LiveGPU{},
		claims:      map[string]*resourceapi.ResourceClaim{},
		claimUsers:  map[string]map[model.PodID]struct{}{},
		podClaims:   map[model.PodID][]dra.Claim{},
		alloc:       dra.NewAllocator(),
		structured:  map[model.PodID]struct{}{},
		draFailed:   map[model.PodID]bool{},
		gangVersion: map[model.GangID]uint64{},
		cycle:       newCycleState(),
		health:      newGangHealth(),
		timeouts:    defaultTimeouts,
		clock:       time.Now,
		liveMaxAge:  DefaultLiveMaxAge,
		liveExpires: map[string]time.Time{},
	}
	for _, n := range schedulers {
		c.names[n] = true
	}
	c.snap.DefaultQueue = defaultQueue
	return c
}

func newIndexedSnapshot() *model.Snapshot {
	s := model.NewSnapshot()
	s.PendingGangs = map[model.GangID]struct{}{}
	return s
}

// refreshPending keeps the snapshot's index of gangs with pending members, and their
// order, current for one gang. Call it after every change to a gang or to one of its
// pods. Caller holds mu.
func (c *Cache) refreshPending(g model.GangID) {
	c.order.Refresh(c.snap, g)
	for id := range c.gangPods[g].all() {
		if p := c.snap.Pods[id]; p != nil && !p.Bound() {
			c.snap.PendingGangs[g] = struct{}{}
			return
		}
	}
	delete(c.snap.PendingGangs, g)
}

// Changed is signalled when the cluster changed in a way a cycle may act on.
func (c *Cache) Changed() <-chan struct{} { return c.changed }

// freed records a change that may let waiting gangs fit, and wakes the loop.
func (c *Cache) freed() {
	c.capacityVersion++
	c.poke()
}

// versions returns the stamp a gang's failure is recorded with. Caller holds mu.
func (c *Cache) versions(g model.GangID) [2]uint64 {
	return [2]uint64{c.capacityVersion, c.gangVersion[g]}
}

func (c *Cache) poke() {
	select {
	case c.changed <- struct{}{}:
	default:
	}
}

// Serves reports whether this scheduler serves pods with the given schedulerName.
func (c *Cache) Serves(schedulerName string) bool { return c.names[schedulerName] }

// --- nodes ---

// UpsertNode adds or replaces a node and re-books the pods on it.
func (c *Cache) UpsertNode(n *corev1.Node) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.apiNodes[n.Name] = n
	c.rebuildNode(n.Name)
	c.freed()
}

// DeleteNode removes a node; its pods stay known and are booked again if it returns.
func (c *Cache) DeleteNode(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.apiNodes, name)
	c.snap.RemoveNode(name)
	c.chargeNode(name)
	c.freed()
}

// chargeNode tells the order a node changed: its capacity, and what the pods bound
// to it charge their queues. Caller holds mu.
func (c *Cache) chargeNode(name string) {
	c.order.RefreshNode(c.snap, name)
	var done map[model.GangID]bool
	for id := range c.podsOnNode[name] {
		g := c.gangOf[id]
		if g == "" || done[g] {
			continue
		}
		if done == nil {
			done = map[model.GangID]bool{}
		}
		done[g] = true
		c.order.Refresh(c.snap, g)
	}
}

// setInventory replaces a node's per-device GPU inventory (from ResourceSlices); nil
// falls back to the nvidia.com/gpu count. Caller holds mu.
func (c *Cache) setInventory(node string, gpus []model.GPU) {
	if gpus == nil {
		delete(c.inventory, node)
	} else {
		c.inventory[node] = gpus
	}
	c.rebuildNode(node)
}

// SetLive records the node agent's live measurements for a node's GPUs, by UUID.
func (c *Cache) SetLive(node string, live map[string]LiveGPU) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if live == nil {
		delete(c.live, node)
	} else {
		c.live[node] = live
	}
	c.rebuildNode(node)
	c.freed()
}

// SetLiveMaxAge sets how old a measurement of free GPU memory may be and still be
// trusted (0 keeps DefaultLiveMaxAge).
func (c *Cache) SetLiveMaxAge(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if d > 0 {
		c.liveMaxAge = d
	}
	for node := range c.live {
		c.rebuildNode(node)
	}
}

// expireLive rebuilds the nodes whose trusted free memory has grown too old, so
// that the cycle at now no longer sees it. Caller holds mu.
func (c *Cache) expireLive(now time.Time) {
	for node, expires := range c.liveExpires {
		if now.Before(expires) {
			continue
		}
		live := make(map[string]LiveGPU, len(c.live[node]))
		for uuid, l := range c.live[node] {
			if !l.SampledAt.IsZero() && !now.Before(l.SampledAt.Add(c.liveMaxAge)) {
				l.FreeBytes = model.UnknownBytes
			}
			live[uuid] = l
		}
		c.live[node] = live
		c.rebuildNode(node)
	}
}

// rebuildNode makes the node's model from the API object and inventory, then books
// every pod counted on it. Caller holds mu.
func (c *Cache) rebuildNode(name string) {
	delete(c.liveExpires, name)
	api := c.apiNodes[name]
	if api == nil {
		return
	}
	n := nodeFromAPI(api, c.inventory[name])
	n.CSIAttachLimits = c.storage.csiLimits[name]
	if live := c.live[name]; live != nil {
		now := c.clock()
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if l, ok := live[g.UUID]; ok {
				g.Healthy = g.Healthy && l.Healthy
				if l.FreeBytes == model.UnknownBytes {
					continue
				}
				if l.SampledAt.IsZero() {
					g.LiveFreeBytes = l.FreeBytes
					continue
				}
				if expires := l.SampledAt.Add(c.liveMaxAge); now.Before(expires) {
					g.LiveFreeBytes = l.FreeBytes
					if e, ok := c.liveExpires[name]; !ok || expires.Before(e) {
						c.liveExpires[name] = expires
					}
				}
			}
		}
	}
	ids := make([]model.PodID, 0, len(c.podsOnNode[name]))
	for id := range c.podsOnNode[name] {
		ids = append(ids, id)
	}
	sort.Slice(ids, func(i, j int) bool { return ids[i] < ids[j] })
	for _, id := range ids {
		if p := c.snap.Pods[id]; p != nil {
			p.GPUs = gpusFor(n, p)
			n.Book(p, p.GPUs)
		}
	}
	c.bookOrphans(n)
	c.snap.AddNode(n)
	c.chargeNode(name)
}

// gpusFor returns the GPUs a bound pod holds on n: those recorded on it, or, for a
// pod placed by someone else (the device plugin picks), the first idle GPUs, so the
// count is right even where the device is not known. A DRA pod's GPUs are always
// named: one with none (its claim shared, or another driver's devices only) holds
// none.
func gpusFor(n *model.Node, p *model.Pod) []model.GPUBinding {
	if len(p.GPUs) > 0 || p.GPU.Count == 0 || p.GPU.ByDevice {
		return p.GPUs
	}
	var out []model.GPUBinding
	for i := range n.GPUs {
		if len(out) == p.GPU.Count {
			break
		}
		if n.GPUs[i].Idle() {
			out = append(out, model.GPUBinding{Index: n.GPUs[i].Index, Whole: true})
		}
	}
	return out
}

// --- priority classes ---

// UpsertPriorityClass records a PriorityClass's value and preemptibility.
func (c *Cache) UpsertPriorityClass(name string, value int32, preemptible *bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.priorities[name] = priorityClass{value: value, preemptible: preemptible}
	c.freed()
}

// DeletePriorityClass forgets a PriorityClass.
func (c *Cache) DeletePriorityClass(name string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.priorities, name)
}

// indexClaims records which claims a pod references. Caller holds mu.
func (c *Cache) indexClaims(pod *corev1.Pod, id model.PodID) {
	for _, key := range claimKeys(pod) {
		if c.claimUsers[key] == nil {
			c.claimUsers[key] = map[model.PodID]struct{}{}
		}
		c.claimUsers[key][id] = struct{}{}
	}
}

// claimKeys are the "namespace/name" of the claims a pod references.
func claimKeys(pod *corev1.Pod) []string {
	var keys []string
	for _, pc := range pod.Spec.ResourceClaims {
		if name := dra.ClaimName(pod, pc); name != "" {
			keys = append(keys, pod.Namespace+"/"+name)
		}
	}
	return keys
}

// passClaims re-reads the other running pods of the claims a pod that ended or
// went away used: the next of them holds a shared claim's GPUs now. Caller holds
// mu; the pod is already unbooked.
func (c *Cache) passClaims(pod *corev1.Pod) {
	if pod.Spec.NodeName == "" {
		return
	}
	for _, key := range claimKeys(pod) {
		for id := range c.claimUsers[key] {
			if other := c.apiPods[id]; other != nil && other.UID != pod.UID && live(other) {
				c.upsertPodLocked(other)
			}
		}
	}
}

// UpsertClaim records a ResourceClaim and re-reads the pods that use it.
func (c *Cache) UpsertClaim(claim *resourceapi.ResourceClaim) {
	c.setClaim(claim.Namespace+"/"+claim.Name, claim)
}

// DeleteClaim forgets a ResourceClaim.
func (c *Cache) DeleteClaim(namespace, name string) { c.setClaim(namespace+"/"+name, nil) }

func (c *Cache) setClaim(key string, claim *resourceapi.ResourceClaim) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old := c.claims[key]
	if claim == nil {
		delete(c.claims, key)
	} else {
		c.claims[key] = claim
	}
	if claim == nil || claim.Status.Allocation != nil {
		c.alloc.ClaimSeen(key)
	}
	if old != nil && old.Status.Allocation != nil && (claim == nil || claim.Status.Allocation == nil) {
		c.freed() // devices given back
	}
	// Re-read the pending pods that use the claim, from the cache's current objects
	// and under the same lock: a copy taken earlier could be older than a binding the
	// informer has delivered since, and would make a bound pod look pending again.
	for id := range c.claimUsers[key] {
		p := c.apiPods[id]
		switch {
		case p == nil:
		case p.Spec.NodeName == "" && !c.assumed[id]:
			c.upsertPodLocked(p)
		case live(p):
			c.upsertPodLocked(p) // it may hold the claim's GPUs now
		}
	}
	c.refreshOrphan(key)
}

// claimInput resolves a pod's claims and indexes them: for a pending pod of this
// scheduler, its claims (kept for allocation at binding; the structured allocator's
// pods are marked); for a bound pod, the gpu.gantry.dev devices its allocated claims
// hold, with the GPUs the Binding recorded. The error says which claim does not exist
// yet. Caller holds mu.
func (c *Cache) claimInput(pod *corev1.Pod, id model.PodID, ours bool) (claimInput, error) {
	c.indexClaims(pod, id)
	delete(c.structured, id)
	var in claimInput
	switch {
	case len(pod.Spec.ResourceClaims) == 0:
	case pod.Spec.NodeName != "":
		// The GPUs its allocated claims hold are taken, whoever bound the pod (for
		// pods bound by another scheduler the claims are all there is), and a claim
		// it shares is booked on its holder only.
		if held := c.claimedGPUs(pod); len(held) > 0 {
			in.held = mergeGPUs(bookedGPUs(pod), held)
		}
	case ours:
		pcs, waiting := dra.Resolve(pod, c.claims)
		if waiting != "" {
			return in, errors.New(waiting)
		}
		in.pending = pcs
		c.podClaims[id] = pcs
		if dra.NeedsAllocator(pod, pcs) {
			in.viaAllocator = true
			c.structured[id] = struct{}{}
		}
	}
	return in, nil
}

// SetQueues replaces the queue tree.
func (c *Cache) SetQueues(queues map[string]*model.Queue) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.snap.Queues = queues
	c.freed()
}

// View runs f on the snapshot under the cache's lock, for readers that compute from
// all of it (queue shares). f must not keep the snapshot nor change it.
func (c *Cache) View(f func(*model.Snapshot)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	f(c.snap)
}

// Shares divides the cluster between the queues as scheduler.Scheduler.Shares does,
// from the queues' charges the cache's Order keeps (a cycle's own shares), and
// returns the queues' names. It holds the lock for a walk of the queues, not of
// every pod: the status reporter's Shares over every pod held it for 100-900 ms
// every 2 s at 100,000 bound pods, and the cycle that came next waited (issue 21).
func (c *Cache) Shares() (*fairshare.Shares, []string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	shares, err := c.order.Shares(c.snap)
	queues := make([]string, 0, len(c.snap.Queues))
	for n := range c.snap.Queues {
		queues = append(queues, n)
	}
	return shares, queues, err
}

// MemberCounts counts a gang's pods by phase as the API shows them: bound pods that
// have not finished are running.
func (c *Cache) MemberCounts(id model.GangID) (pending, running, succeeded, failed int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for pid := range c.gangPods[id].all() {
		p := c.apiPods[pid]
		switch {
		case p == nil:
		case p.Status.Phase == corev1.PodSucceeded:
			succeeded++
		case p.Status.Phase == corev1.PodFailed:
			failed++
		case p.Spec.NodeName != "":
			running++
		default:
			pending++
		}
	}
	return pending, running, succeeded, failed
}
