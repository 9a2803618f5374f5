package placement

import (
	"math"
	"slices"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gantry-dev/gantry/pkg/model"
)

// topoPair is a node label key and value: one topology domain.
type topoPair struct{ key, value string }

// constraintState is what one placement knows about the constraints that bear on a
// pod beyond its own node: its inter-pod affinity and anti-affinity, the
// anti-affinity of the pods already placed, its topology spread, host ports and
// volumes. It is kube-scheduler's PreFilter state of InterPodAffinity and
// PodTopologySpread, computed over the view's current nodes, so members of a gang
// placed earlier in the same fork count.
type constraintState struct {
	pod      *model.Pod
	c        *model.Constraints
	terms    *podTerms
	nsLabels labels.Set
	// existingAnti are the domains where a placed pod's required anti-affinity
	// selects this pod; antiKeys are their keys.
	existingAnti map[topoPair]int
	antiKeys     []string
	// affinityCounts and antiCounts count, per domain, the placed pods that match
	// all of the pod's required affinity terms, and each anti-affinity term.
	affinityCounts map[topoPair]int
	antiCounts     map[topoPair]int
	hardSpread     []spreadState
	// claimInUse is true when another pod uses one of the pod's ReadWriteOncePod
	// claims.
	claimInUse bool
	// scoring is true when nodes that fit must be ranked by preference first.
	scoring bool
}

// spreadState is one DoNotSchedule constraint's pod count per domain.
type spreadState struct {
	c         *model.SpreadConstraint
	counts    map[string]int
	minMatch  int
	selfMatch int
}

// newConstraintState prepares the constraint checks for pod in v, or returns nil
// when none bears on it: it has no constraints and no placed pod has affinity terms.
func newConstraintState(v *View, pod *model.Pod, terms *podTerms) *constraintState {
	if pod.Constraints == nil && v.affinityNodes == 0 && v.antiNodes == 0 {
		return nil
	}
	s := &constraintState{pod: pod, c: pod.Constraints, terms: terms}
	if s.c == nil {
		s.c = &model.Constraints{}
	}
	if nl := v.snapshot.NamespaceLabels; nl != nil {
		s.nsLabels = nl[pod.Namespace()]
	}
	if v.antiNodes > 0 {
		s.existingAnti, s.antiKeys = existingAntiAffinity(v, pod, s.nsLabels)
	}
	if len(s.c.Affinity)+len(s.c.AntiAffinity) > 0 {
		s.countAffinity(v)
	}
	s.hardSpread = hardSpread(v, pod, terms, s.c.Spread)
	if len(s.c.ExclusiveClaims) > 0 {
		s.claimInUse = exclusiveClaimInUse(v, pod)
	}
	s.scoring = v.affinityNodes > 0 || len(s.c.PreferredAffinity)+len(s.c.PreferredAntiAffinity) > 0
	for i := range s.c.Spread {
		if !s.c.Spread[i].Hard {
			s.scoring = true
		}
	}
	return s
}

// existingAntiAffinity finds the domains where a placed pod's required
// anti-affinity term selects pod.
func existingAntiAffinity(v *View, pod *model.Pod, nsLabels labels.Set) (map[topoPair]int, []string) {
	var out map[topoPair]int
	var keys []string
	for _, n := range v.nodes {
		if n.AntiAffinityPods == 0 {
			continue
		}
		for _, e := range n.Pods {
			if !e.HasAntiAffinity() {
				continue
			}
			for i := range e.Constraints.AntiAffinity {
				t := &e.Constraints.AntiAffinity[i]
				value, ok := n.Labels[t.TopologyKey]
				if !ok || !t.Matches(pod, nsLabels) {
					continue
				}
				if out == nil {
					out = map[topoPair]int{}
				}
				out[topoPair{t.TopologyKey, value}]++
				if !slices.Contains(keys, t.TopologyKey) {
					keys = append(keys, t.TopologyKey)
				}
			}
		}
	}
	return out, keys
}

