package fairshare

import (
	"math"
	"sort"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Order returns the given leaf queues in the order their pending work should be
// considered: at the level where two queues' paths from the root part, the subtree
// further below its fair share (by dominant share) goes first, then the one of higher
// priority, then the one whose name sorts first. Unknown queues go last, by name.
func (s *Shares) Order(leaves []string) []string {
	out := append([]string(nil), leaves...)
	paths := map[string][]string{}
	for _, name := range out {
		paths[name] = s.pathDown(name)
	}
	sort.SliceStable(out, func(i, j int) bool {
		return s.before(paths[out[i]], paths[out[j]], out[i], out[j])
	})
	return out
}

// Next returns the queue among candidates that goes first, and false when there is
// none.
func (s *Shares) Next(candidates []string) (string, bool) {
	if len(candidates) == 0 {
		return "", false
	}
	return s.Order(candidates)[0], true
}

func (s *Shares) before(pathA, pathB []string, a, b string) bool {
	switch {
	case len(pathA) == 0 && len(pathB) == 0:
		return a < b
	case len(pathA) == 0:
		return false
	case len(pathB) == 0:
		return true
	}
	for i := 0; i < len(pathA) && i < len(pathB); i++ {
		x, y := pathA[i], pathB[i]
		if x == y {
			continue
		}
		dx, dy := s.DominantShare(x), s.DominantShare(y)
		if dx != dy {
			return dx < dy
		}
		px, py := s.queues[x].Priority, s.queues[y].Priority
		if px != py {
			return px > py
		}
		return x < y
	}
	return a < b
}

// DominantShare is the largest allocated/fairShare of the queue over gpu, cpu, memory
// and the GPU models it declares, among resources the cluster has. It is 0 for a queue
// holding nothing, and +Inf for one that holds something its fair share has none of.
func (s *Shares) DominantShare(queue string) float64 {
	qs := s.queues[queue]
	if qs == nil {
		return math.Inf(1)
	}
	dominant := 0.0
	for _, r := range s.resources {
		rs := qs.Resources[r]
		if !s.countsForDominance(r, rs) || rs.Allocated <= epsilon {
			continue
		}
		share := math.Inf(1)
		if rs.FairShare > epsilon {
			share = rs.Allocated / rs.FairShare
		}
		dominant = math.Max(dominant, share)
	}
	return dominant
}

func (s *Shares) countsForDominance(r model.ResourceName, rs *ResourceShare) bool {
	if s.capacity[r] <= 0 {
		return false
	}
	if _, isModel := gpuModelOf(r); isModel {
		return rs.Declared
	}
	return true
}

// pathDown returns the queue's ancestors and the queue, the root first; nil for an
// unknown queue.
func (s *Shares) pathDown(queue string) []string {
	up := s.pathUp(queue)
	out := make([]string, len(up))
	for i, qs := range up {
		out[len(up)-1-i] = qs.Name
	}
	return out
}
