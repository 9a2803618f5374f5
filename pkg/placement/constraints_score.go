package placement

import (
	"math"

	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gantry-dev/gantry/pkg/model"
)

// maxNodeScore is kube-scheduler's MaxNodeScore: a plugin's normalized score is
// 0..maxNodeScore.
const maxNodeScore = 100

// Weights of the two preference plugins in kube-scheduler's default profile.
const (
	interPodAffinityWeight = 2
	topologySpreadWeight   = 2
	nodeAffinityWeight     = 2
	taintTolerationWeight  = 3
	// hardPodAffinityWeight is kube-scheduler's default weight of a placed pod's
	// required affinity term that selects the incoming pod.
	hardPodAffinityWeight = 1
)

// preferenceScores scores the nodes that fit by the pod's preferred inter-pod
// affinity and ScheduleAnyway spread, the preferred terms of the pods already
// placed, the pod's preferred node affinity and the PreferNoSchedule taints it does
// not tolerate, as kube-scheduler's InterPodAffinity, PodTopologySpread,
// NodeAffinity and TaintToleration score plugins do (normalized and weighted as in
// its default profile). Higher is better.
func (s *constraintState) preferenceScores(v *View, cands []candidate) []int64 {
	out := make([]int64, len(cands))
	ipa := s.interPodScores(v, cands)
	spread := s.spreadScores(v, cands)
	nodeAff := s.nodeAffinityScores(v, cands)
	taints := s.taintScores(v, cands)
	for i := range out {
		if nodeAff != nil {
			out[i] += nodeAffinityWeight * nodeAff[i]
		}
		if taints != nil {
			out[i] += taintTolerationWeight * taints[i]
		}
		if ipa != nil {
			out[i] += interPodAffinityWeight * ipa[i]
		}
		if spread != nil {
			out[i] += topologySpreadWeight * spread[i]
		}
	}
	return out
}

// interPodScores is InterPodAffinity's normalized score per candidate, or nil when
// no term bears on the pod.
func (s *constraintState) interPodScores(v *View, cands []candidate) []int64 {
	topo := s.interPodTopology()
	if len(topo) == 0 {
		return nil
	}
	raw := make([]int64, len(cands))
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for j, c := range cands {
		for key, values := range topo {
			if dom := s.domains(key).of[c.index]; dom >= 0 {
				raw[j] += values[dom]
			}
		}
		lo, hi = min(lo, raw[j]), max(hi, raw[j])
	}
	for j := range raw {
		if hi > lo {
			raw[j] = int64(float64(maxNodeScore) * float64(raw[j]-lo) / float64(hi-lo))
		} else {
			raw[j] = 0
		}
	}
	return raw
}

// interPodTopology sums, per topology domain, the weights of the terms that bear on
// the pod: its preferred terms selecting placed pods, and placed pods' terms
// selecting it. Computed once per placement.
func (s *constraintState) interPodTopology() map[string][]int64 {
	if s.topoDone {
		return s.topo
	}
	s.topoDone = true
	v := s.v
	own := len(s.c.PreferredAffinity)+len(s.c.PreferredAntiAffinity) > 0
	if !own && v.counts.Affinity == 0 {
		return nil
	}
	topo := map[string][]int64{}
	add := func(i int, key string, w int64) {
		d := s.domains(key)
		dom := d.of[i]
		if dom < 0 {
			return
		}
		if topo[key] == nil {
			topo[key] = make([]int64, d.count)
		}
		topo[key][dom] += w
	}
	for i, n := range v.nodes {
		if (!own && n.AffinityPods == 0) || len(n.Labels) == 0 {
			continue
		}
		for _, e := range n.Pods {
			s.scoreExisting(i, e, add)
		}
	}
	s.topo = topo
	return topo
}

