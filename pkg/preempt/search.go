package preempt

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// search finds a victim set for one gang. It grows the set one node at a time: while
// the gang does not fit, it takes the member that does not fit, finds on every
// candidate node the cheapest set of victims there that lets that member in, and adds
// the cheapest of those. Then it drops every victim the gang can do without.
type search struct {
	req   Request
	p     preemptor
	rules *reclaimRules
	// units are every evictable unit, in cost order; byNode lists them by the nodes
	// their pods are on (a gang spanning nodes is listed under each).
	units  []*unit
	byNode map[string][]*unit
	// released are the pods of the victims chosen so far, released in the state.
	released map[model.PodID]bool
	// gangPlacements counts Placer.PlaceGang simulations, against
	// Limits.GangPlacements.
	gangPlacements int
	// unschedulable is the placer's last word on why the gang did not fit.
	unschedulable string
	// stoppedAtShare is set when a victim set was passed over because it would take
	// a queue below its fair share, so that the error can say so.
	stoppedAtShare bool
	// required are victims chosen before the search (to get under a queue limit):
	// always in the set, never pruned.
	required []*unit
}

func newSearch(req Request, p preemptor, rules *reclaimRules, units []*unit) *search {
	s := &search{req: req, p: p, rules: rules, units: units, byNode: map[string][]*unit{}, released: map[model.PodID]bool{}}
	for _, u := range units {
		for _, node := range u.nodes {
			s.byNode[node] = append(s.byNode[node], u)
		}
	}
	return s
}

// run returns the victim set, normalized and pruned.
func (s *search) run() ([]*unit, error) {
	chosen := slices.Clone(s.required)
	state := s.req.View.Fork()
	releaseAll(state, chosen, s.released)
	maxSteps := len(s.p.pods) + 8
	for step := 0; ; step++ {
		placed, partial, blocked, err := s.tryGang(state)
		if err != nil {
			return nil, err
		}
		if placed {
			break
		}
		if step >= maxSteps {
			return nil, s.giveUp(fmt.Sprintf("no victim set found within %d steps", maxSteps))
		}
		plan := s.cheapestNodePlan(partial, blocked, chosen)
		if plan == nil {
			// No single node can take the member that does not fit, whatever leaves
			// it; the gang may still fit when victims leave several nodes at once.
			return s.cheapestPrefix()
		}
		chosen = normalize(append(chosen, plan...))
		releaseAll(state, plan, s.released)
	}
	return s.prune(chosen), nil
}

// tryGang places the gang on a fork of state. When it does not fit, partial is a
// fork where the members that do fit are assigned, hardest first, and blocked is the
// first that does not.
func (s *search) tryGang(state *placement.View) (placed bool, partial *placement.View, blocked *model.Pod, err error) {
	if _, unschedulable, err := s.placeGang(state.Fork()); err != nil {
		return false, nil, nil, err
	} else if unschedulable == nil {
		return true, nil, nil, nil
	}
	partial = state.Fork()
	for _, pod := range hardestFirst(s.p.pods) {
		pl, unschedulable := s.req.Placer.PlacePod(partial, pod)
		if unschedulable != nil {
			return false, partial, pod, nil
		}
		partial.Assign(pod, pl)
	}
	// Placed one by one although not as a gang: the placer's gang order differs.
	// The final placement (placeGang) falls back to this order too.
	return true, nil, nil, nil
}

// placeGang places the gang in v with the cycle's own placement code: PlaceGang, and
// when that fails, the members one by one hardest first. On success the placements
// are assigned in v.
func (s *search) placeGang(v *placement.View) ([]placement.Placement, *placement.Unschedulable, error) {
	if s.gangPlacements >= s.req.Limits.GangPlacements {
		return nil, nil, s.giveUp(fmt.Sprintf("the search reached its bound of %d gang placements", s.req.Limits.GangPlacements))
	}
	s.gangPlacements++
	placements, unschedulable := s.place(v)
	return placements, unschedulable, nil
}

