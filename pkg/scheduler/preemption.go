package scheduler

import (
	"errors"
	"fmt"
	"sort"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/preempt"
)

// The cycle's side of preemption and reclaim: when a search may succeed, what it may
// take under a queue limit, the room kept for a nominated gang, and carrying a search's
// result into the Plan. The search itself is pkg/preempt.

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

// victimFloor is preemptibleFloor of the cycle's snapshot, found once: a drain,
// where every gang fits, never walks the bound pods for it.
func (c *cycle) victimFloor() int32 {
	if !c.floorKnown {
		c.floor, c.anyVictim = preemptibleFloor(c.snap)
		c.floorKnown = true
	}
	return c.floor
}

// hasVictim says whether any pod may be evicted at all.
func (c *cycle) hasVictim() bool {
	c.victimFloor()
	return c.anyVictim
}

// mayPreempt says whether a victim search for w can possibly succeed: some pod is
// evictable, and either w outranks the lowest of them (preempt) or its queue is below
// its fair share or its quota of GPUs (reclaim).
func (c *cycle) mayPreempt(w *work) bool {
	if !c.s.Config.Preemption || w.gang.NeverPreempts || !c.hasVictim() {
		return false
	}
	if w.gang.Priority > c.victimFloor() {
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
	if gpu == nil {
		return false
	}
	belowQuota := gpu.Quota != model.Unlimited && gpu.Allocated < gpu.Quota
	return gpu.Allocated < gpu.FairShare || belowQuota
}

// neverPreemptsNote adds to why a gang waits, when its pods say preemptionPolicy:
// Never and preemption is on, that no pod is evicted for it, in kube-scheduler's
// words, so that its users do not wait for a preemption that will never come.
func (c *cycle) neverPreemptsNote(w *work, why string) string {
	if !w.gang.NeverPreempts || !c.s.Config.Preemption {
		return why
	}
	return why + "; preemption: not eligible due to preemptionPolicy=Never (no lower-priority pod is evicted for it)"
}

// limitGate is a queue limit a preemptor must get under: within says whether the
// queue takes the preemptor's amounts within its limits once the victims are gone;
// queue is the queue whose limit blocks (the preemptor's own, or an ancestor).
type limitGate struct {
	within func([]*model.Pod) bool
	queue  string
}

// withinLimit is the gate of the limit overLimit reports.
func (c *cycle) withinLimit(queue string, amounts fairshare.Amounts, overLimit error) *limitGate {
	gate := &limitGate{queue: queue}
	var le *fairshare.LimitError
	if errors.As(overLimit, &le) {
		gate.queue = le.Queue
	}
	gate.within = func(victims []*model.Pod) bool {
		for _, v := range victims {
			c.shares.Release(c.snap.QueueOf(v.Queue), boundAmounts(c.snap, v))
		}
		err := c.shares.WouldExceedLimit(queue, amounts)
		for _, v := range victims {
			c.shares.Allocate(c.snap.QueueOf(v.Queue), boundAmounts(c.snap, v))
		}
		return err == nil
	}
	return gate
}

// reserveNominated keeps for a nominated gang what its victims, still terminating,
// will free: it books the gang where it fits once they are gone, so that nothing else
// takes that room in this cycle. It reports true, with the gang left waiting, when
// victims are still terminating on the gang's nominated nodes (evicting again while
// they go would evict twice for one preemptor), and false when there are none.
func (c *cycle) reserveNominated(w *work, amounts fairshare.Amounts) bool {
	leaving, _ := c.leavingFor(w.core)
	if len(leaving) == 0 {
		return false
	}
	if !c.bookOnceGone(w, leaving, amounts) {
		c.plan.pend(w, PendingWaitingForVictim, fmt.Sprintf("waiting for %d preempted pods to terminate", len(leaving)))
		return true
	}
	c.plan.pend(w, PendingWaitingForVictim, fmt.Sprintf("waiting for %d preempted pods to terminate; their room is kept for this gang", len(leaving)))
	return true
}

// waitForLeaving nominates w, instead of a victim search, where it fits once pods
// already terminating are gone, beyond the room promised to nominated gangs (booked
// in the view before w's turn): the surplus of an earlier preemption whose
// preemptors took less than it freed, or pods deleted by their owners. Evicting
// again while that room is on its way would evict twice for one room (a live burst
// of 8 one-GPU services evicted a third 4-GPU gang for the last one while a GPU of
// the second was still terminating, issue 19). It reports whether w now waits.
func (c *cycle) waitForLeaving(w *work, amounts fairshare.Amounts) bool {
	leaving := c.leavingByNode()
	if len(leaving) == 0 {
		return false
	}
	fork := c.view.Fork()
	for _, pods := range leaving {
		for _, p := range pods {
			fork.Release(p)
		}
	}
	placements, unsched := c.s.Placer.PlaceGang(fork, w.core)
	if unsched != nil {
		return false
	}
	waitFor := 0
	for node := range nodesOf(placements) {
		for _, p := range leaving[node] {
			c.view.Release(p)
			c.release(p)
			if c.shares != nil && p.Queue != "" {
				c.shares.Release(c.snap.QueueOf(p.Queue), boundAmounts(c.snap, p))
			}
			waitFor++
		}
		delete(leaving, node)
	}
	for i, pl := range placements {
		c.view.Assign(w.core[i], pl)
	}
	c.allocate(w.gang, amounts)
	c.plan.Nominations = append(c.plan.Nominations, GangBind{Gang: w.gang.ID, Placements: placements})
	c.plan.pend(w, PendingWaitingForVictim, fmt.Sprintf("waiting for %d terminating pods to go; their room is kept for this gang", waitFor))
	return true
}

// leavingByNode lists, once per cycle, the pods terminating in the snapshot that are
// neither stuck nor released in this cycle already, by node. Callers take the nodes
// they use out of the map.
func (c *cycle) leavingByNode() map[string][]*model.Pod {
	if !c.leavingListed {
		c.leavingListed = true
		c.leaving = map[string][]*model.Pod{}
		for _, p := range c.snap.Pods {
			if p.Terminating && p.Bound() && !c.stuck(p) {
				c.leaving[p.Node] = append(c.leaving[p.Node], p)
			}
		}
	}
	for node, pods := range c.leaving {
		kept := pods[:0]
		for _, p := range pods {
			if !c.released[p.ID] {
				kept = append(kept, p)
			}
		}
		if len(kept) == 0 {
			delete(c.leaving, node)
		} else {
			c.leaving[node] = kept
		}
	}
	return c.leaving
}

func nodesOf(placements []placement.Placement) map[string]bool {
	out := map[string]bool{}
	for _, pl := range placements {
		out[pl.Node] = true
	}
	return out
}

// keepRoom books, for a nominated gang the caller skips this cycle, the room it was
// promised: where it fits once the victims terminating on its nominated nodes are
// gone, or where it fits now. Nothing is bound or reported for it; the room is only
// kept from the gangs that come after it, which would otherwise find the cluster full
// and search victims again (a live burst evicted a third gang for 8 one-GPU services
// this way, issue 19).
func (c *cycle) keepRoom(w *work) {
	amounts := podsAmounts(w.core)
	if leaving, _ := c.leavingFor(w.core); len(leaving) > 0 {
		c.bookOnceGone(w, leaving, amounts)
		return
	}
	if _, unsched := c.placePinned(c.view, w.core); unsched == nil {
		c.allocate(w.gang, amounts) // placed and booked in the view
	}
}

// placePinned places pods on v as Placer.PlaceGang does (booking them there), each
// pod with a nominated node on that node first: a preemptor keeps the room its own
// victims free rather than take room promised to another preemptor, which would then
// find none left once its victims are gone and evict again (a live burst of 32
// shared services evicted a ninth gang for 8 gangs' worth of GPUs, and waited two
// grace periods, issue 19). When the gang does not fit so, it goes anywhere.
func (c *cycle) placePinned(v *placement.View, pods []*model.Pod) ([]placement.Placement, *placement.Unschedulable) {
	if pinned := pinnedToNominated(pods); pinned != nil {
		if placements, unsched := c.s.Placer.PlaceGang(v, pinned); unsched == nil {
			return placements, nil
		}
	}
	return c.s.Placer.PlaceGang(v, pods)
}

// pinnedToNominated returns copies of pods in which each pod with a nominated node
// may only go there (model.Pod.PinnedTo), or nil when no pod has one.
func pinnedToNominated(pods []*model.Pod) []*model.Pod {
	var out []*model.Pod
	for i, p := range pods {
		if p.NominatedNode == "" {
			continue
		}
		if out == nil {
			out = append([]*model.Pod(nil), pods...)
		}
		out[i] = p.PinnedTo(p.NominatedNode)
	}
	return out
}

// bookOnceGone places w's core on a view where leaving are gone and, if it fits,
// releases them in the cycle's view and books w there. It reports whether w fit.
func (c *cycle) bookOnceGone(w *work, leaving []*model.Pod, amounts fairshare.Amounts) bool {
	fork := c.view.Fork()
	for _, p := range leaving {
		if !c.released[p.ID] { // another nominated gang released it in this cycle
			fork.Release(p)
		}
	}
	placements, unsched := c.placePinned(fork, w.core)
	if unsched != nil {
		return false
	}
	for _, p := range leaving {
		if c.released[p.ID] {
			continue
		}
		// Released once per cycle, however many gangs wait on the node: a second
		// release would free the room the first gang was just given.
		c.view.Release(p)
		c.release(p)
		if c.shares != nil && p.Queue != "" {
			c.shares.Release(c.snap.QueueOf(p.Queue), boundAmounts(c.snap, p))
		}
	}
	for i, pl := range placements {
		c.view.Assign(w.core[i], pl)
	}
	c.allocate(w.gang, amounts)
	return true
}

// preempt searches victims for pods of w (its core, or one elastic member) and
// records the evictions and the nomination; when there are none, w is left pending
// with kind and why. It reports whether it nominated.
func (c *cycle) preempt(w *work, pods []*model.Pod, amounts fairshare.Amounts, kind PendingKind, why string, limit *limitGate) bool {
	s, snap, view, shares, plan := c.s, c.snap, c.view, c.shares, c.plan
	elastic := len(w.core) == 0 || pods[0].Elastic
	if c.searches >= maxPreemptionSearches {
		if !elastic {
			plan.pend(w, kind, why+"; preemption deferred to the next cycle")
		}
		return false
	}
	c.searches++
	req := preempt.Request{
		Gang: w.gang, Pods: pods, Snapshot: snap, View: view, Placer: s.Placer, Shares: shares,
		Now: snap.Now, MinRuntimeSeconds: s.Config.MinRuntimeSeconds,
		ReclaimOnly: elastic, Released: c.released,
	}
	if limit != nil {
		req.WithinLimit, req.LimitQueue = limit.within, limit.queue
	}
	res, err := preempt.Find(req)
	if err == nil && len(res.Victims) == 0 {
		err = fmt.Errorf("the search placed the gang without victims, which this cycle could not")
	}
	if err != nil {
		if !elastic {
			plan.pend(w, kind, fmt.Sprintf("%s; preemption found nothing to do: %v", why, err))
		}
		return false
	}
	for _, v := range res.Victims {
		view.Release(v)
		c.release(v)
		if shares != nil && v.Queue != "" {
			shares.Release(snap.QueueOf(v.Queue), boundAmounts(snap, v))
		}
		plan.Evictions = append(plan.Evictions, Eviction{Pod: v.ID, Gang: v.Gang, Preemptor: w.gang.ID, Kind: res.Kind, Reason: res.Reason})
	}
	// The freed space is the preemptor's: book it so that nothing else takes it in
	// this cycle, and nominate it so that later cycles keep it.
	for i, pl := range res.Placements {
		view.Assign(pods[i], pl)
	}
	c.allocate(w.gang, amounts)
	plan.Nominations = append(plan.Nominations, GangBind{Gang: w.gang.ID, Placements: res.Placements, Elastic: elastic})
	plan.Preemptions = append(plan.Preemptions, preemptionOf(w.gang.ID, res))
	return true
}

// onRoomStillHeld reports whether any of placements takes a GPU that pods evicted
// earlier in this cycle still hold: their room is free in the cycle's view, but the
// pods are only now being evicted, and a bind there would race their termination.
// Such a gang is nominated instead, its room booked, and it binds once they are gone;
// it evicts nothing of its own, so one eviction serves every preemptor it has room for.
func (c *cycle) onRoomStillHeld(w *work, placements []placement.Placement, amounts fairshare.Amounts, elastic bool) bool {
	if len(c.released) == 0 || !c.takesReleasedGPU(placements) {
		return false
	}
	// Placer.PlaceGang booked the placements in the view already.
	c.allocate(w.gang, amounts)
	c.plan.Nominations = append(c.plan.Nominations, GangBind{Gang: w.gang.ID, Placements: placements, Elastic: elastic})
	if !elastic {
		c.plan.pend(w, PendingWaitingForVictim, "waiting for pods preempted in this cycle to terminate; their room is kept for this gang")
	}
	return true
}

// takesReleasedGPU reports whether a placement uses a GPU held by a pod evicted in
// this cycle.
func (c *cycle) takesReleasedGPU(placements []placement.Placement) bool {
	for _, pl := range placements {
		for _, b := range pl.GPUs {
			if c.releasedGPUs[pl.Node][b.Index] {
				return true
			}
		}
	}
	return false
}

// release records v as evicted in this cycle: never a victim again, and its GPUs
// not bindable until it is gone.
func (c *cycle) release(v *model.Pod) {
	if c.released == nil {
		c.released, c.releasedGPUs = map[model.PodID]bool{}, map[string]map[int]bool{}
	}
	c.released[v.ID] = true
	for _, b := range v.GPUs {
		if c.releasedGPUs[v.Node] == nil {
			c.releasedGPUs[v.Node] = map[int]bool{}
		}
		c.releasedGPUs[v.Node][b.Index] = true
	}
}

// withinQuota reports whether the queue holds less GPU than its quota, and would hold
// no more than it with amounts added (a quota of -1 never qualifies here: such a queue
// reclaims by fair share).
func (c *cycle) withinQuota(queue string, amounts fairshare.Amounts) bool {
	if c.shares == nil || queue == "" {
		return false
	}
	qs := c.shares.Queue(queue)
	if qs == nil {
		return false
	}
	gpu := qs.Resources[model.ResourceGPU]
	add := amounts[model.ResourceGPU]
	return gpu != nil && add > 0 && gpu.Quota != model.Unlimited && gpu.Allocated+add <= gpu.Quota+1e-9
}

// leavingFor lists the pods still terminating on the nodes that pods were nominated
// to: victims of an earlier preemption that have not gone yet. Evicting again while
// they terminate would evict twice for one preemptor. Pods still there more than
// VictimTimeoutSeconds past the end of their grace period are stuck (a finalizer, a
// node that does not answer) and left out: a preemptor does not wait for them
// forever; stuck counts them.
func (c *cycle) leavingFor(pods []*model.Pod) (leaving []*model.Pod, stuck int) {
	nodes := map[string]bool{}
	for _, p := range pods {
		if p.NominatedNode != "" {
			nodes[p.NominatedNode] = true
		}
	}
	if len(nodes) == 0 {
		return nil, 0
	}
	for _, p := range c.snap.Pods {
		if !p.Terminating || !nodes[p.Node] {
			continue
		}
		if c.stuck(p) {
			stuck++
			continue
		}
		leaving = append(leaving, p)
	}
	sort.Slice(leaving, func(i, j int) bool { return leaving[i].ID < leaving[j].ID })
	return leaving, stuck
}

// stuck reports whether a terminating pod is still there more than the victim
// timeout past the end of its grace period.
func (c *cycle) stuck(p *model.Pod) bool {
	return p.TerminatingDeadline != 0 && c.snap.Now > p.TerminatingDeadline+c.s.Config.victimTimeout()
}

// DefaultVictimTimeoutSeconds is Config.VictimTimeoutSeconds when zero.
const DefaultVictimTimeoutSeconds = 120

func (c Config) victimTimeout() int64 {
	if c.VictimTimeoutSeconds > 0 {
		return c.VictimTimeoutSeconds
	}
	return DefaultVictimTimeoutSeconds
}
