package placement

import (
	"cmp"
	"math"
	"slices"

	"github.com/gantry-dev/gantry/pkg/model"
)

// fgdPolicy places a pod where the node's expected fragmentation grows least
// (Weng et al., "Beware of Fragmentation", USENIX ATC '23).
//
// The default adds to published FGD: GPUs stranded by a lack of CPU or memory count
// as fragmentation (see workload.fragmentation); so does what a share would leave
// of a GPU, as far as the mix could not use it (leftover.go); shapes that fit few
// nodes weigh more (see Placer.adaptTo); scores are compared exactly rather than squashed into
// kube-scheduler's 0..100 integers; memory is checked as well as CPU; and equal
// scores go to the node left with the least free GPU capacity, then the least free
// CPU (best fit), so that whole nodes stay free for large pods.
//
// classic reproduces the published scorer as its authors' simulator runs it:
// sigmoid-squashed integer scores, ties to the first node in order, the mix cut to
// the shapes that make up 95% of pods (CPU-only shapes included), CPU but not
// memory in the fit of a shape.
type fgdPolicy struct {
	classic bool
}

// strandedWeight is the weight of GPU capacity stranded by CPU or memory: one, the
// same as any other fragment. (On openb, 0.25 to 2 give the same figures within
// noise; docs/benchmarks.md.)
const strandedWeight = 1

func (f *fgdPolicy) weighsScarcity() bool { return !f.classic }

func (f *fgdPolicy) compile(shapes []Shape, scarcity []float64, capacity clusterCapacity) workload {
	if f.classic {
		return compileWorkload(typicalShapes(shapes), nil, capacity, true, 0)
	}
	w := compileWorkload(shapes, scarcity, capacity, false, strandedWeight)
	w.withLeftover(leftoverWeight)
	return w
}

// typicalShapes is the published FGD's mix: shapes keyed by CPU and GPU demand
// only, the most frequent ones that together make up 95% of the pods.
func typicalShapes(shapes []Shape) []Shape {
	index := map[shapeKey]int{}
	var merged []Shape
	var total float64
	for _, s := range shapes {
		s.Requests = model.Resources{MilliCPU: s.Requests.MilliCPU}
		k := keyOfShape(s.Requests, s.GPU)
		total += s.Weight
		if i, ok := index[k]; ok {
			merged[i].Weight += s.Weight
			continue
		}
		index[k] = len(merged)
		merged = append(merged, s)
	}
	slices.SortStableFunc(merged, func(a, b Shape) int { return cmp.Compare(b.Weight, a.Weight) })
	var cum float64
	for i, s := range merged {
		cum += s.Weight
		if cum >= 0.95*total {
			return merged[:i+1]
		}
	}
	return merged
}

// fragOf returns the cached expected fragmentation of n as it is.
func (p *Placer) fragOf(c *nodeCache, n *model.Node) float64 {
	if !c.fragValid {
		free := n.Free()
		p.wfit = p.workload.fitWeights(free.MilliCPU, free.MemoryBytes, p.wfit)
		p.slots = loadSlots(n, p.slots)
		c.frag = p.workload.fragmentation(p.slots, n.GPUsByCountOnly, p.wfit, free.MilliCPU, free.MemoryBytes, ratiosOf(n))
		c.fragValid = true
	}
	return c.frag
}

func (f *fgdPolicy) rank(p *Placer, c *nodeCache, n *model.Node, q *podQuery) (rank, int) {
	before := p.fragOf(c, n)
	free := n.Free()
	cpuAfter, memAfter := free.MilliCPU-q.requests.MilliCPU, free.MemoryBytes-q.requests.MemoryBytes
	p.wfit = p.workload.fitWeights(cpuAfter, memAfter, p.wfit)
	slots := loadSlots(n, p.slots)
	p.slots = slots
	d := q.demand
	// score ranks the node with slots as they would be after the placement.
	score := func() rank {
		after := p.workload.fragmentation(slots, n.GPUsByCountOnly, p.wfit, cpuAfter, memAfter, ratiosOf(n))
		return f.score(before, after, slots, n, q)
	}

	switch {
	case q.chosen != nil:
		applyChosen(slots, n, q.chosen[n.Name])
		return score(), -1
	case d.Count == 0:
		return score(), -1
	case d.Whole():
		var buf [8]int
		for _, i := range wholeGPUs(n, d, buf[:0]) {
			slots[i].free, slots[i].idle = 0, false
		}
		return score(), -1
	case d.Count > 1:
		for _, i := range sharedGPUs(n, d) {
			slots[i].free -= d.BytesOn(&n.GPUs[i])
			slots[i].idle = false
		}
		return score(), -1
	}

	// A single share: try each GPU it fits on; GPUs in the same state score the same,
	// so each state is scored once.
	best, bestGPU := rank{}, -1
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !d.AcceptsModel(g.Model) || gpuFit(g, d) != gpuUsable || sameSlotEarlier(slots, i) {
			continue
		}
		saved := slots[i]
		slots[i].free -= d.BytesOn(g)
		slots[i].idle = false
		r := score()
		slots[i] = saved
		if bestGPU < 0 || r.less(best) {
			best, bestGPU = r, i
		}
	}
	return best, bestGPU
}

// score ranks a move from fragmentation before to after; slots are the node's GPUs
// after the move.
func (f *fgdPolicy) score(before, after float64, slots []gpuSlot, n *model.Node, q *podQuery) rank {
	if f.classic {
		// kube-scheduler scores are integers in 0..100, higher is better.
		return rank{-math.Trunc(100 / (1 + math.Exp(-(before-after)/1000)))}
	}
	// Rounded to a millionth of a milli-GPU so that equal moves computed in a
	// different order compare equal and fall to the tie-breaks.
	growth := math.Round((after-before)*1e6) / 1e6
	return rank{growth, freeGPUMilli(slots), cpuLeftFraction(n, q)}
}