// scoreExisting adds what placed pod e on the i-th node contributes: the pod's
// preferred terms that select e, and e's terms that select the pod.
func (s *constraintState) scoreExisting(i int, e *model.Pod, add func(int, string, int64)) {
	for j := range s.c.PreferredAffinity {
		if t := &s.c.PreferredAffinity[j]; t.Matches(e, nil) {
			add(i, t.TopologyKey, int64(t.Weight))
		}
	}
	for j := range s.c.PreferredAntiAffinity {
		if t := &s.c.PreferredAntiAffinity[j]; t.Matches(e, nil) {
			add(i, t.TopologyKey, -int64(t.Weight))
		}
	}
	ec := e.Constraints
	if ec == nil {
		return
	}
	for j := range ec.Affinity {
		if t := &ec.Affinity[j]; t.Matches(s.pod, s.nsLabels) {
			add(i, t.TopologyKey, hardPodAffinityWeight)
		}
	}
	for j := range ec.PreferredAffinity {
		if t := &ec.PreferredAffinity[j]; t.Matches(s.pod, s.nsLabels) {
			add(i, t.TopologyKey, int64(t.Weight))
		}
	}
	for j := range ec.PreferredAntiAffinity {
		if t := &ec.PreferredAntiAffinity[j]; t.Matches(s.pod, s.nsLabels) {
			add(i, t.TopologyKey, -int64(t.Weight))
		}
	}
}

// softSpread is one ScheduleAnyway constraint's pod count per domain, over the
// domains of the candidates.
type softSpread struct {
	c      *model.SpreadConstraint
	dom    *domainIndex
	counts []int64
	// present marks the domains of candidates that have every soft key.
	present []bool
	weight  float64
}

// spreadScores is PodTopologySpread's normalized score per candidate for the
// ScheduleAnyway constraints, or nil when there are none. Candidates without every
// constraint's key score 0.
func (s *constraintState) spreadScores(v *View, cands []candidate) []int64 {
	var soft []softSpread
	for i := range s.c.Spread {
		if c := &s.c.Spread[i]; !c.Hard {
			d := s.domains(c.TopologyKey)
			soft = append(soft, softSpread{c: c, dom: d, counts: make([]int64, d.count), present: make([]bool, d.count)})
		}
	}
	if len(soft) == 0 {
		return nil
	}
	ignored := make([]bool, len(cands))
	kept := 0
	for j, cand := range cands {
		if !hasSoftKeys(cand.index, soft) {
			ignored[j] = true
			continue
		}
		kept++
		for k := range soft {
			soft[k].present[soft[k].dom.of[cand.index]] = true
		}
	}
	ns := s.pod.Namespace()
	for i, n := range v.nodes {
		if !hasSoftKeys(i, soft) {
			continue
		}
		for k := range soft {
			sp := &soft[k]
			dom := sp.dom.of[i]
			if sp.c.TopologyKey == corev1.LabelHostname || !sp.present[dom] || !s.terms.includes(n, sp.c) {
				continue
			}
			sp.counts[dom] += int64(countSelected(n, sp.c.Selector, ns))
		}
	}
	for k := range soft {
		sp := &soft[k]
		size := 0
		for _, p := range sp.present {
			if p {
				size++
			}
		}
		if sp.c.TopologyKey == corev1.LabelHostname {
			size = kept
		}
		sp.weight = math.Log(float64(size + 2))
	}
	return normalizeSpread(s.rawSpread(v, cands, soft, ignored), ignored)
}

func (s *constraintState) rawSpread(v *View, cands []candidate, soft []softSpread, ignored []bool) []int64 {
	raw := make([]int64, len(cands))
	ns := s.pod.Namespace()
	for j, cand := range cands {
		if ignored[j] {
			continue
		}
		var score float64
		for k := range soft {
			sp := &soft[k]
			cnt := sp.counts[sp.dom.of[cand.index]]
			if sp.c.TopologyKey == corev1.LabelHostname {
				cnt = int64(countSelected(v.nodes[cand.index], sp.c.Selector, ns))
			}
			score += float64(cnt)*sp.weight + float64(sp.c.MaxSkew-1)
		}
		raw[j] = int64(math.Round(score))
	}
	return raw
}

func hasSoftKeys(i int, soft []softSpread) bool {
	for k := range soft {
		if soft[k].dom.of[i] < 0 {
			return false
		}
	}
	return true
}

