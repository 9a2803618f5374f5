package cache

import (
	"context"
	"fmt"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/dynamic-resource-allocation/structured"

	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// retryAfter is how long a gang that failed is left alone when nothing it depends on
// changed: a backstop against a change the versions do not capture.
const retryAfter = 10 * time.Second

type failure struct {
	versions [2]uint64
	at       time.Time
}

// cycleState is what the cycles decided that the API has not shown yet, and what
// they learnt.
type cycleState struct {
	// failed records, for each gang left pending, the cache's versions then and
	// when; it is not tried again until a version moves or retryAfter passes.
	failed map[model.GangID]failure
	// nominated are the nodes this scheduler nominated preemptors for, kept on the
	// snapshot's pods until the informer shows the nomination (or the pod binds), so
	// that the next cycle sees its own nominations at once.
	nominated map[model.PodID]string
	// victims are the pods this scheduler is evicting, with their preemptor.
	victims map[model.PodID]model.GangID
	// backoff holds back gangs whose binds failed until then.
	backoff map[model.GangID]time.Time
	// nominations counts the nominations made, to number them
	// (model.Pod.NominationOrder).
	nominations int64
}

func newCycleState() cycleState {
	return cycleState{
		failed:    map[model.GangID]failure{},
		nominated: map[model.PodID]string{},
		victims:   map[model.PodID]model.GangID{},
		backoff:   map[model.GangID]time.Time{},
	}
}

func (s *cycleState) forgetPod(id model.PodID) {
	delete(s.nominated, id)
	delete(s.victims, id)
}

// Schedule is the core's cycle: scheduler.Scheduler.ScheduleSkipping.
type Schedule func(snap *model.Snapshot, skip func(model.GangID) bool) *scheduler.Plan

// Ordered is the core's cycle given the cache's order of the pending gangs:
// scheduler.Scheduler.ScheduleOrdered.
type Ordered func(snap *model.Snapshot, order *scheduler.Order, skip func(model.GangID) bool) *scheduler.Plan

// Prepared is what Prepare returns.
type Prepared struct {
	Plan *scheduler.Plan
	// DRA is the time spent in the structured allocator; AskedDRA whether it ran.
	DRA      time.Duration
	AskedDRA bool
	// LockWait is how long Prepare waited for the cache's lock (informer handlers,
	// bind results and readers hold it between cycles); Ready the time readying the
	// snapshot under it (expiry, the allocator's device choices, bad pods); Schedule
	// the core's time (schedule).
	LockWait, Ready, Schedule time.Duration
}

// Prepare readies the snapshot for a cycle at now (the structured allocator's device
// choices, the gangs of pods that cannot be read held back) and runs schedule on it.
// Gangs that failed at the same versions less than retryAfter ago, and gangs in bind
// backoff, are skipped. schedule runs under the cache's lock and must not keep the
// snapshot: the lock never leaves the cache.
func (c *Cache) Prepare(ctx context.Context, now time.Time, schedule Schedule) Prepared {
	return c.PrepareOrdered(ctx, now, func(snap *model.Snapshot, _ *scheduler.Order, skip func(model.GangID) bool) *scheduler.Plan {
		return schedule(snap, skip)
	})
}

// PrepareOrdered is Prepare for a cycle that takes the pending gangs from the
// cache's Order, kept across cycles, rather than sorting them all.
func (c *Cache) PrepareOrdered(ctx context.Context, now time.Time, schedule Ordered) Prepared {
	asked := time.Now()
	c.mu.Lock()
	defer c.mu.Unlock()
	locked := time.Now()
	c.snap.Now = now.Unix()
	c.expireLive(now)
	skip := func(g model.GangID) bool {
		if until, ok := c.cycle.backoff[g]; ok && now.Before(until) {
			return true
		}
		f, ok := c.cycle.failed[g]
		return ok && f.versions == c.versions(g) && now.Sub(f.at) < retryAfter
	}
	out := Prepared{LockWait: locked.Sub(asked)}
	draStart := time.Now()
	out.AskedDRA = c.chooseDevices(ctx, skip)
	out.DRA = time.Since(draStart)
	c.markBadPods()
	scheduled := time.Now()
	out.Ready = scheduled.Sub(locked)
	out.Plan = schedule(c.snap, c.order, skip)
	c.order.Settle()
	out.Schedule = time.Since(scheduled)
	return out
}

// BindRequest is one pod's binding within a gang's batch.
type BindRequest struct {
	Pod       *model.Pod
	Placement placement.Placement
	// Claims are the pod's ResourceClaims, allocated before the Binding.
	Claims []dra.Claim
	// Structured is set when the structured allocator chose the devices:
	// Allocations are its results for the pod's unallocated claims on the
	// placement's node, in claim order.
	Structured  bool
	Allocations []resourceapi.AllocationResult
	// Node is the snapshot's node the pod is placed on, for the volume decisions
	// written before the Binding (pkg/podspec/volumebind).
	Node *model.Node
}

// Batch is one gang's binds, bound together; Min is how many must succeed for the
// gang to run (0 for elastic members).
type Batch struct {
	Gang model.GangID
	Min  int
	Reqs []BindRequest
}

// Victim is one eviction with the pod as the cache knew it, and the GPU memory it
// holds (a whole GPU counts its memory).
type Victim struct {
	scheduler.Eviction
	Pod       *model.Pod
	GPUMemory int64
}

// PendingGang is a gang left pending with its pods, to tell them why.
type PendingGang struct {
	scheduler.Pending
	Pods []*model.Pod
}

// Decisions are what Commit recorded and the dispatcher carries out.
type Decisions struct {
	Batches     []Batch
	Evictions   []Victim
	Nominations []scheduler.GangBind
	// Withdrawn are nominations the cycle ended: clear the pods' nominated node.
	Withdrawn []scheduler.Withdrawal
	Pending   []PendingGang
	// Gone are gangs that were pending before and no longer exist.
	Gone []model.GangID
	// Incomplete are gangs that have waited too long for members that do not exist,
	// to be told so once.
	Incomplete []PendingGang
	// ShareConflicts are pods bound or nominated in this plan whose GPU share and
	// engine's start-up need contradict on the GPU they were given, for a warning.
	ShareConflicts []ShareConflict
	// LockWait is how long Commit waited for the cache's lock; Held how long it held
	// it.
	LockWait, Held time.Duration
}

// ShareConflict is a pod whose share and gpu_memory_utilization contradict on its
// GPU, and what it is booked for and why (model.GPUDemand.ShareConflict).
type ShareConflict struct {
	Pod     *model.Pod
	Message string
}

// Commit records a plan before any of it reaches the API: binds are assumed (their
// GPUs and claims' devices taken), victims marked terminating, preemptors'
// nominations set, and pending gangs remembered with the versions they failed at.
// The next cycle's snapshot has all of it, before any informer echo. It returns what
// to carry out.
func (c *Cache) Commit(plan *scheduler.Plan, now time.Time) *Decisions {
	asked := time.Now()
	c.mu.Lock()
	locked := time.Now()
	d := &Decisions{Nominations: plan.Nominations, Withdrawn: plan.Withdrawn, LockWait: locked.Sub(asked)}
	defer func() {
		d.Held = time.Since(locked)
		c.mu.Unlock()
	}()
	for _, pd := range plan.Pending {
		c.cycle.failed[pd.Gang] = failure{versions: c.versions(pd.Gang), at: now}
	}
	for _, gb := range plan.Binds {
		delete(c.cycle.failed, gb.Gang)
	}
	for g, until := range c.cycle.backoff {
		if !now.Before(until) {
			delete(c.cycle.backoff, g) // over: skip no longer reads it
		}
	}
	for g := range c.cycle.failed {
		if _, ok := c.snap.Gangs[g]; !ok {
			delete(c.cycle.failed, g)
			delete(c.cycle.backoff, g)
			d.Gone = append(d.Gone, g)
		}
	}
	d.Batches = c.commitBinds(plan, now)
	for _, ev := range plan.Evictions {
		if p := c.snap.Pods[ev.Pod]; p != nil && !p.Terminating {
			d.Evictions = append(d.Evictions, Victim{Eviction: ev, Pod: p, GPUMemory: c.heldGPUMemory(p)})
			c.markTerminating(ev.Pod)
			c.cycle.victims[ev.Pod] = ev.Preemptor
		}
	}
	for _, wd := range plan.Withdrawn {
		for _, id := range wd.Pods {
			c.nominate(id, "")
		}
	}
	for _, nom := range plan.Nominations {
		for _, pl := range nom.Placements {
			c.nominate(pl.Pod, pl.Node)
			c.noteShareConflict(d, c.snap.Pods[pl.Pod], pl)
		}
	}
	for _, b := range d.Batches {
		for _, req := range b.Reqs {
			c.noteShareConflict(d, req.Pod, req.Placement)
		}
	}
	for _, pd := range plan.Pending {
		pg := PendingGang{Pending: pd}
		for _, id := range pd.Pods {
			if p := c.snap.Pods[id]; p != nil {
				pg.Pods = append(pg.Pods, p)
			}
			if msg := c.podErrors[id]; msg != "" && pd.Kind == scheduler.PendingIncomplete {
				pg.Kind = scheduler.PendingInvalidPod
			}
		}
		d.Pending = append(d.Pending, pg)
	}
	c.commitHealth(d, now)
	return d
}

// commitBinds assumes the plan's binds and takes the structured allocator's
// allocations for them. A gang whose allocation clashes with another gang's of this
// plan (another driver's device both need) is left for the next cycle, whole.
// Caller holds mu.
func (c *Cache) commitBinds(plan *scheduler.Plan, now time.Time) []Batch {
	batches := make([]Batch, 0, len(plan.Binds))
	taken := sets.New[structured.DeviceID]()
	deferred := false
plans:
	for _, gb := range plan.Binds {
		b := Batch{Gang: gb.Gang}
		if !gb.Elastic {
			b.Min = len(gb.Placements)
		}
		for _, pl := range gb.Placements {
			p := c.snap.Pods[pl.Pod]
			if p == nil || p.Bound() {
				continue
			}
			allocs, viaAllocator, ok := c.alloc.Take(pl.Pod, pl.Node, taken)
			if !ok {
				deferred = true
				continue plans
			}
			b.Reqs = append(b.Reqs, BindRequest{Pod: p, Placement: pl, Claims: c.podClaims[pl.Pod], Structured: viaAllocator, Allocations: allocs, Node: c.snap.Node(pl.Node)})
		}
		batches = append(batches, b)
	}
	if deferred {
		c.poke()
	}
	for _, b := range batches {
		for _, req := range b.Reqs {
			c.assume(req.Pod.ID, req.Placement, now.Unix())
			if req.Structured {
				c.alloc.MarkInflight(c.apiPods[req.Pod.ID], req.Claims, req.Allocations)
			}
		}
	}
	return batches
}

// assume books a placement made by this scheduler before the API confirms it.
// Caller holds mu.
func (c *Cache) assume(id model.PodID, pl placement.Placement, now int64) {
	old := c.snap.Pods[id]
	if old == nil || old.Bound() {
		return
	}
	p := *old
	p.Node, p.GPUs, p.StartedAt, p.NominatedNode = pl.Node, pl.GPUs, now, ""
	c.snap.Pods[id] = &p
	c.assumed[id] = true
	delete(c.cycle.nominated, id)
	c.book(&p)
	c.refreshPending(p.Gang)
}

// nominate records a preemptor's nominated node on its pod in the snapshot ("" clears
// it, kept so until the informer shows it cleared). Caller holds mu.
func (c *Cache) nominate(id model.PodID, node string) {
	p := c.snap.Pods[id]
	if p == nil || p.Bound() {
		return
	}
	c.cycle.nominated[id] = node
	if p.NominatedNode != node {
		q := *p
		q.NominatedNode, q.NominationOrder = node, 0
		if node != "" {
			c.cycle.nominations++
			q.NominationOrder = c.cycle.nominations
		}
		c.snap.Pods[id] = &q
		c.order.Refresh(c.snap, p.Gang) // a preemptor goes first in its queue
	}
}

// noteShareConflict adds p to d.ShareConflicts when its share and its engine's
// start-up need contradict on the GPU pl gives it. Caller holds mu.
func (c *Cache) noteShareConflict(d *Decisions, p *model.Pod, pl placement.Placement) {
	if p == nil || !p.GPU.Shared() || p.GPU.StartFreeFraction <= 0 {
		return
	}
	n := c.snap.Node(pl.Node)
	if n == nil {
		return
	}
	for _, b := range pl.GPUs {
		if g := n.GPUByIndex(b.Index); g != nil {
			if msg := p.GPU.ShareConflict(g.MemoryBytes); msg != "" {
				d.ShareConflicts = append(d.ShareConflicts, ShareConflict{Pod: p, Message: msg})
				return
			}
		}
	}
}

// Forget undoes an assumption for a pod whose binding failed: its node and GPUs are
// free again.
func (c *Cache) Forget(id model.PodID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	p := c.snap.Pods[id]
	if p == nil || !c.assumed[id] {
		return
	}
	c.unbook(p)
	c.alloc.DropInflight(c.podClaims[id])
	q := *p
	q.Node, q.GPUs, q.StartedAt = "", nil, 0
	c.snap.Pods[id] = &q
	delete(c.assumed, id)
	c.refreshPending(q.Gang)
	c.freed()
}

// Backoff holds a gang back from cycles until the given time (its binds failed).
func (c *Cache) Backoff(g model.GangID, until time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cycle.backoff[g] = until
}

// UnmarkTerminating undoes the marking of a victim whose eviction was refused or
// cancelled: it runs on, and counts as running again.
func (c *Cache) UnmarkTerminating(id model.PodID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.cycle.victims, id)
	if p := c.snap.Pods[id]; p != nil && p.Terminating {
		if api := c.apiPods[id]; api != nil && api.DeletionTimestamp != nil {
			return
		}
		q := *p
		q.Terminating = false
		c.snap.Pods[id] = &q
		c.freed()
	}
}

