package placement

import "github.com/gantry-dev/gantry/pkg/model"

// The leftover term looks one pod ahead. Published FGD counts a GPU's free capacity
// as a fragment to each shape of the mix that cannot use it; a GPU that a share can
// use counts as nothing to that share, however badly what the share would leave
// behind fits the pods that come after it. With many shares of a few sizes
// (openb's gpushare families: 810, 470, 650, 320 thousandths), that difference
// decides how GPUs pair up: a 470 thousandths GPU hole is worth keeping for the
// next 470 (leaving 60), not for a 320 (leaving 210 that only rare slivers use).
//
// So for each single-GPU share shape and each GPU it fits, the term adds what the
// share would leave on that GPU, weighed as FGD weighs any free capacity: times
// the part of the mix that could not use it there. It is weighed like the shape
// (its share of the mix, among the shapes whose CPU and memory fit the node).
// Looking further ahead costs a factor of the mix's size per step and was not
// needed. It uses only the learned mix, so the scheduler and the simulator compute
// it alike, from the pods that have arrived.

// leftoverWeight weighs the leftover term against FGD's own: one, the same as any
// other fragment. It is not a tuned optimum, but neither is it robust to any value:
// on openb gpushare80 seed 42, 0.3 changed nothing, 1 gained 0.11 points and 2 lost
// 0.04 (docs/benchmarks.md).
const leftoverWeight = 1

// leftoverKey identifies the GPUs that one leftover table holds for.
type leftoverKey struct {
	model  string
	memory int64
}

// withLeftover switches the leftover term on at weight (zero leaves it out).
func (w *workload) withLeftover(weight float64) {
	w.leftoverWeight = weight
	if weight > 0 {
		w.leftovers = map[leftoverKey][]float64{}
	}
}

// leftoverTable returns, for GPUs like s, the fragmentation of r free thousandths
// of the GPU for r = 0..1000: r times the weight of the mix's groups that could not
// use them there (wrong model, or more than r per GPU). Built once per GPU kind and
// mix.
func (w *workload) leftoverTable(s *gpuSlot) []float64 {
	k := leftoverKey{s.model, s.memory}
	if t, ok := w.leftovers[k]; ok {
		return t
	}
	t := make([]float64, model.MilliPerGPU+1)
	for gi := range w.groups {
		g := &w.groups[gi]
		need := float64(model.MilliPerGPU + 1) // cannot use any of the GPU
		switch {
		case g.demand.Count == 0 || !g.demand.AcceptsModel(s.model):
		case g.demand.Whole() || s.memory <= 0:
			need = model.MilliPerGPU
		default:
			need = float64(shareBytes(&g.demand, s.memory)) * model.MilliPerGPU / float64(s.memory)
		}
		for r := 0; r < len(t) && float64(r) < need; r++ {
			t[r] += g.weight
		}
	}
	for r := range t {
		t[r] *= float64(r)
	}
	w.leftovers[k] = t
	return t
}

// leftover is the term for group g over the node's slots (see above); tables are
// leftoverTable for each slot.
func (w *workload) leftover(g *shapeGroup, slots []gpuSlot, tables [][]float64) float64 {
	var sum float64
	for i := range slots {
		s := &slots[i]
		if !s.takes(&g.demand) {
			continue
		}
		left := s.milli() - float64(shareBytes(&g.demand, s.memory))*model.MilliPerGPU/float64(s.memory)
		r := int(left + 1e-6)
		sum += tables[i][min(max(r, 0), model.MilliPerGPU)]
	}
	return sum
}