// countAffinity counts, per domain, placed pods matching all the pod's required
// affinity terms (a pod counts for each term's key), and each anti-affinity term.
func (s *constraintState) countAffinity(v *View) {
	s.affinityCounts, s.antiCounts = map[topoPair]int{}, map[topoPair]int{}
	aff, anti := s.c.Affinity, s.c.AntiAffinity
	for _, n := range v.nodes {
		for _, e := range n.Pods {
			if len(aff) > 0 && matchesAllTerms(aff, e) {
				for i := range aff {
					if value, ok := n.Labels[aff[i].TopologyKey]; ok {
						s.affinityCounts[topoPair{aff[i].TopologyKey, value}]++
					}
				}
			}
			for i := range anti {
				if value, ok := n.Labels[anti[i].TopologyKey]; ok && anti[i].Matches(e, nil) {
					s.antiCounts[topoPair{anti[i].TopologyKey, value}]++
				}
			}
		}
	}
}

// matchesAllTerms reports whether p matches every term (false for no terms), with
// namespace selectors already resolved for the pod's own terms.
func matchesAllTerms(terms []model.AffinityTerm, p *model.Pod) bool {
	if len(terms) == 0 {
		return false
	}
	for i := range terms {
		if !terms[i].Matches(p, nil) {
			return false
		}
	}
	return true
}

// hardSpread counts, for each DoNotSchedule constraint, the pods it selects in each
// domain of the nodes that count (those with every hard constraint's key, and that
// pass the node inclusion policies).
func hardSpread(v *View, pod *model.Pod, terms *podTerms, spread []model.SpreadConstraint) []spreadState {
	var out []spreadState
	for i := range spread {
		if c := &spread[i]; c.Hard {
			st := spreadState{c: c, counts: map[string]int{}}
			if c.Selector.Matches(labels.Set(pod.Labels)) {
				st.selfMatch = 1
			}
			out = append(out, st)
		}
	}
	if len(out) == 0 {
		return nil
	}
	ns := pod.Namespace()
	for _, n := range v.nodes {
		if !hasSpreadKeys(n, out) {
			continue
		}
		for i := range out {
			if !terms.includes(n, out[i].c) {
				continue
			}
			out[i].counts[n.Labels[out[i].c.TopologyKey]] += countSelected(n, out[i].c.Selector, ns)
		}
	}
	for i := range out {
		st := &out[i]
		st.minMatch = math.MaxInt32
		for _, c := range st.counts {
			st.minMatch = min(st.minMatch, c)
		}
		if len(st.counts) < int(st.c.MinDomains) {
			st.minMatch = 0
		}
	}
	return out
}

func hasSpreadKeys(n *model.Node, spread []spreadState) bool {
	for i := range spread {
		if _, ok := n.Labels[spread[i].c.TopologyKey]; !ok {
			return false
		}
	}
	return true
}

// includes applies a spread constraint's node inclusion policies to n.
func (t *podTerms) includes(n *model.Node, c *model.SpreadConstraint) bool {
	if c.HonorNodeAffinity && t.affinity != nil && !t.matchesAffinity(n) {
		return false
	}
	if c.HonorNodeTaints && untoleratedTaint(n, t.pod) != nil {
		return false
	}
	return true
}

// countSelected counts n's pods in namespace ns, not terminating, that sel selects.
// A selector that selects everything counts nothing, as in kube-scheduler.
func countSelected(n *model.Node, sel labels.Selector, ns string) int {
	if sel.Empty() {
		return 0
	}
	count := 0
	for _, p := range n.Pods {
		if p.Terminating || p.Namespace() != ns {
			continue
		}
		if sel.Matches(labels.Set(p.Labels)) {
			count++
		}
	}
	return count
}

