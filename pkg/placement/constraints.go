package placement

import (
	"math"
	"slices"
	"unsafe"

	"k8s.io/apimachinery/pkg/labels"

	"github.com/gantry-dev/gantry/pkg/model"
)

// domainIndex numbers the values of one node label key over a view's nodes: of[i]
// is the domain of the i-th node, or -1 when it lacks the label. Counting per
// domain in slices rather than in maps keyed by label values keeps the per-node
// checks free of hashing.
type domainIndex struct {
	of    []int32
	count int
}

// domains returns the index of key over the view's nodes, built on first use.
func (s *constraintState) domains(key string) *domainIndex {
	if d, ok := s.doms[key]; ok {
		return d
	}
	if s.cache != nil {
		if d := s.cache.get(key, s.v.nodes); d != nil {
			s.remember(key, d)
			return d
		}
	}
	d := &domainIndex{of: make([]int32, len(s.v.nodes))}
	ids := map[string]int32{}
	for i, n := range s.v.nodes {
		value, ok := n.Labels[key]
		if !ok {
			d.of[i] = -1
			continue
		}
		id, seen := ids[value]
		if !seen {
			id = int32(len(ids))
			ids[value] = id
		}
		d.of[i] = id
	}
	d.count = len(ids)
	if s.cache != nil {
		s.cache.put(key, s.v.nodes, d)
	}
	s.remember(key, d)
	return d
}

func (s *constraintState) remember(key string, d *domainIndex) {
	if s.doms == nil {
		s.doms = map[string]*domainIndex{}
	}
	s.doms[key] = d
}

// keyCounts counts pods per domain of each topology key.
type keyCounts map[string][]int

// add counts one pod in the i-th node's domain of key; it reports whether the
// node has the key.
func (s *constraintState) add(kc keyCounts, key string, i int) bool {
	d := s.domains(key)
	dom := d.of[i]
	if dom < 0 {
		return false
	}
	c := kc[key]
	if c == nil {
		c = make([]int, d.count)
		kc[key] = c
	}
	c[dom]++
	return true
}

// at is the count of the i-th node's domain of key, and whether the node has key.
func (s *constraintState) at(kc keyCounts, key string, i int) (count int, has bool) {
	dom := s.domains(key).of[i]
	if dom < 0 {
		return 0, false
	}
	if c := kc[key]; c != nil {
		return c[dom], true
	}
	return 0, true
}

// constraintState is what one placement knows about the constraints that bear on a
// pod beyond its own node: its inter-pod affinity and anti-affinity, the
// anti-affinity of the pods already placed, its topology spread, host ports and
// volumes. It is kube-scheduler's PreFilter state of InterPodAffinity and
// PodTopologySpread, computed over the view's current nodes, so members of a gang
// placed earlier in the same fork count.
type constraintState struct {
	v        *View
	pod      *model.Pod
	c        *model.Constraints
	terms    *podTerms
	nsLabels labels.Set
	doms     map[string]*domainIndex
	// cache, when not nil, is the Placer's domain indexes.
	cache *domainCache
	// existingAnti counts, per domain, placed pods whose required anti-affinity
	// selects this pod; antiKeys are its keys.
	existingAnti keyCounts
	antiKeys     []string
	// affinityCounts count, per domain, the placed pods that match all of the pod's
	// required affinity terms (anyAffinity: one does somewhere); antiCounts the
	// placed pods each anti-affinity term selects.
	affinityCounts keyCounts
	anyAffinity    bool
	antiCounts     keyCounts
	hardSpread     []spreadState
	// claimInUse is true when another pod uses one of the pod's ReadWriteOncePod
	// claims.
	claimInUse bool
	// scoring is true when nodes that fit must be ranked by preference first.
	scoring bool
	// topo is interPodTopology's result, once topoDone.
	topo     map[string][]int64
	topoDone bool
}

// spreadState is one DoNotSchedule constraint's pod count per domain.
type spreadState struct {
	c         *model.SpreadConstraint
	dom       *domainIndex
	counts    []int
	minMatch  int
	selfMatch int
}

