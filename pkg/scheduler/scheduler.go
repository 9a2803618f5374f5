// Package scheduler is Gantry's scheduling cycle: a snapshot in, a Plan out.
//
// One cycle takes the pending gangs in queue-fair order (pkg/fairshare), places each
// gang's minimum in one all-or-nothing transaction (pkg/placement), preempts or
// reclaims for a gang that does not fit (pkg/preempt), then offers the capacity left to
// elastic members. It writes down every decision, and for every gang it leaves pending,
// why, in words a user can act on.
//
// The cycle is pure and deterministic for a given snapshot: it must not depend on a
// Kubernetes client, an informer, the clock or any I/O. pkg/kube feeds it from the
// cluster and carries the Plan out; pkg/sim and the benchmarks feed it directly.
package scheduler

import (
	"fmt"
	"slices"
	"sort"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// Config tunes a cycle.
type Config struct {
	// Preemption enables preempt and reclaim.
	Preemption bool
	// MinRuntimeSeconds protects a gang from preemption for this long after it starts.
	MinRuntimeSeconds int64
	// VictimTimeoutSeconds bounds how long a nominated preemptor waits for a victim
	// past the end of the victim's grace period (DefaultVictimTimeoutSeconds when
	// zero). Past it, the victim is stuck (a finalizer, a node that does not answer):
	// the preemptor's nomination ends and it takes its turn in queue order again,
	// where it may preempt elsewhere.
	VictimTimeoutSeconds int64
}

// Plan is what one cycle decided.
type Plan struct {
	// Binds are gangs (or elastic members) to bind now, whole.
	Binds []GangBind
	// Evictions are pods to evict so that a preemptor fits.
	Evictions []Eviction
	// Nominations are preemptors waiting for their victims to go.
	Nominations []GangBind
	// Pending are gangs that stay pending, with the reason.
	Pending []Pending
	// Preemptions are the decisions behind Evictions, one per preemptor, to log.
	Preemptions []Preemption
	// Withdrawn are nominations this cycle ended: the gang could use neither the room
	// kept for it nor any other (its victims are gone and it still does not fit, or
	// its queue now refuses it). Its pods' nominated node is to be cleared; the gang
	// waits in queue order like any other, and may preempt again. A gang nominated
	// again in the same cycle is not listed.
	Withdrawn []Withdrawal
	// Deferred counts the pending pods of the gangs this cycle left untried because
	// it had placed its budget of pods (ScheduleWithin): they wait, whole and
	// unreported, for the next cycle, which the caller should run soon.
	Deferred int
}

// Withdrawal is one gang's nomination that ended without a bind.
type Withdrawal struct {
	Gang model.GangID
	// Pods are the gang's pending pods that had a nominated node.
	Pods   []model.PodID
	Reason string
}

// GangBind is one gang's placements, bound together.
type GangBind struct {
	Gang       model.GangID
	Placements []placement.Placement
	// Elastic is true when these are members above the gang's minimum.
	Elastic bool
}

// Eviction is one pod to evict and why.
type Eviction struct {
	Pod       model.PodID
	Gang      model.GangID
	Preemptor model.GangID
	// Kind is "preempt" or "reclaim".
	Kind   string
	Reason string
}

// Pending is a gang left pending this cycle.
type Pending struct {
	Gang model.GangID
	Pods []model.PodID
	// Kind classifies Reason for metrics and dashboards.
	Kind   PendingKind
	Reason string
}

// PendingKind is why a gang waits, in one word.
type PendingKind string

const (
	PendingIncomplete PendingKind = "gang_incomplete"
	// PendingQueueInvalid: the queue tree is not valid (a cycle, a missing parent).
	PendingQueueInvalid PendingKind = "queue_invalid"
	// PendingQueueNotFound: the gang's queue does not exist.
	PendingQueueNotFound PendingKind = "queue_not_found"
	// PendingQueueNotLeaf: the gang's queue has child queues; only leaves hold pods.
	PendingQueueNotLeaf PendingKind = "queue_not_leaf"
	// PendingInvalidPod: a member's spec cannot be read (a bad GPU annotation, say);
	// set by whoever translates pods, with what to change as the reason.
	PendingInvalidPod       PendingKind = "invalid_pod"
	PendingQueueLimit       PendingKind = "queue_limit"
	PendingQueueQuota       PendingKind = "queue_quota"
	PendingNoFit            PendingKind = "no_fit"
	PendingWaitingForVictim PendingKind = "waiting_for_victims"
)

// PendingKinds are all the kinds, for metrics that list them from the start.
var PendingKinds = []PendingKind{PendingIncomplete, PendingQueueInvalid, PendingQueueNotFound, PendingQueueNotLeaf,
	PendingInvalidPod, PendingQueueLimit, PendingQueueQuota, PendingNoFit, PendingWaitingForVictim}

// Scheduler runs cycles with one placer.
type Scheduler struct {
	Placer *placement.Placer
	Config Config
}

// New returns a scheduler with the named placement policy ("" for the default),
// which learns the workload mix from the pods it sees (placement.NewOnline; gantry
// sim builds its Placer the same way).
func New(policy string, cfg Config) (*Scheduler, error) {
	p, err := placement.NewOnline(policy)
	if err != nil {
		return nil, err
	}
	return &Scheduler{Placer: p, Config: cfg}, nil
}

// work is one gang with pending members, as the cycle sees it.
type work struct {
	gang *model.Gang
	// core are the pending members that must be placed together to reach MinMember.
	core []*model.Pod
	// extra are pending members beyond the minimum.
	extra []*model.Pod
	// nominated is true when an earlier cycle evicted for this gang; nominationOrder is
	// the earliest model.Pod.NominationOrder of its pending pods (zero when unknown).
	nominated       bool
	nominationOrder int64
	// held is true for a nominated gang the caller asked to skip: it is neither placed
	// nor reported, but the room promised to it is kept (keepRoom).
	held bool
}

// Schedule runs one cycle over snap. It does not modify snap: decisions are made on a
// copy-on-write view of it.
func (s *Scheduler) Schedule(snap *model.Snapshot) *Plan {
	return s.ScheduleSkipping(snap, nil)
}

// maxPreemptionSearches bounds the victim searches of one cycle: each costs up to
// milliseconds on a large cluster, and a backlog of blocked gangs must not stretch a
// cycle into seconds. Gangs past the bound are tried again next cycle.
const maxPreemptionSearches = 32

// ScheduleSkipping is Schedule, leaving out the pending gangs for which skip returns
// true (the caller knows nothing changed for them since they last failed). They are
// neither placed nor reported.
func (s *Scheduler) ScheduleSkipping(snap *model.Snapshot, skip func(model.GangID) bool) *Plan {
	return s.ScheduleWithin(snap, skip, 0)
}

// ScheduleWithin is ScheduleSkipping that stops placing gangs in queue order once it
// has placed maxPods pods (0: no bound; see budget.go): the gangs left over are
// neither placed nor reported, and Plan.Deferred counts their pods. It orders the
// snapshot's pending gangs from scratch (OrderOf); ScheduleOrdered takes an Order
// kept across cycles instead.
func (s *Scheduler) ScheduleWithin(snap *model.Snapshot, skip func(model.GangID) bool, maxPods int) *Plan {
	return s.ScheduleOrdered(snap, OrderOf(snap), skip, Bound{Pods: maxPods})
}

// ScheduleOrdered is ScheduleWithin with the pending gangs in order, which the
// caller keeps current with snap (Order.Refresh for every gang that changed since
// the last cycle). The cycle reads only the gangs it reaches: with a budget, its
// cost grows with the pods it places and the gangs it passes over, not with the
// gangs pending. It does not change order. Bound ends the queue-order loop early
// (budget.go).
func (s *Scheduler) ScheduleOrdered(snap *model.Snapshot, order *Order, skip func(model.GangID) bool, bound Bound) *Plan {
	plan := &Plan{}
	s.Placer.ObserveSnapshot(order.observed(snap))
	// The snapshot holds still for the cycle (the caller's lock): the root view reads
	// its node list in place until it is written.
	view := placement.NewSharedView(snap)
	defer view.Done()
	shares, queueErr := order.Shares(snap)
	c := &cycle{s: s, snap: snap, view: view, shares: shares, plan: plan, skip: skip, queueErr: queueErr}

	nominated, queues, queueNames := c.admit(order)

	var elastic []*work
	// What a preemption freed is kept for the gang it was freed for: nominated gangs
	// go before every queue, so no other gang, of any queue, takes it first. They go
	// first only to bind, or to wait for their victims; a nomination that serves for
	// neither ends here, and the gang takes its turn in queue order.
	for _, w := range nominated {
		if w.held {
			c.keepRoom(w) // skipped by the caller: neither placed nor reported, its room kept
			continue
		}
		var done, kept bool
		var why string
		if len(w.core) == 0 {
			done, kept, why = c.placeNominatedElastic(w)
		} else {
			done, kept, why = c.placeNominated(w)
		}
		switch {
		case done:
			elastic = append(elastic, w)
		case !kept:
			c.withdraw(w, why)
			cur := queues[w.gang.Queue]
			if cur == nil {
				cur = &cursor{done: true}
				queues[w.gang.Queue] = cur
			}
			if !slices.Contains(queueNames, w.gang.Queue) {
				queueNames = append(queueNames, w.gang.Queue)
				sort.Strings(queueNames)
			}
			c.putBack(cur, w)
		}
	}
	// Queue-fair order: after every gang, the queue furthest below its share goes next.
	for len(queueNames) > 0 {
		if c.spent(bound) {
			plan.Deferred = order.Pods() - c.reached
			break
		}
		q := s.nextQueue(shares, queueNames)
		w := c.nextWork(queues[q])
		if w == nil {
			queueNames = remove(queueNames, q)
			continue
		}
		if len(w.core) == 0 {
			elastic = append(elastic, w)
			continue
		}
		c.tried++
		if c.placeGang(w) {
			c.placed += len(w.core)
			elastic = append(elastic, w)
		}
	}
	// Elastic members take what is left, one at a time, never past a queue limit.
	for _, w := range elastic {
		c.placeElastic(w)
	}
	plan.keepRenominated()
	return plan
}

// admit opens the order's queues for the cycle. The gangs of a queue that cannot be
// used (missing, not a leaf, a broken tree) are reported at once; the nominated
// gangs, which go before every queue, are taken from the head of each queue and
// returned in the order of before; the rest are read as the queue-order loop
// reaches them (nextWork).
func (c *cycle) admit(order *Order) (nominated []*work, queues map[string]*cursor, queueNames []string) {
	queues = make(map[string]*cursor, len(order.queues))
	for q, qo := range order.queues {
		queues[q] = &cursor{q: qo}
		queueNames = append(queueNames, q)
	}
	sort.Strings(queueNames)
	usable := queueNames[:0]
	for _, q := range queueNames {
		cur := queues[q]
		all := !c.queueUsable(q) // every gang is reported, but for a held preemptor
		if !all {
			usable = append(usable, q)
		}
		for k, ok := cur.peek(); ok && (k.nominated || all); k, ok = cur.peek() {
			cur.next()
			if w := c.admitGang(k); w != nil {
				nominated = append(nominated, w)
			}
		}
	}
	sort.Slice(nominated, func(i, j int) bool { return before(nominated[i], nominated[j]) })
	return nominated, queues, usable
}

// queueUsable says whether gangs charged to q may be tried: no queues at all, or a
// leaf of a valid tree.
func (c *cycle) queueUsable(q string) bool {
	snap := c.snap
	if q == "" || len(snap.Queues) == 0 {
		return true
	}
	if fairshare.ValidatePodQueue(snap.Queues, q) != nil {
		return false
	}
	return c.queueErr == nil || c.shares.Queue(q) != nil
}

// nextWork takes the next gang of cur that may be tried in this cycle; the ones it
// passes over are skipped (the caller's skip) or reported. Nil at the queue's end.
func (c *cycle) nextWork(cur *cursor) *work {
	for {
		k, ok := cur.peek()
		if len(cur.front) > 0 && (!ok || workKey(cur.front[0]).less(k)) {
			w := cur.front[0]
			cur.front = cur.front[1:]
			c.reached += len(w.core) + len(w.extra)
			return w
		}
		if !ok {
			return nil
		}
		cur.next()
		if w := c.admitGang(k); w != nil && !w.held {
			return w
		}
	}
}

// putBack returns a gang whose nomination ended to its queue, where before puts it
// now (withdraw made it an ordinary gang); nextWork merges it with the Order.
func (c *cycle) putBack(cur *cursor, w *work) {
	c.reached -= len(w.core) + len(w.extra)
	i := sort.Search(len(cur.front), func(i int) bool { return before(w, cur.front[i]) })
	cur.front = slices.Insert(cur.front, i, w)
}

// admitGang reads the gang of key k for the cycle. It returns nil for a gang that
// must wait whatever happens (missing pods, an unusable queue, a pod that cannot be
// read), which it reports, and for one the caller asked to skip; a skipped
// preemptor is returned held: it still owns the room its victims free.
func (c *cycle) admitGang(k orderKey) *work {
	snap, shares, plan := c.snap, c.shares, c.plan
	c.reached += k.pods
	g := snap.Gangs[k.id]
	if g == nil {
		return nil
	}
	wv, ok := gangWork(snap, g)
	if !ok {
		return nil
	}
	w := &wv
	if c.skip != nil && c.skip(w.gang.ID) {
		// A skipped preemptor still owns the room its victims free: kept, or the
		// next gang that does not fit would evict again for it (issue 19).
		if w.nominated && len(w.core) > 0 {
			w.held = true
			return w
		}
		return nil
	}
	if w.gang.Missing != "" {
		plan.pend(w, PendingIncomplete, w.gang.Missing)
		return nil
	}
	if kind, why := refusal(w); why != "" {
		plan.pend(w, kind, why)
		return nil
	}
	if q := w.gang.Queue; q != "" && len(snap.Queues) > 0 {
		if err := fairshare.ValidatePodQueue(snap.Queues, q); err != nil {
			kind := PendingQueueNotLeaf
			if snap.Queues[q] == nil {
				kind = PendingQueueNotFound
			}
			plan.pend(w, kind, err.Error())
			return nil
		}
		if c.queueErr != nil && shares.Queue(q) == nil {
			plan.pend(w, PendingQueueInvalid, fmt.Sprintf("queue %s is not usable: %v", q, c.queueErr))
			return nil
		}
	}
	return w
}

// cycle is the state of one Schedule call.
type cycle struct {
	s      *Scheduler
	snap   *model.Snapshot
	view   *placement.View
	shares *fairshare.Shares
	plan   *Plan
	// skip and queueErr are the caller's gangs to leave out and what is wrong with
	// the queue tree.
	skip     func(model.GangID) bool
	queueErr error
	// floor is the lowest priority of any pod preemption may evict; anyVictim is
	// false when there is none, and no search can succeed. Read through victimFloor:
	// found on first use, as it walks every pod.
	floor      int32
	anyVictim  bool
	floorKnown bool
	searches   int
	// placed counts the pods the queue-order loop placed (budget.go); reached the
	// pending pods of the gangs the cycle has taken from the Order.
	placed int
	// tried counts the gangs the queue-order loop tried to place.
	tried   int
	reached int
	// released are the pods evicted in this cycle and releasedGPUs the GPUs they hold,
	// by node: promised to their preemptors, never chosen again (see onRoomStillHeld).
	released     map[model.PodID]bool
	releasedGPUs map[string]map[int]bool
	// leaving are the pods terminating in the snapshot, not stuck, by node; listed
	// once per cycle, when a gang first does not fit (waitForLeaving).
	leaving       map[string][]*model.Pod
	leavingListed bool
}

// placeGang places w's core members, or preempts for them, or records why not.
// It reports whether the gang's minimum is now placed.
func (c *cycle) placeGang(w *work) bool {
	s, view, plan := c.s, c.view, c.plan
	amounts := podsAmounts(w.core)
	overQuota, overLimit := c.queueRefusal(w, amounts)
	if overQuota != nil {
		plan.pend(w, PendingQueueQuota, overQuota.Error())
		return false
	}
	if overLimit == nil {
		placements, unsched := s.Placer.PlaceGang(view, w.core)
		if unsched == nil && c.onRoomStillHeld(w, placements, amounts, false) {
			return false
		}
		if unsched == nil {
			plan.Binds = append(plan.Binds, GangBind{Gang: w.gang.ID, Placements: placements})
			c.allocate(w.gang, amounts)
			return true
		}
		if c.reserveNominated(w, amounts) || c.waitForLeaving(w, amounts) {
			return false
		}
		if !c.mayPreempt(w) {
			plan.pend(w, PendingNoFit, c.neverPreemptsNote(w, unsched.Message))
			return false
		}
		c.preempt(w, w.core, amounts, PendingNoFit, unsched.Message, nil)
		return false
	}
	// At its limit, the gang may still take the place of lower-priority work of its
	// own queue, and under an ancestor's limit, reclaim within that ancestor.
	gate := c.withinLimit(w.gang.Queue, amounts, overLimit)
	ownLimit := gate.queue == w.gang.Queue
	if !c.mayPreempt(w) || ownLimit && w.gang.Priority <= c.victimFloor() {
		plan.pend(w, PendingQueueLimit, overLimit.Error())
		return false
	}
	c.preempt(w, w.core, amounts, PendingQueueLimit, overLimit.Error(), gate)
	return false
}

// queueRefusal says whether the gang's queue refuses amounts: past its quota for
// non-preemptible work (on the leaf or an ancestor), or past a limit.
func (c *cycle) queueRefusal(w *work, amounts fairshare.Amounts) (overQuota, overLimit error) {
	if c.shares == nil || w.gang.Queue == "" {
		return nil, nil
	}
	if !w.gang.Preemptible {
		if err := c.shares.WouldExceedQuota(w.gang.Queue, amounts); err != nil {
			return err, nil
		}
	}
	return nil, c.shares.WouldExceedLimit(w.gang.Queue, amounts)
}

// allocate charges amounts to the gang's queue for the rest of the cycle.
func (c *cycle) allocate(g *model.Gang, amounts fairshare.Amounts) {
	if c.shares == nil || g.Queue == "" {
		return
	}
	if g.Preemptible {
		c.shares.Allocate(g.Queue, amounts)
	} else {
		c.shares.AllocateNonPreemptible(g.Queue, amounts)
	}
}

// placeElastic offers w's members above its minimum the room left, one at a time,
// never past a queue limit. A member that does not fit may reclaim from other queues
// while its queue stays within its quota: members above a minimum count toward the
// guarantee too.
func (c *cycle) placeElastic(w *work) { c.placeElasticMembers(w, true) }

// placeElasticMembers is placeElastic; without mayReclaim (a nominated gang's turn,
// which placeElastic follows when it fails) a member that does not fit stops the
// gang's turn without a victim search and without a pending entry. It reports whether any member was
// placed, and whether one waits for victims still terminating (waiting) or for pods
// evicted in this cycle (nominated again).
func (c *cycle) placeElasticMembers(w *work, mayReclaim bool) (placedAny, waiting bool) {
	s, view, shares, plan := c.s, c.view, c.shares, c.plan
	var placed []placement.Placement
	for i, p := range w.extra {
		amounts := podAmounts(p)
		if shares != nil && w.gang.Queue != "" {
			if err := shares.WouldExceedLimit(w.gang.Queue, amounts); err != nil {
				if mayReclaim {
					plan.pendExtra(w, w.extra[i:], PendingQueueLimit, err.Error())
				}
				break
			}
		}
		pl, unsched := s.Placer.PlacePod(view, p)
		if unsched != nil {
			if leaving, _ := c.leavingFor([]*model.Pod{p}); len(leaving) > 0 {
				waiting = true
				break // its victims are still going
			}
			if mayReclaim && !w.gang.NeverPreempts && c.withinQuota(w.gang.Queue, amounts) && c.s.Config.Preemption && c.hasVictim() &&
				c.preempt(w, []*model.Pod{p}, amounts, PendingNoFit, unsched.Message, nil) {
				break // nominated: it waits for its victims
			}
			if mayReclaim {
				plan.pendExtra(w, w.extra[i:], PendingNoFit, unsched.Message)
			}
			break
		}
		if c.takesReleasedGPU([]placement.Placement{pl}) {
			waiting = true
			break // evicted this cycle: bindable once the victims are gone
		}
		view.Assign(p, pl)
		c.allocate(w.gang, amounts)
		placed = append(placed, pl)
	}
	if len(placed) > 0 {
		plan.Binds = append(plan.Binds, GangBind{Gang: w.gang.ID, Placements: placed, Elastic: true})
	}
	return len(placed) > 0, waiting
}

func (s *Scheduler) nextQueue(shares *fairshare.Shares, names []string) string {
	if shares != nil {
		var known []string
		for _, n := range names {
			if n != "" && shares.Queue(n) != nil {
				known = append(known, n)
			}
		}
		if q, ok := shares.Next(known); ok {
			return q
		}
	}
	return names[0]
}

// pendExtra reports w's members above its minimum that this cycle could not place
// (pods), so that each waits with a reason like any pending pod. The gang's bound
// members are not listed: a running gang does not read as pending.
func (p *Plan) pendExtra(w *work, pods []*model.Pod, kind PendingKind, reason string) {
	ids := make([]model.PodID, 0, len(pods))
	for _, pod := range pods {
		ids = append(ids, pod.ID)
	}
	p.Pending = append(p.Pending, Pending{Gang: w.gang.ID, Pods: ids, Kind: kind, Reason: reason})
}

func (p *Plan) pend(w *work, kind PendingKind, reason string) {
	pods := make([]model.PodID, 0, len(w.core)+len(w.extra))
	for _, pod := range w.core {
		pods = append(pods, pod.ID)
	}
	for _, pod := range w.extra {
		pods = append(pods, pod.ID)
	}
	p.Pending = append(p.Pending, Pending{Gang: w.gang.ID, Pods: pods, Kind: kind, Reason: reason})
}

// gangWork is g's pending members as the cycle sees them; false when it has none.
func gangWork(snap *model.Snapshot, g *model.Gang) (work, bool) {
	var pending []*model.Pod
	bound := 0
	for _, id := range g.Members {
		p := snap.Pods[id]
		if p == nil {
			continue
		}
		if p.Bound() {
			if !p.Terminating {
				bound++
			}
			continue
		}
		pending = append(pending, p)
	}
	if len(pending) == 0 {
		return work{}, false
	}
	if len(pending) > 1 {
		// Members marked elastic go last; among equals, oldest and then by name.
		sort.SliceStable(pending, func(i, j int) bool {
			a, b := pending[i], pending[j]
			if a.Elastic != b.Elastic {
				return !a.Elastic
			}
			if a.CreatedAt != b.CreatedAt {
				return a.CreatedAt < b.CreatedAt
			}
			return a.ID < b.ID
		})
	}
	need := g.MinMember - bound - g.Succeeded
	if need < 0 {
		need = 0
	}
	if need > len(pending) {
		// Pods are missing: the gang waits whole.
		if g.Missing == "" {
			g = withMissing(g, fmt.Sprintf("waiting for %d of %d pods to be created", need-len(pending), g.MinMember))
		}
		need = len(pending)
	}
	if q := snap.QueueOf(g.Queue); q != g.Queue {
		charged := *g
		charged.Queue = q
		g = &charged
	}
	w := work{gang: g, core: pending[:need], extra: pending[need:]}
	for _, p := range pending {
		if p.NominatedNode == "" {
			continue
		}
		if !w.nominated || p.NominationOrder < w.nominationOrder {
			w.nominationOrder = p.NominationOrder
		}
		w.nominated = true
	}
	return w, true
}

func withMissing(g *model.Gang, why string) *model.Gang {
	c := *g
	c.Missing = why
	return &c
}

// before orders gangs within a queue: nominated preemptors first (their space is
// being freed for them), then higher priority, then, among nominated ones, the one
// nominated first (it takes the room freed first: gangs created in the same second
// would otherwise go by name, and a preemptor nominated later could take the GPU
// freed for an earlier one, issue 19), then first come.
func before(a, b *work) bool {
	if a.nominated != b.nominated {
		return a.nominated
	}
	if a.gang.Priority != b.gang.Priority {
		return a.gang.Priority > b.gang.Priority
	}
	if a.nominated && a.nominationOrder != b.nominationOrder {
		return a.nominationOrder < b.nominationOrder
	}
	if a.gang.CreatedAt != b.gang.CreatedAt {
		return a.gang.CreatedAt < b.gang.CreatedAt
	}
	return a.gang.ID < b.gang.ID
}

func remove(names []string, name string) []string {
	out := names[:0]
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}