// place is placeGang without the bound, for the final placement of a set already
// seen to fit.
func (s *search) place(v *placement.View) ([]placement.Placement, *placement.Unschedulable) {
	placements, unschedulable := s.req.Placer.PlaceGang(v, s.p.pods)
	if unschedulable == nil {
		return placements, nil
	}
	s.unschedulable = unschedulable.Message
	fork := v.Fork()
	byPod := map[model.PodID]placement.Placement{}
	for _, pod := range hardestFirst(s.p.pods) {
		pl, u := s.req.Placer.PlacePod(fork, pod)
		if u != nil {
			return nil, unschedulable
		}
		fork.Assign(pod, pl)
		byPod[pod.ID] = pl
	}
	fork.Commit()
	placements = make([]placement.Placement, len(s.p.pods))
	for i, pod := range s.p.pods {
		placements[i] = byPod[pod.ID]
	}
	return placements, nil
}

// nodePlan is the cheapest victim set found on one node.
type nodePlan struct {
	local *localNode
	// remaining are the node's units not chosen yet.
	remaining []*unit
	units     []*unit
	// set is the victims chosen before plus units.
	set []*unit
}

// cheapestNodePlan returns the cheapest set of victims on one node that lets the
// blocked member onto that node, given the victims already chosen, or nil.
func (s *search) cheapestNodePlan(partial *placement.View, blocked *model.Pod, chosen []*unit) []*unit {
	limits := s.req.Limits
	var plans []*nodePlan
	for _, name := range s.candidateNodes(chosen) {
		if len(plans) >= limits.CandidateNodes {
			break
		}
		n := partial.Node(name)
		if n == nil {
			continue // pods bound to a node that has since been deleted
		}
		remaining := s.remainingOn(name, chosen)
		local := newLocalNode(partial, n, blocked, s.released)
		if !local.fitsWithout(remaining) {
			continue
		}
		units := s.greedy(local, remaining, chosen)
		if units == nil {
			continue
		}
		plans = append(plans, s.newPlan(local, remaining, units, chosen))
	}
	if len(plans) == 0 {
		return nil
	}
	byCost := func(a, b *nodePlan) int { return compareSets(a.set, b.set) }
	slices.SortStableFunc(plans, byCost)
	for i := 0; i < len(plans) && i < limits.ExhaustiveNodes; i++ {
		plan := plans[i]
		if better := s.exhaustive(plan.local, plan.remaining, chosen, plan.units); better != nil {
			plans[i] = s.newPlan(plan.local, plan.remaining, better, chosen)
		}
	}
	return slices.MinFunc(plans, byCost).units
}

func (s *search) newPlan(local *localNode, remaining, units, chosen []*unit) *nodePlan {
	set := normalize(append(slices.Clone(chosen), units...))
	return &nodePlan{local: local, remaining: remaining, units: units, set: set}
}

// candidateNodes are the nodes with victims left, those offering the lowest victim
// priority first (no set on a node can be cheaper than its cheapest unit), then in
// snapshot order.
func (s *search) candidateNodes(chosen []*unit) []string {
	type candidate struct {
		name     string
		index    int
		priority int32
	}
	var candidates []candidate
	for name := range s.byNode {
		remaining := s.remainingOn(name, chosen)
		if len(remaining) == 0 {
			continue
		}
		lowest := remaining[0].priority
		for _, u := range remaining {
			lowest = min(lowest, u.priority)
		}
		candidates = append(candidates, candidate{name, s.req.Snapshot.NodeIndex(name), lowest})
	}
	slices.SortFunc(candidates, func(a, b candidate) int {
		return cmp.Or(cmp.Compare(a.priority, b.priority), cmp.Compare(a.index, b.index))
	})
	names := make([]string, len(candidates))
	for i, c := range candidates {
		names[i] = c.name
	}
	return names
}

// remainingOn lists the node's units that are not chosen and not already part of a
// gang chosen whole, in cost order.
func (s *search) remainingOn(node string, chosen []*unit) []*unit {
	var out []*unit
	for _, u := range s.byNode[node] {
		if slices.Contains(chosen, u) || (u.elastic && wholeIn(chosen, u.gang.ID)) {
			continue
		}
		out = append(out, u)
	}
	return out
}

// greedy adds the node's units in cost order until the blocked member fits, then
// drops, most expensive first, every unit it fits without. Nil when it never fits.
func (s *search) greedy(local *localNode, remaining, chosen []*unit) []*unit {
	var set []*unit
	for _, u := range remaining {
		candidate := normalize(append(slices.Clone(set), u))
		if !s.valid(chosen, candidate) {
			continue
		}
		set = candidate
		if local.fitsWithout(set) {
			return s.pruneLocal(local, set, chosen)
		}
	}
	return nil
}

