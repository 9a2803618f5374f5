package placement

import (
	"math"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// TestLeftoverTermPairsSharesThatFillAGPU: a mix of 470 and 320 thousandths shares
// (7 to 3), a node whose GPU 0 holds a 470 (530 free) and GPU 1 a 320 (680 free),
// and a 320 arrives. Published FGD puts it on GPU 0: what it leaves there (210) no
// shape can use, but neither can the 470s use GPU 1's 360 afterwards, and they are
// most of the mix (growth 210 against 0.7 × 360 = 252). The leftover term sees that
// GPU 0's 530 was worth 60 of waste to the next 470, and GPU 1's 360 is worth 40 to
// the next 320: GPU 1, where the three 320s fill the GPU (growth 41.4 against 105).
func TestLeftoverTermPairsSharesThatFillAGPU(t *testing.T) {
	const mem = 16_000_000_000
	n := gpuNode("n", 2, "T4", mem)
	n.GPUs[0].AllocatedBytes, n.GPUs[0].Sharers = mem*470/1000, 1
	n.GPUs[1].AllocatedBytes, n.GPUs[1].Sharers = mem*320/1000, 1
	share := func(milli int64, w float64) Shape {
		return Shape{GPU: model.GPUDemand{Count: 1, FractionMilli: milli}, Weight: w}
	}
	mix := []Shape{share(470, 7), share(320, 3)}

	p, _ := New("")
	p.SetWorkload(mix)
	pl, u := p.PlacePod(NewView(snapshotOf(n)), sharePod("p", 320, 0, 0))
	if u != nil {
		t.Fatalf("PlacePod: %s", u.Message)
	}
	if len(pl.GPUs) != 1 || pl.GPUs[0].Index != 1 {
		t.Fatalf("the 320 share went to GPU %v, want GPU 1 (the one holding a 320): GPU 0 would keep 210 that no pod of the mix uses", pl.GPUs)
	}

	// The same numbers, by the measure itself: fragmentation before, after either
	// placement, in thousandths of a GPU.
	w := compileWorkload(mix, nil, clusterCapacity{}, false, 0)
	w.withLeftover(leftoverWeight)
	wfit := w.fitWeights(math.MaxInt64, math.MaxInt64, nil)
	frag := func(free ...int64) float64 {
		slots := make([]gpuSlot, len(free))
		for i, f := range free {
			slots[i] = gpuSlot{model: "T4", memory: mem, free: mem / 1000 * f}
		}
		return w.fragmentation(slots, false, wfit, math.MaxInt64, math.MaxInt64, nodeRatios{})
	}
	before := 0.7*60 + 0.3*210 + 0.7*210 + 0.3*0.7*360
	for _, c := range []struct {
		name string
		got  float64
		want float64
	}{
		{"before", frag(530, 680), before},
		{"after, on GPU 0", frag(210, 680) - before, 105},
		{"after, on GPU 1", frag(530, 360) - before, 41.4},
	} {
		if math.Abs(c.got-c.want) > 1e-6 {
			t.Errorf("%s: fragmentation %v, want %v", c.name, c.got, c.want)
		}
	}
}
