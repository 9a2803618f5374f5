package preempt

import (
	"cmp"
	"github.com/gantry-dev/gantry/pkg/fairshare"
	"math"
	"slices"

	"github.com/gantry-dev/gantry/pkg/model"
)

// unit is the smallest thing that can be evicted: a whole gang (every bound member,
// on every node) or one elastic member of a gang that keeps running.
type unit struct {
	gang *model.Gang
	// pods are the bound pods evicted, sorted by ID.
	pods    []*model.Pod
	elastic bool
	kind    string
	// priority is the gang's.
	priority int32
	// heldBytes is the GPU memory the pods book; gpus is the same in GPUs (a share
	// counts as its fraction of the GPU), the unit queues are charged in.
	heldBytes int64
	gpus      float64
	// gpuSeconds is the GPU time the pods have run, lost when they are evicted.
	gpuSeconds float64
	// nodes the pods are on, in first-seen order.
	nodes []string
	// drawsFrom are the queues whose surplus over their fair share a reclaim of this
	// unit uses up (the victim's queue and its ancestors below the common ancestor
	// with the preemptor's); empty for a preemption within the queue.
	drawsFrom []string
	// byQuota is true for a reclaim allowed by the quota rule (see reclaimRules).
	byQuota bool
	// elasticAllowed is how many elastic members of the gang may go while the gang
	// keeps its minimum.
	elasticAllowed int
	// rank is the unit's position in cost order; alone is its cost as a set of one.
	rank  int
	alone cost
}

// Why running gangs are not victims, as counted in the error Find returns
// ("2 not preemptible").
const (
	refusedTerminating    = "already terminating"
	refusedForeign        = "of another scheduler"
	refusedNotPreemptible = "not preemptible"
	refusedProtected      = "within the protection window"
	refusedNotLower       = "in the same queue but not of lower priority"
	refusedOtherQueue     = "in another queue, and no fair shares are known"
	refusedNoShare        = "in a queue with no known GPU fair share"
	refusedVictimTooLarge = "in another queue that evicting them would take below its GPU fair share"
	// The two reclaim rules' refusals, joined: "in another queue, and by quota, …, and
	// by fair share, …".
	refusedPastQuota         = "by quota, the gang would take its queue past its GPU quota"
	refusedVictimWithinQuota = "by quota, that queue is not above its GPU quota"
	refusedNotBelowShare     = "by fair share, the gang's queue is not below its GPU fair share"
	refusedAboveShare        = "by fair share, the gang would take its queue above its GPU fair share"
	refusedVictimAtShare     = "by fair share, that queue is not above its GPU fair share"
	refusedSameQueueElastic  = "in the same queue (members above a gang's minimum only reclaim from other queues)"
)

// refusals counts running gangs by why they are not victims.
type refusals map[string]int

// collectUnits returns every unit that may be evicted for p, in cost order, and
// counts the gangs that may not.
func collectUnits(req Request, p preemptor, rules *reclaimRules) ([]*unit, refusals) {
	refused := refusals{}
	var units []*unit
	gangs, leaving := gangsOf(req.Snapshot, req.Released)
	if leaving > 0 {
		refused[refusedTerminating] = leaving
	}
	for _, g := range gangs {
		if g.gang.ID == p.gang {
			continue
		}
		units = append(units, unitsOfGang(req, p, rules, g, refused)...)
	}
	for _, u := range units {
		u.alone = noCost.add(u)
	}
	slices.SortFunc(units, compareUnits)
	for i, u := range units {
		u.rank = i
	}
	return units, refused
}

// runningGang is a gang with its bound members.
type runningGang struct {
	gang  *model.Gang
	bound []*model.Pod
}