// applyChosen takes GPUs chosen outside the core (Pod.DeviceChoices) out of a
// node's slots, as bindGPUs's choice is for other pods.
func applyChosen(slots []gpuSlot, n *model.Node, chosen []model.GPUBinding) {
	for _, b := range chosen {
		for i := range n.GPUs {
			if n.GPUs[i].Index != b.Index {
				continue
			}
			if b.Whole {
				slots[i].free = 0
			} else {
				slots[i].free -= b.MemoryBytes
			}
			slots[i].idle = false
		}
	}
}

// bindingMilli is how much GPU capacity a binding takes on g, in thousandths.
func bindingMilli(b model.GPUBinding, g *model.GPU) float64 {
	if b.Whole || g.MemoryBytes <= 0 {
		return model.MilliPerGPU
	}
	return float64(b.MemoryBytes) * model.MilliPerGPU / float64(g.MemoryBytes)
}

// sameSlotEarlier reports whether a GPU before position i is in the same state as
// GPU i, so scoring i again would only repeat a result.
func sameSlotEarlier(slots []gpuSlot, i int) bool {
	for j := 0; j < i; j++ {
		if slots[j] == slots[i] {
			return true
		}
	}
	return false
}

// freeGPUMilli is the free GPU capacity of a node in thousandths of a GPU.
func freeGPUMilli(slots []gpuSlot) float64 {
	var total float64
	for i := range slots {
		total += slots[i].milli()
	}
	return total
}

// placedMilli is how much GPU capacity the demand takes on g, in thousandths.
func placedMilli(d model.GPUDemand, g *model.GPU) float64 {
	if d.Whole() || g.MemoryBytes <= 0 {
		return model.MilliPerGPU
	}
	return float64(d.BytesOn(g)) * model.MilliPerGPU / float64(g.MemoryBytes)
}

// bestFitPolicy packs: the node left with the least free GPU capacity, then the GPU
// left with the least free memory, then the least free CPU.
type bestFitPolicy struct{}

func (bestFitPolicy) compile([]Shape, []float64, clusterCapacity) workload { return workload{} }
func (bestFitPolicy) weighsScarcity() bool                                 { return false }

func (bestFitPolicy) rank(p *Placer, _ *nodeCache, n *model.Node, q *podQuery) (rank, int) {
	gpuLeft, gpu, gpuSlack := gpuAfter(p, n, q, func(slack, best float64) bool { return slack < best })
	return rank{gpuLeft, gpuSlack, cpuLeftFraction(n, q)}, gpu
}

// spreadPolicy balances: the least allocated node (GPU, CPU and memory together),
// then the GPU with the most free memory.
type spreadPolicy struct{}

func (spreadPolicy) compile([]Shape, []float64, clusterCapacity) workload { return workload{} }
func (spreadPolicy) weighsScarcity() bool                                 { return false }

func (spreadPolicy) rank(p *Placer, _ *nodeCache, n *model.Node, q *podQuery) (rank, int) {
	gpuLeft, gpu, gpuSlack := gpuAfter(p, n, q, func(slack, best float64) bool { return slack > best })
	gpuCapacity := float64(len(n.GPUs)) * model.MilliPerGPU
	gpuFraction := 1.0
	if gpuCapacity > 0 {
		gpuFraction = gpuLeft / gpuCapacity
	}
	free := n.Free()
	memFraction := 1.0
	if n.Allocatable.MemoryBytes > 0 {
		memFraction = float64(free.MemoryBytes-q.requests.MemoryBytes) / float64(n.Allocatable.MemoryBytes)
	}
	return rank{-(gpuFraction + cpuLeftFraction(n, q) + memFraction), -gpuSlack}, gpu
}

// gpuAfter returns the node's free GPU capacity after placing the pod and, for a
// single share, the GPU that better(slack, best) prefers and its free capacity
// after (slack), both in thousandths of a GPU.
func gpuAfter(p *Placer, n *model.Node, q *podQuery, better func(slack, best float64) bool) (left float64, gpu int, slack float64) {
	p.slots = loadSlots(n, p.slots)
	left = freeGPUMilli(p.slots)
	d := q.demand
	switch {
	case q.chosen != nil:
		for _, b := range q.chosen[n.Name] {
			if g := n.GPUByIndex(b.Index); g != nil {
				left -= bindingMilli(b, g)
			}
		}
		return left, -1, 0
	case d.Count == 0:
		return left, -1, 0
	case d.Whole():
		return left - float64(d.Count)*model.MilliPerGPU, -1, 0
	case d.Count > 1:
		for _, i := range sharedGPUs(n, d) {
			left -= placedMilli(d, &n.GPUs[i])
		}
		return left, -1, 0
	}
	gpu = -1
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !d.AcceptsModel(g.Model) || gpuFit(g, d) != gpuUsable {
			continue
		}
		s := p.slots[i].milli() - placedMilli(d, g)
		if gpu < 0 || better(s, slack) {
			gpu, slack = i, s
		}
	}
	return left - placedMilli(d, &n.GPUs[gpu]), gpu, slack
}

func cpuLeftFraction(n *model.Node, q *podQuery) float64 {
	if n.Allocatable.MilliCPU <= 0 {
		return 0
	}
	return float64(n.Free().MilliCPU-q.requests.MilliCPU) / float64(n.Allocatable.MilliCPU)
}
