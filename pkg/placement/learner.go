package placement

import (
	"cmp"
	"fmt"
	"math"
	"slices"
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
)

// The workload mix is learned online from the pods that arrive, so that the
// scheduler measures fragmentation against the pods it actually gets, and the
// simulator, replaying the same learner, knows at each arrival only the pods that
// have arrived so far.
//
// Old pods are forgotten by exponential decay over arrivals: each arrival weighs
// 2^(1/MixHalfLife) times the one before it. Decay rather than a window because it
// keeps one weight per shape (a window must remember every pod in it, in order),
// it forgets smoothly (a window drops a pod all at once, and a shape with it), and it
// counts arrivals, not seconds, so that the learner needs no clock and a replay is
// deterministic. After a restart the scheduler starts from the pods that exist,
// pending and running, oldest first (Placer.ObserveSnapshot).
const (
	// MixHalfLife is the number of arrivals after which a pod weighs half as much
	// as a new one. The effective memory is about 1.44 × MixHalfLife = 5,900 pods: a
	// shape that is 1 % of arrivals is seen about 60 times, enough to weigh it within
	// about 15 %, while a mix that changes is followed within a few thousand pods.
	MixHalfLife = 4096
	// mixPriorWeight is what DefaultWorkload weighs, in pods, before anything has
	// arrived; it decays like any arrival, so a few hundred pods outweigh it.
	mixPriorWeight = 8
	// mixRefreshArrivals is how many arrivals the mix is recompiled after, at most:
	// 256 arrivals move a mix that remembers 5,900 pods by at most 4 %, which
	// changes scores little, and each compilation makes every node's cached score
	// stale (5 ms at 5,000 nodes). Until then the mix is recompiled each time the
	// arrivals have doubled (after 1, 2, 4, ... pods), when each one changes more.
	mixRefreshArrivals = 256
)

// mixLearner is a decayed count of arrivals by shape.
type mixLearner struct {
	// growth is the factor by which each arrival outweighs the one before it;
	// unit is what the next arrival weighs. Decaying the old weights is done by
	// growing the new ones, and renormalizing now and then.
	growth, unit float64
	halfLife     float64
	index        map[shapeKey]int
	shapes       []Shape
	total        float64
	// arrivals counts the pods learned from; compiledAt is arrivals when the mix
	// was last handed out.
	arrivals, compiledAt uint64
	// seen are the pods (by UID, else ID) already counted, for ObserveSnapshot.
	seen map[string]struct{}
}

func newMixLearner(halfLife float64) *mixLearner {
	l := &mixLearner{growth: math.Exp2(1 / halfLife), unit: 1, halfLife: halfLife, index: map[shapeKey]int{}, seen: map[string]struct{}{}}
	prior := DefaultWorkload()
	var sum float64
	for _, s := range prior {
		sum += s.Weight
	}
	for _, s := range prior {
		l.add(s.Requests, s.GPU, mixPriorWeight*s.Weight/sum)
	}
	return l
}

func (l *mixLearner) add(r model.Resources, d model.GPUDemand, w float64) {
	k := keyOfShape(r, d)
	i, ok := l.index[k]
	if !ok {
		i = len(l.shapes)
		l.index[k] = i
		l.shapes = append(l.shapes, Shape{Requests: r, GPU: d})
	}
	l.shapes[i].Weight += w
	l.total += w
}

// arrive counts one arriving pod.
func (l *mixLearner) arrive(pod *model.Pod) {
	l.add(model.Resources{MilliCPU: pod.Requests.MilliCPU, MemoryBytes: pod.Requests.MemoryBytes}, pod.GPU, l.unit)
	l.unit *= l.growth
	l.arrivals++
	if l.unit > 1e100 {
		l.renormalize()
	}
}

// renormalize rescales every weight so that the next arrival weighs one again, and
// forgets the shapes that have decayed to nothing, so the mix stays small.
func (l *mixLearner) renormalize() {
	kept := l.shapes[:0]
	clear(l.index)
	l.total = 0
	for _, s := range l.shapes {
		s.Weight /= l.unit
		if s.Weight < 1e-9 {
			continue
		}
		l.index[keyOfShape(s.Requests, s.GPU)] = len(kept)
		kept = append(kept, s)
		l.total += s.Weight
	}
	l.shapes = kept
	l.unit = 1
}

// due reports whether enough has arrived since the mix was last handed out.
func (l *mixLearner) due() bool {
	since := l.arrivals - l.compiledAt
	return since > 0 && since >= min(l.compiledAt, mixRefreshArrivals)
}

// mix returns the learned mix, weights summing to one, most frequent first.
func (l *mixLearner) mix() []Shape {
	out := make([]Shape, len(l.shapes))
	for i, s := range l.shapes {
		s.Weight /= l.total
		out[i] = s
	}
	slices.SortStableFunc(out, func(a, b Shape) int { return cmp.Compare(b.Weight, a.Weight) })
	l.compiledAt = l.arrivals
	return out
}