// misfit checks n against the constraints.
func (s *constraintState) misfit(n *model.Node) misfit {
	if s.claimInUse {
		return misfitClaimInUse
	}
	if m := s.localMisfit(n); m != fits {
		return m
	}
	if len(s.c.Affinity) > 0 && !s.satisfiesAffinity(n) {
		return misfitPodAffinity
	}
	if len(s.antiCounts) > 0 {
		for i := range s.c.AntiAffinity {
			key := s.c.AntiAffinity[i].TopologyKey
			if value, ok := n.Labels[key]; ok && s.antiCounts[topoPair{key, value}] > 0 {
				return misfitPodAntiAffinity
			}
		}
	}
	for _, k := range s.antiKeys {
		if v, ok := n.Labels[k]; ok && s.existingAnti[topoPair{k, v}] > 0 {
			return misfitExistingAntiAffinity
		}
	}
	for i := range s.hardSpread {
		st := &s.hardSpread[i]
		value, ok := n.Labels[st.c.TopologyKey]
		if !ok {
			return misfitSpreadLabel
		}
		if st.counts[value]+st.selfMatch-st.minMatch > int(st.c.MaxSkew) {
			return misfitSpread
		}
	}
	return fits
}

// localMisfit checks what only n's own pods and labels decide: host ports and
// volumes.
func (s *constraintState) localMisfit(n *model.Node) misfit {
	if len(s.c.HostPorts) > 0 && hostPortTaken(n, s.c.HostPorts) {
		return misfitHostPort
	}
	if s.c.Volumes != nil {
		return volumeMisfit(n, s.c.Volumes)
	}
	return fits
}

// satisfiesAffinity: every term's domain on n must hold a matching pod; when no pod
// anywhere matches, a pod that matches its own terms may start the group on any node
// with the terms' keys.
func (s *constraintState) satisfiesAffinity(n *model.Node) bool {
	podsExist := true
	for i := range s.c.Affinity {
		key := s.c.Affinity[i].TopologyKey
		value, ok := n.Labels[key]
		if !ok {
			return false
		}
		if s.affinityCounts[topoPair{key, value}] <= 0 {
			podsExist = false
		}
	}
	if podsExist {
		return true
	}
	return len(s.affinityCounts) == 0 && matchesAllTerms(s.c.Affinity, s.pod)
}

// hostPortTaken reports whether a pod on n holds a port that conflicts with one of
// ports.
func hostPortTaken(n *model.Node, ports []model.HostPort) bool {
	for _, p := range n.Pods {
		if p.Constraints == nil {
			continue
		}
		for _, held := range p.Constraints.HostPorts {
			for _, want := range ports {
				if held.Conflicts(want) {
					return true
				}
			}
		}
	}
	return false
}

// exclusiveClaimInUse reports whether a pod other than pod uses one of its
// ReadWriteOncePod claims.
func exclusiveClaimInUse(v *View, pod *model.Pod) bool {
	for _, n := range v.nodes {
		for _, e := range n.Pods {
			if e.ID == pod.ID || e.Constraints == nil {
				continue
			}
			for _, claim := range e.Constraints.ExclusiveClaims {
				if slices.Contains(pod.Constraints.ExclusiveClaims, claim) {
					return true
				}
			}
		}
	}
	return false
}

// fullMisfit runs every check PlacePod makes on n: static, constraints, resources.
func fullMisfit(q *podQuery, cs *constraintState, n *model.Node) misfit {
	m := q.terms.staticMisfit(n)
	if m == fits && cs != nil {
		m = cs.misfit(n)
	}
	if m == fits {
		m = q.terms.resourceMisfit(n)
	}
	return m
}

// FitsOn lists, in snapshot order, the nodes of v that can take pod as v is now:
// every filter PlacePod applies, without ranking. It is kube-scheduler's set of
// feasible nodes, for tests and explanations.
func FitsOn(v *View, pod *model.Pod) []string {
	q := newPodQuery(pod)
	cs := newConstraintState(v, pod, q.terms)
	var out []string
	for _, n := range v.nodes {
		if fullMisfit(q, cs, n) == fits {
			out = append(out, n.Name)
		}
	}
	return out
}
