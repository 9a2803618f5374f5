package placement

import (
	"math"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/model"
)

// maxNodeScore is kube-scheduler's MaxNodeScore: a plugin's normalized score is
// 0..maxNodeScore.
const maxNodeScore = 100

// Weights of the two preference plugins in kube-scheduler's default profile.
const (
	interPodAffinityWeight = 2
	topologySpreadWeight   = 2
	// hardPodAffinityWeight is kube-scheduler's default weight of a placed pod's
	// required affinity term that selects the incoming pod.
	hardPodAffinityWeight = 1
)

// preferenceScores scores the nodes that fit by the pod's preferred inter-pod
// affinity and ScheduleAnyway spread, and by the preferred terms of the pods already
// placed, as kube-scheduler's InterPodAffinity and PodTopologySpread score plugins
// do (normalized and weighted as in its default profile). Higher is better.
func (s *constraintState) preferenceScores(v *View, cands []candidate) []int64 {
	out := make([]int64, len(cands))
	ipa := s.interPodScores(v, cands)
	spread := s.spreadScores(v, cands)
	for i := range out {
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
	own := len(s.c.PreferredAffinity)+len(s.c.PreferredAntiAffinity) > 0
	topo := map[string]map[string]int64{}
	add := func(n *model.Node, key string, w int64) {
		value, ok := n.Labels[key]
		if !ok {
			return
		}
		if topo[key] == nil {
			topo[key] = map[string]int64{}
		}
		topo[key][value] += w
	}
	for _, n := range v.nodes {
		if (!own && n.AffinityPods == 0) || len(n.Labels) == 0 {
			continue
		}
		for _, e := range n.Pods {
			s.scoreExisting(n, e, add)
		}
	}
	if len(topo) == 0 {
		return nil
	}
	raw := make([]int64, len(cands))
	lo, hi := int64(math.MaxInt64), int64(math.MinInt64)
	for i, c := range cands {
		n := v.nodes[c.index]
		for key, values := range topo {
			if value, ok := n.Labels[key]; ok {
				raw[i] += values[value]
			}
		}
		lo, hi = min(lo, raw[i]), max(hi, raw[i])
	}
	for i := range raw {
		if hi > lo {
			raw[i] = int64(float64(maxNodeScore) * float64(raw[i]-lo) / float64(hi-lo))
		} else {
			raw[i] = 0
		}
	}
	return raw
}

// scoreExisting adds what placed pod e on n contributes: the pod's preferred terms
// that select e, and e's terms that select the pod.
func (s *constraintState) scoreExisting(n *model.Node, e *model.Pod, add func(*model.Node, string, int64)) {
	for i := range s.c.PreferredAffinity {
		if t := &s.c.PreferredAffinity[i]; t.Matches(e, nil) {
			add(n, t.TopologyKey, int64(t.Weight))
		}
	}
	for i := range s.c.PreferredAntiAffinity {
		if t := &s.c.PreferredAntiAffinity[i]; t.Matches(e, nil) {
			add(n, t.TopologyKey, -int64(t.Weight))
		}
	}
	ec := e.Constraints
	if ec == nil {
		return
	}
	for i := range ec.Affinity {
		if t := &ec.Affinity[i]; t.Matches(s.pod, s.nsLabels) {
			add(n, t.TopologyKey, hardPodAffinityWeight)
		}
	}
	for i := range ec.PreferredAffinity {
		if t := &ec.PreferredAffinity[i]; t.Matches(s.pod, s.nsLabels) {
			add(n, t.TopologyKey, int64(t.Weight))
		}
	}
	for i := range ec.PreferredAntiAffinity {
		if t := &ec.PreferredAntiAffinity[i]; t.Matches(s.pod, s.nsLabels) {
			add(n, t.TopologyKey, -int64(t.Weight))
		}
	}
}

// spreadScores is PodTopologySpread's normalized score per candidate for the
// ScheduleAnyway constraints, or nil when there are none. Candidates without every
// constraint's key score 0.
func (s *constraintState) spreadScores(v *View, cands []candidate) []int64 {
	var soft []*model.SpreadConstraint
	for i := range s.c.Spread {
		if !s.c.Spread[i].Hard {
			soft = append(soft, &s.c.Spread[i])
		}
	}
	if len(soft) == 0 {
		return nil
	}
	ignored := make([]bool, len(cands))
	counts := make([]map[string]int64, len(soft))
	for i := range counts {
		counts[i] = map[string]int64{}
	}
	kept := 0
	for j, cand := range cands {
		n := v.nodes[cand.index]
		if !hasKeys(n, soft) {
			ignored[j] = true
			continue
		}
		kept++
		for i, c := range soft {
			if c.TopologyKey != corev1.LabelHostname {
				counts[i][n.Labels[c.TopologyKey]] += 0
			}
		}
	}
	ns := s.pod.Namespace()
	for _, n := range v.nodes {
		if !hasKeys(n, soft) {
			continue
		}
		for i, c := range soft {
			value := n.Labels[c.TopologyKey]
			if _, ok := counts[i][value]; !ok || !s.terms.includes(n, c) {
				continue
			}
			counts[i][value] += int64(countSelected(n, c.Selector, ns))
		}
	}
	weights := make([]float64, len(soft))
	for i, c := range soft {
		size := len(counts[i])
		if c.TopologyKey == corev1.LabelHostname {
			size = kept
		}
		weights[i] = math.Log(float64(size + 2))
	}
	return normalizeSpread(s.rawSpread(v, cands, soft, counts, weights, ignored), ignored)
}

func (s *constraintState) rawSpread(v *View, cands []candidate, soft []*model.SpreadConstraint, counts []map[string]int64, weights []float64, ignored []bool) []int64 {
	raw := make([]int64, len(cands))
	ns := s.pod.Namespace()
	for j, cand := range cands {
		if ignored[j] {
			continue
		}
		n := v.nodes[cand.index]
		var score float64
		for i, c := range soft {
			value, ok := n.Labels[c.TopologyKey]
			if !ok {
				continue
			}
			cnt := counts[i][value]
			if c.TopologyKey == corev1.LabelHostname {
				cnt = int64(countSelected(n, c.Selector, ns))
			}
			score += float64(cnt)*weights[i] + float64(c.MaxSkew-1)
		}
		raw[j] = int64(math.Round(score))
	}
	return raw
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

func hasKeys(n *model.Node, cs []*model.SpreadConstraint) bool {
	for _, c := range cs {
		if _, ok := n.Labels[c.TopologyKey]; !ok {
			return false
		}
	}
	return true
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