// normalizeSpread inverts raw scores into 0..maxNodeScore: fewer matching pods is
// better.
func normalizeSpread(raw []int64, ignored []bool) []int64 {
	lo, hi := int64(math.MaxInt64), int64(0)
	for j, r := range raw {
		if !ignored[j] {
			lo, hi = min(lo, r), max(hi, r)
		}
	}
	for j, r := range raw {
		switch {
		case ignored[j]:
			raw[j] = 0
		case hi == 0:
			raw[j] = maxNodeScore
		default:
			raw[j] = maxNodeScore * (hi + lo - r) / hi
		}
	}
	return raw
}

// candidate is a node that fits, with its policy rank.
type candidate struct {
	index int
	rank  rank
	gpu   int
}

// pick chooses among the nodes that fit: the highest preference score first (the
// pod's stated preferences outrank packing), then the policy's rank, then snapshot
// order.
func (s *constraintState) pick(v *View, cands []candidate) (best, gpu int) {
	scores := s.preferenceScores(v, cands)
	b := 0
	for i := 1; i < len(cands); i++ {
		if scores[i] > scores[b] || (scores[i] == scores[b] && cands[i].rank.less(cands[b].rank)) {
			b = i
		}
	}
	return cands[b].index, cands[b].gpu
}

// nodeAffinityScores is NodeAffinity's normalized score per candidate (the weights
// of the preferred terms the node matches), or nil when the pod has none.
func (s *constraintState) nodeAffinityScores(v *View, cands []candidate) []int64 {
	if len(s.c.PreferredNodeAffinity) == 0 {
		return nil
	}
	terms, err := nodeaffinity.NewPreferredSchedulingTerms(s.c.PreferredNodeAffinity)
	if err != nil {
		return nil
	}
	raw := make([]int64, len(cands))
	node := &corev1.Node{}
	for j, c := range cands {
		n := v.nodes[c.index]
		node.Name, node.Labels = n.Name, n.Labels
		raw[j] = terms.Score(node)
	}
	return normalize(raw, false)
}

// taintScores is TaintToleration's normalized score per candidate: fewer
// PreferNoSchedule taints the pod does not tolerate is better. Nil when no node has
// such a taint.
func (s *constraintState) taintScores(v *View, cands []candidate) []int64 {
	if v.counts.SoftTainted == 0 {
		return nil
	}
	var tolerations []corev1.Toleration
	for _, t := range s.pod.Tolerations {
		if t.Effect == "" || t.Effect == corev1.TaintEffectPreferNoSchedule {
			tolerations = append(tolerations, t)
		}
	}
	raw := make([]int64, len(cands))
	for j, c := range cands {
		n := v.nodes[c.index]
		for i := range n.Taints {
			t := &n.Taints[i]
			if t.Effect == corev1.TaintEffectPreferNoSchedule && !corev1helpers.TolerationsTolerateTaint(taintLogger, tolerations, t, true) {
				raw[j]++
			}
		}
	}
	return normalize(raw, true)
}

// normalize is kube-scheduler's DefaultNormalizeScore: scores scaled so the highest
// is maxNodeScore, or, reversed, maxNodeScore minus that.
func normalize(raw []int64, reverse bool) []int64 {
	var hi int64
	for _, r := range raw {
		hi = max(hi, r)
	}
	for j, r := range raw {
		switch {
		case hi == 0 && reverse:
			raw[j] = maxNodeScore
		case hi == 0:
			raw[j] = 0
		case reverse:
			raw[j] = maxNodeScore - maxNodeScore*r/hi
		default:
			raw[j] = maxNodeScore * r / hi
		}
	}
	return raw
}

// PreferenceScoresOf returns, for the nodes of v that pod fits on (in snapshot
// order), the normalized scores InterPodAffinity and PodTopologySpread give them;
// a plugin with nothing to score returns nil. It exists so that kube-scheduler's
// score tables can be checked against the core.
func PreferenceScoresOf(v *View, pod *model.Pod) (nodes []string, interPod, spread []int64) {
	q := newPodQuery(pod)
	cs := newConstraintState(v, pod, q.terms, nil)
	var cands []candidate
	for i, n := range v.nodes {
		if fullMisfit(q, cs, i, n) == fits {
			cands = append(cands, candidate{index: i})
			nodes = append(nodes, n.Name)
		}
	}
	if cs == nil || len(cands) == 0 {
		return nodes, nil, nil
	}
	return nodes, cs.interPodScores(v, cands), cs.spreadScores(v, cands)
}
