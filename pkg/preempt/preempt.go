package preempt

import (
	"errors"
	"fmt"
	"slices"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// Kinds of Result.
const (
	// KindPreempt: every victim is in the preemptor's own queue, of lower priority.
	KindPreempt = "preempt"
	// KindReclaim: some victim is in another queue that is above its fair share.
	KindReclaim = "reclaim"
)

// ErrNoVictims is wrapped by every error Find returns when no victim set lets the
// gang start; the message says why and what would change it.
var ErrNoVictims = errors.New("cannot preempt")

// Request is one gang that the cycle could not place, and the cycle's state.
type Request struct {
	Gang *model.Gang
	// Pods are the gang's pending members that must be placed together (its minimum).
	Pods []*model.Pod
	// Snapshot holds every pod (bound ones have Node, GPUs and StartedAt), gang and
	// queue. Find does not change it.
	Snapshot *model.Snapshot
	// View is the cycle's current state; Find works on forks of it and never commits.
	View   *placement.View
	Placer *placement.Placer
	// Shares are the current fair shares and allocations. Nil allows only preemption
	// within the gang's own queue.
	Shares *fairshare.Shares
	// Now is the cycle's time (Snapshot.Now when zero); gangs that started less than
	// MinRuntimeSeconds before it are protected.
	Now, MinRuntimeSeconds int64
	// Limits bound the search; the zero value means DefaultLimits.
	Limits Limits
	// ReclaimOnly refuses victims of the gang's own queue (used for members above a
	// gang's minimum, which only claim their queue's guarantee).
	ReclaimOnly bool
	// WithinLimit, when not nil, says the gang's queue (or a parent) would pass its
	// limit as things are: Find first takes lower-priority work of the gang's own queue,
	// cheapest first, until WithinLimit reports that the gang fits under the limit with
	// those victims gone, and then searches for room from there.
	WithinLimit func(victims []*model.Pod) bool
	// LimitQueue is the queue whose limit WithinLimit waits to get under: the gang's
	// own, or an ancestor. Under an ancestor's limit, work that the reclaim rules let
	// the gang take from other queues below that ancestor counts too.
	LimitQueue string
	// Released are pods whose eviction an earlier search of the same cycle already
	// decided: their room is promised to that preemptor (and booked for it in View),
	// so they are never victims again, and count as leaving as terminating pods do.
	Released map[model.PodID]bool
}

// Limits bound the victim search so that one blocked gang cannot stall a cycle. A
// bound that is hit makes the search return the best set found within it, or none.
type Limits struct {
	// CandidateNodes is how many nodes get a victim set of their own, taken in order
	// of the lowest victim priority they offer.
	CandidateNodes int
	// ExhaustiveNodes is how many of those, cheapest first, have their greedy set
	// improved by trying every subset of up to SubsetSize victims.
	ExhaustiveNodes int
	SubsetSize      int
	// SubsetChecks caps the feasibility checks of that exhaustive search, per node.
	SubsetChecks int
	// GangPlacements caps whole-gang placement simulations (Placer.PlaceGang).
	GangPlacements int
}

// DefaultLimits are used for a zero Limits.
var DefaultLimits = Limits{CandidateNodes: 64, ExhaustiveNodes: 16, SubsetSize: 3, SubsetChecks: 2000, GangPlacements: 256}

// Result is a victim set that lets the gang start.
type Result struct {
	// Victims are every pod to evict: whole gangs (all their bound pods, on every node)
	// and single elastic members. Sorted by ID.
	Victims []*model.Pod
	// VictimGangs are the gangs evicted whole, sorted. A gang that loses only elastic
	// members keeps running and is not listed.
	VictimGangs []model.GangID
	// Placements are where the gang's pods go once the victims are gone, in the order
	// of Request.Pods.
	Placements []placement.Placement
	// NeededBytes is the GPU memory the gang needs free on the GPUs of Placements
	// (NeedsLiveFreeBytes per GPU); ShortfallBytes is the part of it that was not free
	// before the evictions (what the preemptor lacked). FreedBytes is the GPU memory
	// the evictions make free, on every GPU: by the node agent's measurement where the
	// snapshot has one, else by booking. FreedBytes/ShortfallBytes is the over-eviction
	// ratio.
	NeededBytes, ShortfallBytes, FreedBytes int64
	// WholeGPUs counts the whole GPUs the victims hold; SharedVictims the victims that
	// hold GPU shares, and SharedBytes those shares' memory.
	WholeGPUs, SharedVictims int
	SharedBytes              int64
	// Kind is KindPreempt or KindReclaim; empty when the gang fits with no victim.
	Kind string
	// Reason is one line for an Event: who, why, and what is freed.
	Reason string
}

// Find returns the cheapest victim set it finds whose eviction lets the whole gang
// start, or an error wrapping ErrNoVictims that says why there is none. If the gang
// fits as things are, the Result has no victims.
func Find(req Request) (*Result, error) {
	if err := req.validate(); err != nil {
		return nil, fmt.Errorf("preempt: %w", err)
	}
	if req.Now == 0 {
		req.Now = req.Snapshot.Now
	}
	if req.Limits == (Limits{}) {
		req.Limits = DefaultLimits
	}
	p := preemptorOf(req)

	if req.WithinLimit == nil {
		if placements, unschedulable := req.Placer.PlaceGang(req.View.Fork(), req.Pods); unschedulable == nil {
			return &Result{Placements: placements, Reason: fmt.Sprintf("%s fits without evicting anything", p.describe())}, nil
		}
	}

	rules := newReclaimRules(req, p)
	units, refused := collectUnits(req, p, rules)
	required, err := underLimit(req, p, units)
	if err != nil {
		return nil, err
	}
	if len(units) == 0 {
		return nil, fmt.Errorf("%w: %s", ErrNoVictims, noCandidatesMessage(req, p, refused))
	}
	s := newSearch(req, p, rules, units)
	s.required = required
	chosen, err := s.run()
	if err != nil {
		return nil, err
	}
	return s.result(chosen)
}

// underLimit picks, when the gang's queue is at its limit, the victims of its own
// queue that bring it under: preemptible lower-priority units in cost order, as few
// as WithinLimit needs. Nil when there is no limit to get under.
func underLimit(req Request, p preemptor, units []*unit) ([]*unit, error) {
	if req.WithinLimit == nil {
		return nil, nil
	}
	var chosen []*unit
	var pods []*model.Pod
	for _, u := range units {
		if u.kind != KindPreempt && !(u.kind == KindReclaim && req.underLimitQueue(u.gang.Queue)) {
			continue
		}
		chosen = normalize(append(chosen, u))
		pods = pods[:0]
		for _, c := range chosen {
			pods = append(pods, c.pods...)
		}
		if req.WithinLimit(pods) {
			return chosen, nil
		}
	}
	if req.underLimitQueue(p.queue) {
		return nil, fmt.Errorf("%w: %s: queue %s is at its limit, and evicting all the work below it that the gang may take (%d gangs) would not bring it under",
			ErrNoVictims, p.describe(), req.LimitQueue, len(chosen))
	}
	return nil, fmt.Errorf("%w: %s: its queue is at its limit, and evicting all the lower-priority work of the queue (%d) would not bring it under",
		ErrNoVictims, p.describe(), len(chosen))
}

// underLimitQueue says whether queue is below LimitQueue, when that is an ancestor
// of the gang's queue.
func (req *Request) underLimitQueue(queue string) bool {
	if req.LimitQueue == "" || req.Shares == nil || req.Gang == nil || req.LimitQueue == req.Gang.Queue {
		return false
	}
	return slices.Contains(req.Shares.PathUp(queue), req.LimitQueue)
}

func (req *Request) validate() error {
	switch {
	case len(req.Pods) == 0:
		return errors.New("request has no pods to place")
	case req.Snapshot == nil:
		return errors.New("request has no snapshot")
	case req.View == nil:
		return errors.New("request has no view")
	case req.Placer == nil:
		return errors.New("request has no placer")
	}
	return nil
}

// preemptor is who asks for room.
type preemptor struct {
	gang     model.GangID
	queue    string
	priority int32
	class    string
	pods     []*model.Pod
}

func preemptorOf(req Request) preemptor {
	p := preemptor{pods: withPreemptionChoices(req.Pods)}
	if g := req.Gang; g != nil {
		p.gang, p.queue, p.priority, p.class = g.ID, g.Queue, g.Priority, g.PriorityClassName
		return p
	}
	first := req.Pods[0]
	p.gang, p.queue, p.priority = first.Gang, first.Queue, first.Priority
	if p.gang == "" {
		p.gang = model.GangID(first.ID)
	}
	for _, pod := range req.Pods {
		p.priority = max(p.priority, pod.Priority)
	}
	return p
}

// withPreemptionChoices returns the pods, with devices chosen outside the core
// replaced by the choices made as if preemptible pods were gone (see
// model.Pod.PreemptionDeviceChoices): the choices a pod has now name only free devices,
// which no eviction could add to.
func withPreemptionChoices(pods []*model.Pod) []*model.Pod {
	out := pods
	cloned := false
	for i, p := range pods {
		if p.PreemptionDeviceChoices == nil {
			continue
		}
		if !cloned {
			out, cloned = slices.Clone(pods), true
		}
		q := *p
		q.DeviceChoices = p.PreemptionDeviceChoices
		out[i] = &q
	}
	return out
}

func (p preemptor) describe() string {
	return fmt.Sprintf("gang %s (priority %d, queue %s)", p.gang, p.priority, p.queue)
}

// result turns a chosen set into a Result: the final placement on a fresh fork, the
// memory figures and the reason.
func (s *search) result(chosen []*unit) (*Result, error) {
	fork := s.req.View.Fork()
	releaseAll(fork, chosen, nil)
	placements, unschedulable := s.place(fork)
	if unschedulable != nil {
		// The search only returns sets it has seen fit; reaching this is a bug.
		return nil, fmt.Errorf("preempt %s: chosen victims no longer make room: %s", s.p.gang, unschedulable.Message)
	}
	if err := s.checkReclaimerShare(chosen, placements); err != nil {
		return nil, err
	}

	r := &Result{Placements: placements, Kind: KindPreempt}
	for _, u := range chosen {
		r.Victims = append(r.Victims, u.pods...)
		if !u.elastic {
			r.VictimGangs = append(r.VictimGangs, u.gang.ID)
		}
		if u.kind == KindReclaim {
			r.Kind = KindReclaim
		}
	}
	slices.SortFunc(r.Victims, func(a, b *model.Pod) int { return compareIDs(a.ID, b.ID) })
	slices.Sort(r.VictimGangs)
	r.VictimGangs = slices.Compact(r.VictimGangs)
	r.FreedBytes = s.freedBytes(r.Victims)
	r.NeededBytes, r.ShortfallBytes = s.neededBytes(placements)
	r.WholeGPUs, r.SharedVictims, r.SharedBytes = s.victimGPUs(r.Victims)
	r.Reason = s.reason(chosen, r)
	return r, nil
}

func compareIDs(a, b model.PodID) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// neededBytes is what the gang needs free on the GPUs it is placed on, and how much
// of that was not free before the evictions.
func (s *search) neededBytes(placements []placement.Placement) (need, shortfall int64) {
	byID := map[model.PodID]*model.Pod{}
	for _, pod := range s.p.pods {
		byID[pod.ID] = pod
	}
	// Members sharing one GPU add up their needs against what it had free.
	type gpuKey struct {
		node  string
		index int
	}
	needOn := map[gpuKey]int64{}
	var order []gpuKey
	for _, pl := range placements {
		pod := byID[pl.Pod]
		node := s.req.View.Node(pl.Node)
		if pod == nil || node == nil {
			continue
		}
		for _, b := range pl.GPUs {
			if g := node.GPUByIndex(b.Index); g != nil {
				k := gpuKey{pl.Node, b.Index}
				if _, seen := needOn[k]; !seen {
					order = append(order, k)
				}
				needOn[k] += pod.GPU.NeedsLiveFreeBytes(g)
			}
		}
	}
	for _, k := range order {
		g := s.req.View.Node(k.node).GPUByIndex(k.index)
		need += needOn[k]
		shortfall += max(0, needOn[k]-usableFreeBytes(g))
	}
	return need, shortfall
}

// usableFreeBytes is the memory free on g for a newcomer: booked free memory, or the
// measured free memory where the node agent reports less.
func usableFreeBytes(g *model.GPU) int64 {
	free := g.FreeBytes()
	if g.LiveFreeBytes != model.UnknownBytes {
		free = min(free, g.LiveFreeBytes)
	}
	return max(0, free)
}

// freedBytes is the GPU memory that evicting the pods makes free, on every GPU they
// hold: the gain in usableFreeBytes once they are gone, so a GPU whose measured free
// memory is short (a process outside the scheduler's view) counts for what it gains,
// not its nominal size.
func (s *search) freedBytes(pods []*model.Pod) int64 {
	fork := s.req.View.Fork()
	before := map[string][]int64{}
	for _, pod := range pods {
		n := fork.Node(pod.Node)
		if n == nil || before[pod.Node] != nil {
			continue
		}
		free := make([]int64, len(n.GPUs))
		for i := range n.GPUs {
			free[i] = usableFreeBytes(&n.GPUs[i])
		}
		before[pod.Node] = free
	}
	for _, pod := range pods {
		fork.Release(pod)
	}
	var freed int64
	for name, free := range before {
		n := fork.Node(name)
		for i := range n.GPUs {
			freed += max(0, usableFreeBytes(&n.GPUs[i])-free[i])
		}
	}
	return freed
}

// victimGPUs counts the whole GPUs the pods hold, the pods holding shares, and those
// shares' memory.
func (s *search) victimGPUs(pods []*model.Pod) (whole, sharers int, sharedBytes int64) {
	for _, pod := range pods {
		node := s.req.Snapshot.Node(pod.Node)
		shares := false
		for _, b := range pod.GPUs {
			if b.Whole {
				whole++
				continue
			}
			shares = true
			sharedBytes += bindingBytes(node, b)
		}
		if shares {
			sharers++
		}
	}
	return whole, sharers, sharedBytes
}
