package sim

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
)

// RemixKinds are the mixes Remix can make, after the families of openb traces the
// FGD authors published (multigpu20..50, gpushare40..100, gpuspec10..33): trace
// mixes that are not the three in ../shared, to check that a policy is general.
var RemixKinds = []string{"multigpu", "gpushare", "gpuspec"}

// ParseRemix reads "KIND=FRACTION", e.g. "multigpu=0.3".
func ParseRemix(spec string) (kind string, fraction float64, err error) {
	kind, value, ok := strings.Cut(spec, "=")
	if ok {
		fraction, err = strconv.ParseFloat(value, 64)
	}
	if !ok || err != nil || fraction < 0 || fraction > 1 {
		return "", 0, fmt.Errorf("remix %q: want KIND=FRACTION with FRACTION in [0, 1], KIND one of %s", spec, strings.Join(RemixKinds, ", "))
	}
	for _, k := range RemixKinds {
		if k == kind {
			return kind, fraction, nil
		}
	}
	return "", 0, fmt.Errorf("remix %q: unknown kind, want one of %s", spec, strings.Join(RemixKinds, ", "))
}

// Remix resamples a trace into another mix with as many tasks. CPU-only tasks stay
// as they are. For "multigpu" and "gpushare", each GPU task is redrawn, with
// replacement, from the multi-GPU (or GPU-sharing) tasks with probability
// fraction and from the other GPU tasks otherwise. For "gpuspec", each GPU task is,
// with probability fraction, restricted to one GPU model, drawn in proportion to
// the cluster's GPUs of that model among the models with nodes big enough for it.
func Remix(tasks []Task, nodes []*model.Node, kind string, fraction float64, seed uint64) ([]Task, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	out := make([]Task, 0, len(tasks))
	switch kind {
	case "multigpu", "gpushare":
		in := func(t Task) bool { return t.NumGPU > 1 }
		if kind == "gpushare" {
			in = func(t Task) bool { return t.NumGPU == 1 && t.GPUMilli < model.MilliPerGPU }
		}
		var inside, outside []Task
		for _, t := range tasks {
			switch {
			case t.NumGPU == 0:
			case in(t):
				inside = append(inside, t)
			default:
				outside = append(outside, t)
			}
		}
		if len(inside) == 0 || len(outside) == 0 {
			return nil, fmt.Errorf("remix %s: the trace needs GPU tasks of both kinds", kind)
		}
		for i, t := range tasks {
			if t.NumGPU > 0 {
				from := outside
				if rng.Float64() < fraction {
					from = inside
				}
				t = from[rng.IntN(len(from))]
				t.Name = fmt.Sprintf("%s-remix-%d", t.Name, i)
			}
			out = append(out, t)
		}
	case "gpuspec":
		gpusByModel := map[string]int{}
		biggestNode := map[string]int{}
		for _, n := range nodes {
			if len(n.GPUs) == 0 {
				continue
			}
			m := n.GPUs[0].Model
			gpusByModel[m] += len(n.GPUs)
			biggestNode[m] = max(biggestNode[m], len(n.GPUs))
		}
		models := make([]string, 0, len(gpusByModel))
		for m := range gpusByModel {
			models = append(models, m)
		}
		sort.Strings(models)
		for _, t := range tasks {
			if t.NumGPU > 0 && len(t.Models) == 0 && rng.Float64() < fraction {
				total := 0
				for _, m := range models {
					if biggestNode[m] >= t.NumGPU {
						total += gpusByModel[m]
					}
				}
				pick := rng.IntN(max(total, 1))
				for _, m := range models {
					if biggestNode[m] < t.NumGPU {
						continue
					}
					if pick < gpusByModel[m] {
						t.Models = []string{m}
						break
					}
					pick -= gpusByModel[m]
				}
			}
			out = append(out, t)
		}
	default:
		return nil, fmt.Errorf("remix: unknown kind %q, want one of %s", kind, strings.Join(RemixKinds, ", "))
	}
	return out, nil
}