// gangsOf groups the snapshot's bound pods that are not terminating (nor released
// earlier in the cycle) by gang, and counts the gangs all of whose bound pods are. A
// pod whose gang the snapshot does not hold is a gang of its own pods, all of them its
// minimum.
func gangsOf(s *model.Snapshot, released map[model.PodID]bool) (gangs []runningGang, leaving int) {
	byGang := map[model.GangID][]*model.Pod{}
	terminating := map[model.GangID]bool{}
	for _, pod := range s.Pods {
		if !pod.Bound() {
			continue
		}
		id := pod.Gang
		if id == "" {
			id = model.GangID(pod.ID)
		}
		// A terminating pod is already on its way out: evicting it frees nothing more,
		// and its resources stay booked until it is gone.
		if pod.Terminating || released[pod.ID] {
			terminating[id] = true
			continue
		}
		byGang[id] = append(byGang[id], pod)
	}
	for id := range terminating {
		if byGang[id] == nil {
			leaving++
		}
	}
	out := make([]runningGang, 0, len(byGang))
	for id, pods := range byGang {
		slices.SortFunc(pods, func(a, b *model.Pod) int { return compareIDs(a.ID, b.ID) })
		g := s.Gangs[id]
		if g == nil {
			g = &model.Gang{ID: id, Queue: pods[0].Queue, Priority: pods[0].Priority, Preemptible: true}
			for _, pod := range pods {
				g.Priority = max(g.Priority, pod.Priority)
				g.Preemptible = g.Preemptible && pod.Preemptible
			}
		}
		if q := s.QueueOf(g.Queue); q != g.Queue {
			charged := *g
			charged.Queue = q
			g = &charged
		}
		out = append(out, runningGang{gang: g, bound: pods})
	}
	// In map order: collectUnits sorts the units with ties broken by gang and pod.
	return out, leaving
}

// unitsOfGang returns the whole-gang unit and the elastic-member units of one running
// gang that may be evicted for p.
func unitsOfGang(req Request, p preemptor, rules *reclaimRules, g runningGang, refused refusals) []*unit {
	for _, pod := range g.bound {
		if pod.Foreign {
			refused[refusedForeign]++
			return nil
		}
	}
	kind, verdict, why := rules.kindFor(g.gang, p)
	if why != "" {
		refused[why]++
		return nil
	}

	core, elastic := splitCore(g.bound)
	minimum := g.gang.MinMember
	if minimum <= 0 {
		minimum = max(len(core), 1)
	}
	elasticAllowed := min(len(g.bound)-minimum, len(elastic))

	var units []*unit
	whole := newUnit(req, g.gang, g.bound, false, kind, verdict)
	wholeWhy := ""
	switch {
	case !g.gang.Preemptible || !allPreemptible(g.bound):
		wholeWhy = refusedNotPreemptible
	case isProtected(req, gangStart(core, g.bound)):
		wholeWhy = refusedProtected
	case !rules.withinSurplus(whole):
		wholeWhy = refusedVictimTooLarge
	default:
		units = append(units, whole)
	}
	if elasticAllowed > 0 && g.gang.Preemptible {
		for _, pod := range elastic {
			if !pod.Preemptible || isProtected(req, pod.StartedAt) {
				continue
			}
			u := newUnit(req, g.gang, []*model.Pod{pod}, true, kind, verdict)
			u.elasticAllowed = elasticAllowed
			if rules.withinSurplus(u) {
				units = append(units, u)
			}
		}
	}
	if len(units) == 0 {
		refused[wholeWhy]++
	}
	return units
}

func newUnit(req Request, g *model.Gang, pods []*model.Pod, elastic bool, kind string, v queueVerdict) *unit {
	u := &unit{gang: g, pods: pods, elastic: elastic, kind: kind, priority: g.Priority, drawsFrom: v.drawsFrom, byQuota: v.byQuota}
	for _, pod := range pods {
		node := req.Snapshot.Node(pod.Node)
		gpus := boundGPUs(pod, node)
		u.gpus += gpus
		u.gpuSeconds += gpus * float64(max(0, req.Now-pod.StartedAt))
		for _, b := range pod.GPUs {
			u.heldBytes += bindingBytes(node, b)
		}
		if !slices.Contains(u.nodes, pod.Node) {
			u.nodes = append(u.nodes, pod.Node)
		}
	}
	return u
}

