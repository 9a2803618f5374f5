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
	"sort"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/preempt"
)

// Config tunes a cycle.
type Config struct {
	// Preemption enables preempt and reclaim.
	Preemption bool
	// MinRuntimeSeconds protects a gang from preemption for this long after it starts.
	MinRuntimeSeconds int64
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
	PendingIncomplete       PendingKind = "gang_incomplete"
	PendingQueueInvalid     PendingKind = "queue_invalid"
	PendingQueueLimit       PendingKind = "queue_limit"
	PendingQueueQuota       PendingKind = "queue_quota"
	PendingNoFit            PendingKind = "no_fit"
	PendingWaitingForVictim PendingKind = "waiting_for_victims"
)

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
	// nominated is true when an earlier cycle evicted for this gang.
	nominated bool
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
	plan := &Plan{}
	s.Placer.ObserveSnapshot(snap)
	view := placement.NewView(snap)
	shares, queueErr := s.Shares(snap)
	c := &cycle{s: s, snap: snap, view: view, shares: shares, plan: plan}
	c.floor, c.anyVictim = preemptibleFloor(snap)

	works := pendingWork(snap)
	byQueue := map[string][]*work{}
	var queueNames []string
	for _, w := range works {
		if skip != nil && skip(w.gang.ID) {
			continue
		}
		if w.gang.Missing != "" {
			plan.pend(w, PendingIncomplete, w.gang.Missing)
			continue
		}
		if q := w.gang.Queue; q != "" && len(snap.Queues) > 0 {
			if err := fairshare.ValidatePodQueue(snap.Queues, q); err != nil {
				plan.pend(w, PendingQueueInvalid, err.Error())
				continue
			}
			if queueErr != nil && shares.Queue(q) == nil {
				plan.pend(w, PendingQueueInvalid, fmt.Sprintf("queue %s is not usable: %v", q, queueErr))
				continue
			}
		}
		if _, ok := byQueue[w.gang.Queue]; !ok {
			queueNames = append(queueNames, w.gang.Queue)
		}
		byQueue[w.gang.Queue] = append(byQueue[w.gang.Queue], w)
	}
	for _, ws := range byQueue {
		sort.SliceStable(ws, func(i, j int) bool { return before(ws[i], ws[j]) })
	}
	sort.Strings(queueNames)

	var elastic []*work
	// Queue-fair order: after every gang, the queue furthest below its share goes next.
	for len(queueNames) > 0 {
		q := s.nextQueue(shares, queueNames)
		ws := byQueue[q]
		w := ws[0]
		byQueue[q] = ws[1:]
		if len(byQueue[q]) == 0 {
			queueNames = remove(queueNames, q)
		}
		if len(w.core) == 0 {
			elastic = append(elastic, w)
			continue
		}
		if c.placeGang(w) {
			elastic = append(elastic, w)
		}
	}
	// Elastic members take what is left, one at a time, never past a queue limit.
	for _, w := range elastic {
		c.placeElastic(w)
	}
	return plan
}

// cycle is the state of one Schedule call.
type cycle struct {
	s      *Scheduler
	snap   *model.Snapshot
	view   *placement.View
	shares *fairshare.Shares
	plan   *Plan
	// floor is the lowest priority of any pod preemption may evict; anyVictim is
	// false when there is none, and no search can succeed.
	floor     int32
	anyVictim bool
	searches  int
}

// preemptibleFloor finds the lowest priority among pods that preemption may evict.
func preemptibleFloor(snap *model.Snapshot) (int32, bool) {
	var floor int32
	found := false
	for _, p := range snap.Pods {
		if !p.Bound() || !p.Preemptible || p.Foreign || p.Terminating {
			continue
		}
		if !found || p.Priority < floor {
			floor, found = p.Priority, true
		}
	}
	return floor, found
}

// mayPreempt says whether a victim search for w can possibly succeed: some pod is
// evictable, and either w outranks the lowest of them (preempt) or its queue is below
// its fair share of GPUs (reclaim).
func (c *cycle) mayPreempt(w *work) bool {
	if !c.s.Config.Preemption || !c.anyVictim {
		return false
	}
	if w.gang.Priority > c.floor {
		return true
	}
	if c.shares == nil || w.gang.Queue == "" {
		return false
	}
	qs := c.shares.Queue(w.gang.Queue)
	if qs == nil {
		return false
	}
	gpu := qs.Resources[model.ResourceGPU]
	return gpu != nil && gpu.Allocated < gpu.FairShare
}

