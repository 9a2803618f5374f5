package placement

import "github.com/gantry-dev/gantry/pkg/model"

// weighBoundByFreeCapacity sets the scarcity of each model-bound GPU shape (one that
// may run only on some GPU models) from the cluster as it is now rather than as it
// is empty: the cluster's free GPU capacity over the free capacity of the GPUs the
// shape could take now, at most maxScarcity (maxScarcity when it could take none).
//
// A bound shape can use only its models' GPUs, and other pods fill those while the
// rest of the cluster fills at its own pace, so the share of the free capacity it
// can use drifts away from what it was when the cluster was empty: on openb's
// gpuspec25 (a quarter of the GPU tasks bound to models), the T4 and P100 nodes
// that half the bound tasks need fill first, and a scarcity taken from the empty
// cluster weighs those tasks too little once they do (seed 42: 6.64 % of the GPUs
// left unallocated at 100 % arrived, 6.39 % with this). It is computed when the mix
// is compiled (every 256 arrivals at most, and once per snapshot), from the GPU
// part of each bound demand only, so it costs a pass over the GPUs per bound
// demand. Unbound shapes keep the empty cluster's scarcity: weighing every shape
// so (tried in session 7) left gpushare80 where it was (10.52 % against 10.54 %,
// seed 42) and made the replay 2.5 times slower. A mix without bound shapes is
// scored exactly as before.
func (p *Placer) weighBoundByFreeCapacity(v *View, scarcity []float64) {
	demands := map[shapeKey]model.GPUDemand{}
	for i, s := range p.shapes {
		if s.GPU.Count > 0 && len(s.GPU.Models) > 0 && scarcity[i] > 0 {
			demands[keyOfShape(model.Resources{}, s.GPU)] = s.GPU
		}
	}
	if len(demands) == 0 {
		return
	}
	usable := make(map[shapeKey]float64, len(demands))
	var total float64
	var slots []gpuSlot
	for _, n := range v.nodes {
		if len(n.GPUs) == 0 || n.Unschedulable {
			continue
		}
		slots = loadSlots(n, slots)
		for i := range slots {
			total += slots[i].milli()
		}
		for k, d := range demands {
			takes, free := 0, 0.0
			for i := range slots {
				if slots[i].takes(&d) {
					takes++
					free += slots[i].milli()
				}
			}
			if takes >= d.Count {
				usable[k] += free
			}
		}
	}
	if total == 0 {
		return
	}
	for i, s := range p.shapes {
		k := keyOfShape(model.Resources{}, s.GPU)
		if _, bound := demands[k]; !bound || scarcity[i] == 0 {
			continue
		}
		f := float64(maxScarcity)
		if u := usable[k]; u > 0 {
			f = min(total/u, maxScarcity)
		}
		scarcity[i] = f
	}
}