// newConstraintState prepares the constraint checks for pod in v, or returns nil
// when none bears on it: it has no constraints and no placed pod has terms that
// filter or score it.
func newConstraintState(v *View, pod *model.Pod, terms *podTerms, cache *domainCache) *constraintState {
	if pod.Constraints == nil && v.counts.Affinity == 0 && v.counts.AntiAffinity == 0 && v.counts.SoftTainted == 0 {
		return nil
	}
	s := &constraintState{v: v, pod: pod, c: pod.Constraints, terms: terms, cache: cache}
	if s.c == nil {
		s.c = &model.Constraints{}
	}
	if nl := v.snapshot.NamespaceLabels; nl != nil {
		s.nsLabels = nl[pod.Namespace()]
	}
	if v.counts.AntiAffinity > 0 {
		s.existingAntiAffinity()
	}
	if len(s.c.Affinity)+len(s.c.AntiAffinity) > 0 {
		s.countAffinity()
	}
	s.countHardSpread()
	if len(s.c.ExclusiveClaims) > 0 {
		s.claimInUse = exclusiveClaimInUse(v, pod)
	}
	s.scoring = v.counts.SoftTainted > 0 || len(s.c.PreferredAffinity)+len(s.c.PreferredAntiAffinity)+len(s.c.PreferredNodeAffinity) > 0
	for i := range s.c.Spread {
		if !s.c.Spread[i].Hard {
			s.scoring = true
		}
	}
	// Placed pods' terms score this pod only if one of them selects it.
	if !s.scoring && v.counts.Affinity > 0 {
		s.scoring = len(s.interPodTopology()) > 0
	}
	return s
}

// existingAntiAffinity counts the domains where a placed pod's required
// anti-affinity term selects the pod.
func (s *constraintState) existingAntiAffinity() {
	s.existingAnti = keyCounts{}
	for i, n := range s.v.nodes {
		if n.AntiAffinityPods == 0 {
			continue
		}
		for _, e := range n.Pods {
			if !e.HasAntiAffinity() {
				continue
			}
			for j := range e.Constraints.AntiAffinity {
				t := &e.Constraints.AntiAffinity[j]
				if !t.Matches(s.pod, s.nsLabels) || !s.add(s.existingAnti, t.TopologyKey, i) {
					continue
				}
				if !slices.Contains(s.antiKeys, t.TopologyKey) {
					s.antiKeys = append(s.antiKeys, t.TopologyKey)
				}
			}
		}
	}
}