func (s *search) pruneLocal(local *localNode, set, chosen []*unit) []*unit {
	for i := len(set) - 1; i >= 0 && len(set) > 1; i-- {
		without := slices.Delete(slices.Clone(set), i, i+1)
		if s.valid(chosen, without) && local.fitsWithout(without) {
			set = without
		}
	}
	return set
}

// exhaustive tries every set of up to Limits.SubsetSize of the node's units that
// could be cheaper than the greedy one, and returns the cheapest that lets the
// blocked member in, or nil when none beats the greedy set.
func (s *search) exhaustive(local *localNode, remaining, chosen, greedySet []*unit) []*unit {
	best := normalize(append(slices.Clone(chosen), greedySet...))
	var bestUnits []*unit
	// A set is never cheaper than its most expensive unit, so units costing more
	// than the best set so far cannot be in a better one.
	var pool []*unit
	for _, u := range remaining {
		if compareSets(normalize(append(slices.Clone(chosen), u)), best) < 0 {
			pool = append(pool, u)
		}
	}
	checks := 0
	var pick func(start int, set []*unit, size int) bool
	pick = func(start int, set []*unit, size int) bool {
		if len(set) == size {
			total := normalize(append(slices.Clone(chosen), set...))
			if hasWholeAndElastic(set) || compareSets(total, best) >= 0 || !s.valid(chosen, set) {
				return true
			}
			if checks >= s.req.Limits.SubsetChecks {
				return false
			}
			checks++
			if local.fitsWithout(set) {
				best, bestUnits = total, slices.Clone(set)
			}
			return true
		}
		for i := start; i < len(pool); i++ {
			if !pick(i+1, append(set, pool[i]), size) {
				return false
			}
		}
		return true
	}
	for size := 1; size <= s.req.Limits.SubsetSize && size <= len(pool); size++ {
		if !pick(0, nil, size) {
			break
		}
	}
	return bestUnits
}

// cheapestPrefix is the fallback when no single node's victims let the blocked member
// in: the shortest prefix of all units in cost order that lets the gang fit (found by
// bisection, since evicting more never makes room smaller), then pruned.
func (s *search) cheapestPrefix() ([]*unit, error) {
	order := slices.Clone(s.required)
	for _, u := range s.units {
		candidate := normalize(append(slices.Clone(order), u))
		if s.valid(nil, candidate) {
			order = candidate
		}
	}
	fitsWith := func(n int) (bool, error) {
		fork := s.req.View.Fork()
		releaseAll(fork, order[:n], nil)
		_, unschedulable, err := s.placeGang(fork)
		return err == nil && unschedulable == nil, err
	}
	ok, err := fitsWith(len(order))
	if err != nil {
		return nil, err
	}
	if !ok {
		why := ""
		if s.stoppedAtShare {
			why = " (reclaim stops where a queue would go below its GPU fair share)"
		}
		return nil, fmt.Errorf("%w: %s: evicting every running gang and elastic member it may evict (%d)%s would still not make room: %s",
			ErrNoVictims, s.p.describe(), len(order), why, s.unschedulable)
	}
	lo, hi := max(1, len(s.required)), len(order)
	for lo < hi {
		mid := (lo + hi) / 2
		ok, err := fitsWith(mid)
		if err != nil {
			return nil, err
		}
		if ok {
			hi = mid
		} else {
			lo = mid + 1
		}
	}
	return s.prune(normalize(order[:lo])), nil
}

// prune drops, most expensive first, every victim the whole gang still fits without.
// When the placement bound is reached it keeps what it has.
func (s *search) prune(chosen []*unit) []*unit {
	byCost := slices.Clone(chosen)
	slices.SortFunc(byCost, func(a, b *unit) int { return cmp.Compare(b.rank, a.rank) })
	for _, u := range byCost {
		if len(chosen) == 1 {
			break
		}
		if slices.Contains(s.required, u) {
			continue
		}
		without := slices.DeleteFunc(slices.Clone(chosen), func(c *unit) bool { return c == u })
		fork := s.req.View.Fork()
		releaseAll(fork, without, nil)
		_, unschedulable, err := s.placeGang(fork)
		if err != nil {
			break
		}
		if unschedulable == nil {
			chosen = without
		}
	}
	return chosen
}