// observe counts the pods of s that were not counted before: on the first call all
// of them (a restarted scheduler starts from the pods pending and running), then the
// members of pending gangs, which is where new pods appear. Pods of other schedulers
// are not counted: they are not placed here. New pods are counted oldest first, so
// that the outcome does not depend on map order.
func (l *mixLearner) observe(s *model.Snapshot) {
	first := len(l.seen) == 0
	var fresh []*model.Pod
	if first {
		// The first count takes every pod: room for all of them at once.
		fresh = make([]*model.Pod, 0, len(s.Pods))
		l.seen = make(map[string]struct{}, len(s.Pods))
	}
	consider := func(p *model.Pod) {
		if p == nil || p.Foreign {
			return
		}
		if _, ok := l.seen[seenKey(p)]; !ok {
			fresh = append(fresh, p)
		}
	}
	if first || s.PendingGangs == nil {
		for _, p := range s.Pods {
			consider(p)
		}
	} else {
		for id := range s.PendingGangs {
			if g := s.Gangs[id]; g != nil {
				for _, m := range g.Members {
					consider(s.Pods[m])
				}
			}
		}
	}
	slices.SortFunc(fresh, func(a, b *model.Pod) int {
		if a.CreatedAt != b.CreatedAt {
			return cmp.Compare(a.CreatedAt, b.CreatedAt)
		}
		return strings.Compare(string(a.ID), string(b.ID))
	})
	for _, p := range fresh {
		l.seen[seenKey(p)] = struct{}{}
		l.arrive(p)
	}
	// Forget pods that are gone, once they are more than half of what is remembered.
	if len(l.seen) > 2*len(s.Pods)+1024 {
		present := make(map[string]struct{}, len(s.Pods))
		for _, p := range s.Pods {
			present[seenKey(p)] = struct{}{}
		}
		for k := range l.seen {
			if _, ok := present[k]; !ok {
				delete(l.seen, k)
			}
		}
	}
}

func seenKey(p *model.Pod) string {
	if p.UID != "" {
		return p.UID
	}
	return string(p.ID)
}

// NewOnline returns a Placer for the named policy that learns its workload mix
// from the pods it is told about (Arrive, ObserveSnapshot), starting from
// DefaultWorkload. It is the one way gantry-scheduler (pkg/scheduler) and gantry
// sim build their Placer, so that the simulator measures what the scheduler does.
func NewOnline(policyName string) (*Placer, error) {
	p, err := New(policyName)
	if err != nil {
		return nil, err
	}
	p.learner = newMixLearner(MixHalfLife)
	p.setShapes(p.learner.mix())
	return p, nil
}

// Arrive counts one arriving pod in the learned mix; the mix the Placer scores
// against follows once enough has arrived. A Placer with a fixed mix ignores it.
func (p *Placer) Arrive(pod *model.Pod) {
	if p.learner == nil {
		return
	}
	p.learner.arrive(pod)
	p.refreshMix()
}

// ObserveSnapshot counts, once each, the pods of s the Placer has not seen: all of
// them the first time (a restarted scheduler starts from the pods pending and
// running), then new pending ones. The scheduler calls it at the start of every
// cycle. A Placer with a fixed mix ignores it.
func (p *Placer) ObserveSnapshot(s *model.Snapshot) {
	if p.learner == nil {
		return
	}
	p.learner.observe(s)
	p.refreshMix()
}

func (p *Placer) refreshMix() {
	if p.learner.due() {
		p.setShapes(p.learner.mix())
	}
}

// Mix returns the mix the Placer scores against, most frequent first, weights
// summing to one (before the scarcity weighting): what it has learned, or the fixed
// mix. It is what a metric or `gantry explain` shows.
func (p *Placer) Mix() []Shape {
	out := make([]Shape, len(p.shapes))
	var total float64
	for _, s := range p.shapes {
		total += s.Weight
	}
	for i, s := range p.shapes {
		if total > 0 {
			s.Weight /= total
		}
		out[i] = s
	}
	slices.SortStableFunc(out, func(a, b Shape) int { return cmp.Compare(b.Weight, a.Weight) })
	return out
}

// Settings is how a Placer was built: what two Placers that decide alike share.
type Settings struct {
	Policy string
	// LearnsMix is true for a Placer that learns its mix online (NewOnline);
	// false for one with a fixed mix.
	LearnsMix bool
	// MixHalfLife is the learner's half-life in arrivals; zero without a learner.
	MixHalfLife float64
	// Arrivals counts the pods learned from so far.
	Arrivals uint64
}

// Settings says how the Placer was built and how much it has learned.
func (p *Placer) Settings() Settings {
	s := Settings{Policy: p.policyName}
	if p.learner != nil {
		s.LearnsMix = true
		s.MixHalfLife = p.learner.halfLife
		s.Arrivals = p.learner.arrivals
	}
	return s
}

// DescribeMix renders the n most frequent shapes of a mix (Placer.Mix) for people,
// one a line, e.g. "31.2 % 1 GPU, 8 CPUs and 32 GiB memory": what `gantry explain`
// and a metric's help show.
func DescribeMix(shapes []Shape, n int) []string {
	var lines []string
	for _, s := range shapes[:max(0, min(n, len(shapes)))] {
		lines = append(lines, fmt.Sprintf("%.1f %% %s", 100*s.Weight, DescribeShape(s)))
	}
	return lines
}

// DescribeShape renders what a shape requests, e.g. "1 GPU, 8 CPUs and 32 GiB
// memory": the label of the workload-mix metric.
func DescribeShape(s Shape) string {
	pod := &model.Pod{Requests: s.Requests, GPU: s.GPU}
	what := DescribeDemand(pod)
	if s.GPU.Count > 0 && s.Requests != (model.Resources{}) {
		what += ", " + DescribeDemand(&model.Pod{Requests: s.Requests})
	}
	return what
}