// splitCore separates a gang's bound members into core and elastic ones.
func splitCore(bound []*model.Pod) (core, elastic []*model.Pod) {
	for _, pod := range bound {
		if pod.Elastic {
			elastic = append(elastic, pod)
		} else {
			core = append(core, pod)
		}
	}
	return core, elastic
}

func allPreemptible(pods []*model.Pod) bool {
	for _, pod := range pods {
		if !pod.Preemptible {
			return false
		}
	}
	return true
}

// gangStart is when the gang started: its earliest core member (elastic members join
// later and must not extend the gang's protection).
func gangStart(core, bound []*model.Pod) int64 {
	pods := core
	if len(pods) == 0 {
		pods = bound
	}
	start := int64(math.MaxInt64)
	for _, pod := range pods {
		start = min(start, pod.StartedAt)
	}
	return start
}

func isProtected(req Request, startedAt int64) bool {
	return req.MinRuntimeSeconds > 0 && req.Now-startedAt < req.MinRuntimeSeconds
}

// bindingBytes is the memory a binding books on its GPU.
func bindingBytes(node *model.Node, b model.GPUBinding) int64 {
	if b.Whole && b.MemoryBytes == 0 && node != nil {
		if g := node.GPUByIndex(b.Index); g != nil {
			return g.MemoryBytes
		}
	}
	return b.MemoryBytes
}

// boundGPUs is how many GPUs a bound pod holds (fairshare's charge).
func boundGPUs(pod *model.Pod, node *model.Node) float64 { return fairshare.BoundGPUs(pod, node) }

// cost orders victim sets; lower is cheaper. Fields compare in order.
type cost struct {
	// priority is the highest priority among the victims.
	priority int64
	// gangs counts the gangs that lose pods, whole or elastic members.
	gangs     int
	heldBytes int64
	// wholeGangs counts the gangs evicted whole: at equal gangs and memory, elastic
	// members go before whole gangs.
	wholeGangs int
	gpuSeconds float64
	// touched lists the gangs counted in gangs.
	touched []model.GangID
}

var noCost = cost{priority: math.MinInt64}

func (c cost) compare(o cost) int {
	return cmp.Or(
		cmp.Compare(c.priority, o.priority),
		cmp.Compare(c.gangs, o.gangs),
		cmp.Compare(c.heldBytes, o.heldBytes),
		cmp.Compare(c.wholeGangs, o.wholeGangs),
		cmp.Compare(c.gpuSeconds, o.gpuSeconds),
	)
}

func (c cost) add(u *unit) cost {
	c.priority = max(c.priority, int64(u.priority))
	if !slices.Contains(c.touched, u.gang.ID) {
		c.touched = append(slices.Clip(c.touched), u.gang.ID)
		c.gangs++
	}
	if !u.elastic {
		c.wholeGangs++
	}
	c.heldBytes += u.heldBytes
	c.gpuSeconds += u.gpuSeconds
	return c
}

func costOf(units []*unit) cost {
	c := noCost
	for _, u := range units {
		c = c.add(u)
	}
	return c
}

// compareUnits is the cost order of single units, ties broken by gang and pod so that
// the search is deterministic.
func compareUnits(a, b *unit) int {
	return cmp.Or(
		a.alone.compare(b.alone),
		cmp.Compare(a.gang.ID, b.gang.ID),
		cmp.Compare(a.pods[0].ID, b.pods[0].ID),
	)
}

// compareSets orders victim sets by cost, then by their units' ranks.
func compareSets(a, b []*unit) int {
	if c := costOf(a).compare(costOf(b)); c != 0 {
		return c
	}
	ra, rb := ranksOf(a), ranksOf(b)
	return slices.Compare(ra, rb)
}

func ranksOf(units []*unit) []int {
	r := make([]int, len(units))
	for i, u := range units {
		r[i] = u.rank
	}
	slices.Sort(r)
	return r
}