// valid reports whether chosen plus set keeps every gang at its minimum and every
// victim queue at or above its fair share.
func (s *search) valid(chosen, set []*unit) bool {
	all := normalize(append(slices.Clone(chosen), set...))
	elasticTaken := map[model.GangID]int{}
	for _, u := range all {
		if u.elastic {
			elasticTaken[u.gang.ID]++
			if elasticTaken[u.gang.ID] > u.elasticAllowed {
				return false
			}
		}
	}
	if !s.rules.setWithinSurplus(all) {
		s.stoppedAtShare = true
		return false
	}
	return true
}

func (s *search) giveUp(why string) error {
	return fmt.Errorf("%w: %s: %s; the gang stays pending and is retried next cycle", ErrNoVictims, s.p.describe(), why)
}

// normalize drops repeated units and elastic members of gangs that are in the set
// whole, keeping the order.
func normalize(units []*unit) []*unit {
	out := units[:0:0]
	for _, u := range units {
		if slices.Contains(out, u) || (u.elastic && wholeIn(units, u.gang.ID)) {
			continue
		}
		out = append(out, u)
	}
	return out
}

func wholeIn(units []*unit, gang model.GangID) bool {
	for _, u := range units {
		if !u.elastic && u.gang.ID == gang {
			return true
		}
	}
	return false
}

func hasWholeAndElastic(units []*unit) bool {
	for _, u := range units {
		if u.elastic && wholeIn(units, u.gang.ID) {
			return true
		}
	}
	return false
}

// releaseAll releases the units' pods in v, each once. Pods in released are skipped;
// when released is not nil, the pods released are added to it.
func releaseAll(v *placement.View, units []*unit, released map[model.PodID]bool) {
	seen := map[model.PodID]bool{}
	for _, u := range units {
		for _, pod := range u.pods {
			if seen[pod.ID] || released[pod.ID] {
				continue
			}
			seen[pod.ID] = true
			v.Release(pod)
			if released != nil {
				released[pod.ID] = true
			}
		}
	}
}

// localNode answers, for one node, whether a member fits once some victims are
// gone. It uses a one-node view, so a check costs a node copy and placement.Feasible,
// not a whole-cluster placement; but a member whose fit depends on other nodes' pods
// (placement.NeedsCluster: pod affinity, anti-affinity, spread) is checked on the
// whole partial view with the victims gone (placement.FitsOnNode), so that evicting
// the pods that repel it, or that skew its spread, counts.
type localNode struct {
	name   string
	root   *placement.View
	member *model.Pod
	// released are pods already gone in the node's state.
	released map[model.PodID]bool
	// cluster, when not nil, is the partial view the member is checked on.
	cluster *placement.View
}

func newLocalNode(partial *placement.View, n *model.Node, member *model.Pod, released map[model.PodID]bool) *localNode {
	if placement.NeedsCluster(partial, member) {
		return &localNode{name: n.Name, member: member, released: released, cluster: partial}
	}
	snapshot := model.NewSnapshot()
	snapshot.AddNode(n)
	return &localNode{name: n.Name, root: placement.NewView(snapshot), member: member, released: released}
}

// fitsWithout reports whether the member fits on the node once the units' pods on it
// are gone (all of the units' pods, for a member checked on the whole view).
func (l *localNode) fitsWithout(units []*unit) bool {
	if l.cluster != nil {
		fork := l.cluster.Fork()
		for _, u := range units {
			for _, pod := range u.pods {
				if !l.released[pod.ID] {
					fork.Release(pod)
				}
			}
		}
		return placement.FitsOnNode(fork, l.member, l.name)
	}
	fork := l.root.Fork()
	seen := map[model.PodID]bool{}
	for _, u := range units {
		for _, pod := range u.pods {
			if pod.Node != l.name || seen[pod.ID] || l.released[pod.ID] {
				continue
			}
			seen[pod.ID] = true
			fork.Release(pod)
		}
	}
	ok, _ := placement.Feasible(fork.Node(l.name), l.member)
	return ok
}

// hardestFirst orders pods as the placer does for a gang (placement.CompareDemand).
func hardestFirst(pods []*model.Pod) []*model.Pod {
	out := slices.Clone(pods)
	slices.SortStableFunc(out, func(a, b *model.Pod) int { return placement.CompareDemand(b, a) })
	return out
}