// placeGang places w's core members, or preempts for them, or records why not.
// It reports whether the gang's minimum is now placed.
func (c *cycle) placeGang(w *work) bool {
	s, snap, view, shares, plan := c.s, c.snap, c.view, c.shares, c.plan
	amounts := podsAmounts(w.core)
	if shares != nil && w.gang.Queue != "" {
		if err := shares.WouldExceedLimit(w.gang.Queue, amounts); err != nil {
			plan.pend(w, PendingQueueLimit, err.Error())
			return false
		}
		if !w.gang.Preemptible {
			if err := withinQuota(shares, w.gang.Queue, amounts); err != nil {
				plan.pend(w, PendingQueueQuota, err.Error())
				return false
			}
		}
	}
	placements, unsched := s.Placer.PlaceGang(view, w.core)
	if unsched == nil {
		plan.Binds = append(plan.Binds, GangBind{Gang: w.gang.ID, Placements: placements})
		if shares != nil && w.gang.Queue != "" {
			shares.Allocate(w.gang.Queue, amounts)
		}
		return true
	}
	if n := terminatingOnNominatedNodes(snap, w.core); n > 0 {
		plan.pend(w, PendingWaitingForVictim, fmt.Sprintf("waiting for %d preempted pods to terminate", n))
		return false
	}
	if !c.mayPreempt(w) {
		plan.pend(w, PendingNoFit, unsched.Message)
		return false
	}
	if c.searches >= maxPreemptionSearches {
		plan.pend(w, PendingNoFit, unsched.Message+"; preemption deferred to the next cycle")
		return false
	}
	c.searches++
	res, err := preempt.Find(preempt.Request{
		Gang: w.gang, Pods: w.core, Snapshot: snap, View: view, Placer: s.Placer, Shares: shares,
		Now: snap.Now, MinRuntimeSeconds: s.Config.MinRuntimeSeconds,
	})
	if err != nil {
		plan.pend(w, PendingNoFit, fmt.Sprintf("%s; preemption found nothing to do: %v", unsched.Message, err))
		return false
	}
	for _, v := range res.Victims {
		view.Release(v)
		if shares != nil && v.Queue != "" {
			shares.Release(v.Queue, boundAmounts(snap, v))
		}
		plan.Evictions = append(plan.Evictions, Eviction{Pod: v.ID, Gang: v.Gang, Preemptor: w.gang.ID, Kind: res.Kind, Reason: res.Reason})
	}
	// The freed space is the preemptor's: book it so that nothing else takes it in
	// this cycle, and nominate it so that later cycles keep it.
	for i, pl := range res.Placements {
		view.Assign(w.core[i], pl)
	}
	if shares != nil && w.gang.Queue != "" {
		shares.Allocate(w.gang.Queue, amounts)
	}
	plan.Nominations = append(plan.Nominations, GangBind{Gang: w.gang.ID, Placements: res.Placements})
	return false
}

func (c *cycle) placeElastic(w *work) {
	s, view, shares, plan := c.s, c.view, c.shares, c.plan
	var placed []placement.Placement
	for _, p := range w.extra {
		amounts := podAmounts(p)
		if shares != nil && w.gang.Queue != "" && shares.WouldExceedLimit(w.gang.Queue, amounts) != nil {
			break
		}
		pl, unsched := s.Placer.PlacePod(view, p)
		if unsched != nil {
			break
		}
		view.Assign(p, pl)
		if shares != nil && w.gang.Queue != "" {
			shares.Allocate(w.gang.Queue, amounts)
		}
		placed = append(placed, pl)
	}
	if len(placed) > 0 {
		plan.Binds = append(plan.Binds, GangBind{Gang: w.gang.ID, Placements: placed, Elastic: true})
	}
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

// pendingWork lists the gangs that have pending members, in a stable order.
func pendingWork(snap *model.Snapshot) []*work {
	var out []*work
	gangs := snap.Gangs
	if snap.PendingGangs != nil {
		gangs = make(map[model.GangID]*model.Gang, len(snap.PendingGangs))
		for id := range snap.PendingGangs {
			if g := snap.Gangs[id]; g != nil {
				gangs[id] = g
			}
		}
	}
	for _, g := range gangs {
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
			continue
		}
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
		w := &work{gang: g, core: pending[:need], extra: pending[need:]}
		for _, p := range pending {
			if p.NominatedNode != "" {
				w.nominated = true
			}
		}
		out = append(out, w)
	}
	sort.Slice(out, func(i, j int) bool { return before(out[i], out[j]) })
	return out
}

func withMissing(g *model.Gang, why string) *model.Gang {
	c := *g
	c.Missing = why
	return &c
}

// before orders gangs within a queue: nominated preemptors first (their space is
// being freed for them), then higher priority, then first come.
func before(a, b *work) bool {
	if a.nominated != b.nominated {
		return a.nominated
	}
	if a.gang.Priority != b.gang.Priority {
		return a.gang.Priority > b.gang.Priority
	}
	if a.gang.CreatedAt != b.gang.CreatedAt {
		return a.gang.CreatedAt < b.gang.CreatedAt
	}
	return a.gang.ID < b.gang.ID
}

// terminatingOnNominatedNodes counts the pods still terminating on the nodes that
// pods were nominated to: victims of an earlier preemption that have not gone yet.
// Evicting again while they terminate would evict twice for one preemptor.
func terminatingOnNominatedNodes(snap *model.Snapshot, pods []*model.Pod) int {
	nodes := map[string]bool{}
	for _, p := range pods {
		if p.NominatedNode != "" {
			nodes[p.NominatedNode] = true
		}
	}
	if len(nodes) == 0 {
		return 0
	}
	n := 0
	for _, p := range snap.Pods {
		if p.Terminating && nodes[p.Node] {
			n++
		}
	}
	return n
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