// markTerminating marks a victim. Caller holds mu.
func (c *Cache) markTerminating(id model.PodID) {
	if p := c.snap.Pods[id]; p != nil && !p.Terminating {
		q := *p
		q.Terminating = true
		c.snap.Pods[id] = &q
	}
}

// markBadPods holds back the gangs of pods whose spec cannot be read, with the
// reason as the gang's pending message. Caller holds mu.
func (c *Cache) markBadPods() {
	for id, msg := range c.podErrors {
		gid := c.gangOf[id]
		if g := c.snap.Gangs[gid]; g != nil && g.Missing != msg {
			cp := *g
			cp.Missing = fmt.Sprintf("pod %s: %s", id, msg)
			c.snap.Gangs[gid] = &cp
		}
	}
}

// NeedsVictims reports whether a preemptor still waits for the room its victims
// free: it exists and has members that are neither bound nor assumed. A preemptor
// bound elsewhere, deleted, or placed since, does not.
func (c *Cache) NeedsVictims(g model.GangID) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, waiting := c.snap.PendingGangs[g]
	return waiting
}

// Waiting reports, of gangs, those that exist and have members neither bound nor
// assumed (the dispatcher forgets what it remembers of the others).
func (c *Cache) Waiting(gangs []model.GangID) map[model.GangID]bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[model.GangID]bool, len(gangs))
	for _, g := range gangs {
		if _, ok := c.snap.PendingGangs[g]; ok {
			out[g] = true
		}
	}
	return out
}

// heldGPUMemory is the GPU memory a bound pod holds: its shares, and the memory of
// the GPUs it holds whole. Caller holds mu.
func (c *Cache) heldGPUMemory(p *model.Pod) int64 {
	n := c.snap.Node(p.Node)
	var held int64
	for _, b := range p.GPUs {
		switch {
		case !b.Whole:
			held += b.MemoryBytes
		case b.MemoryBytes > 0:
			held += b.MemoryBytes
		case n != nil:
			if g := n.GPUByIndex(b.Index); g != nil {
				held += g.MemoryBytes
			}
		}
	}
	return held
}