// countAffinity counts, per domain, placed pods matching all the pod's required
// affinity terms (a pod counts for each term's key), and each anti-affinity term.
func (s *constraintState) countAffinity() {
	s.affinityCounts, s.antiCounts = keyCounts{}, keyCounts{}
	aff, anti := s.c.Affinity, s.c.AntiAffinity
	for i, n := range s.v.nodes {
		for _, e := range n.Pods {
			if len(aff) > 0 && matchesAllTerms(aff, e) {
				for j := range aff {
					if s.add(s.affinityCounts, aff[j].TopologyKey, i) {
						s.anyAffinity = true
					}
				}
			}
			for j := range anti {
				if anti[j].Matches(e, nil) {
					s.add(s.antiCounts, anti[j].TopologyKey, i)
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

// countHardSpread counts, for each DoNotSchedule constraint, the pods it selects in
// each domain of the nodes that count (those with every hard constraint's key, and
// that pass the node inclusion policies).
func (s *constraintState) countHardSpread() {
	for i := range s.c.Spread {
		if c := &s.c.Spread[i]; c.Hard {
			d := s.domains(c.TopologyKey)
			st := spreadState{c: c, dom: d, counts: make([]int, d.count)}
			if c.Selector.Matches(labels.Set(s.pod.Labels)) {
				st.selfMatch = 1
			}
			s.hardSpread = append(s.hardSpread, st)
		}
	}
	if len(s.hardSpread) == 0 {
		return
	}
	ns := s.pod.Namespace()
	eligible := make([][]bool, len(s.hardSpread))
	for j := range eligible {
		eligible[j] = make([]bool, s.hardSpread[j].dom.count)
	}
	for i, n := range s.v.nodes {
		if !s.hasSpreadKeys(i) {
			continue
		}
		for j := range s.hardSpread {
			st := &s.hardSpread[j]
			if !s.terms.includes(n, st.c) {
				continue
			}
			dom := st.dom.of[i]
			eligible[j][dom] = true
			st.counts[dom] += countSelected(n, st.c.Selector, ns)
		}
	}
	for j := range s.hardSpread {
		st := &s.hardSpread[j]
		st.minMatch = math.MaxInt32
		domains := 0
		for dom, ok := range eligible[j] {
			if ok {
				domains++
				st.minMatch = min(st.minMatch, st.counts[dom])
			}
		}
		if domains < int(st.c.MinDomains) {
			st.minMatch = 0
		}
	}
}

// hasSpreadKeys reports whether the i-th node has every hard constraint's key.
func (s *constraintState) hasSpreadKeys(i int) bool {
	for j := range s.hardSpread {
		if s.hardSpread[j].dom.of[i] < 0 {
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

// misfit checks n, the i-th node of the view, against the constraints.
func (s *constraintState) misfit(i int, n *model.Node) misfit {
	if s.claimInUse {
		return misfitClaimInUse
	}
	if m := s.localMisfit(n); m != fits {
		return m
	}
	if len(s.c.Affinity) > 0 && !s.satisfiesAffinity(i) {
		return misfitPodAffinity
	}
	for j := range s.c.AntiAffinity {
		if c, _ := s.at(s.antiCounts, s.c.AntiAffinity[j].TopologyKey, i); c > 0 {
			return misfitPodAntiAffinity
		}
	}
	for _, k := range s.antiKeys {
		if c, _ := s.at(s.existingAnti, k, i); c > 0 {
			return misfitExistingAntiAffinity
		}
	}
	for j := range s.hardSpread {
		st := &s.hardSpread[j]
		dom := st.dom.of[i]
		if dom < 0 {
			return misfitSpreadLabel
		}
		if st.counts[dom]+st.selfMatch-st.minMatch > int(st.c.MaxSkew) {
			return misfitSpread
		}
	}
	return fits
}

// localMisfit checks what only n's own pods, labels and status decide: declared
// features, host ports and volumes.
func (s *constraintState) localMisfit(n *model.Node) misfit {
	for _, f := range s.c.NodeFeatures {
		if !slices.Contains(n.DeclaredFeatures, f) {
			return misfitNodeFeatures
		}
	}
	if len(s.c.HostPorts) > 0 && hostPortTaken(n, s.c.HostPorts) {
		return misfitHostPort
	}
	if s.c.Volumes != nil {
		return volumeMisfit(n, s.c.Volumes, s.v.volumeTaken)
	}
	return fits
}

// satisfiesAffinity: every term's domain on the i-th node must hold a matching
// pod; when no pod anywhere matches, a pod that matches its own terms may start the
// group on any node with the terms' keys.
func (s *constraintState) satisfiesAffinity(i int) bool {
	podsExist := true
	for j := range s.c.Affinity {
		c, has := s.at(s.affinityCounts, s.c.Affinity[j].TopologyKey, i)
		if !has {
			return false
		}
		if c <= 0 {
			podsExist = false
		}
	}
	if podsExist {
		return true
	}
	return !s.anyAffinity && matchesAllTerms(s.c.Affinity, s.pod)
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
func fullMisfit(q *podQuery, cs *constraintState, i int, n *model.Node) misfit {
	m := q.terms.staticMisfit(n)
	if m == fits && cs != nil {
		m = cs.misfit(i, n)
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
	cs := newConstraintState(v, pod, q.terms, nil)
	var out []string
	for i, n := range v.nodes {
		if fullMisfit(q, cs, i, n) == fits {
			out = append(out, n.Name)
		}
	}
	return out
}

// domainCache keeps domain indexes from one placement to the next: node labels
// change only when a node is replaced by one with other labels (a View's copies
// share the labels map), so an index stays valid while every node's labels map is
// the one it was built from.
type domainCache struct {
	entries map[string]*cachedDomains
}

type cachedDomains struct {
	labels []unsafe.Pointer
	index  *domainIndex
}

// labelsID is the identity of a node's labels map.
func labelsID(n *model.Node) unsafe.Pointer {
	return *(*unsafe.Pointer)(unsafe.Pointer(&n.Labels))
}

// get returns the cached index of key over nodes, or nil when it is stale.
func (c *domainCache) get(key string, nodes []*model.Node) *domainIndex {
	e := c.entries[key]
	if e == nil || len(e.labels) != len(nodes) {
		return nil
	}
	for i, n := range nodes {
		if labelsID(n) != e.labels[i] {
			return nil
		}
	}
	return e.index
}

func (c *domainCache) put(key string, nodes []*model.Node, d *domainIndex) {
	if c.entries == nil {
		c.entries = map[string]*cachedDomains{}
	}
	e := &cachedDomains{labels: make([]unsafe.Pointer, len(nodes)), index: d}
	for i, n := range nodes {
		e.labels[i] = labelsID(n)
	}
	c.entries[key] = e
}
