package sim

import (
	"fmt"
	"math"
	"math/rand/v2"
	"sort"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
)

// RemixKinds are the families of openb traces the FGD authors published, each of
// which varies one knob of the default trace (multigpu20..50, gpushare40..100,
// gpuspec10..33, cpu050..250). Remix rebuilds them from the default trace, so that a
// policy is checked on mixes other than the three in ../shared.
var RemixKinds = []string{"multigpu", "gpushare", "gpuspec", "cpu"}

// ParseRemix reads a family name as the authors spell it, "multigpu30",
// "gpushare80", "gpuspec33" (percent) or "cpu250" (per mille), or "KIND=FRACTION",
// e.g. "multigpu=0.3".
func ParseRemix(spec string) (kind string, fraction float64, err error) {
	bad := fmt.Errorf("remix %q: want a family such as multigpu30, gpushare80, gpuspec33 or cpu250, or KIND=FRACTION with FRACTION in [0, 1] and KIND one of %s", spec, strings.Join(RemixKinds, ", "))
	kind, value, ok := strings.Cut(spec, "=")
	if ok {
		fraction, err = strconv.ParseFloat(value, 64)
	} else {
		kind = strings.TrimRight(spec, "0123456789")
		value = spec[len(kind):]
		var n int
		n, err = strconv.Atoi(value)
		fraction = float64(n) / 100
		if kind == "cpu" {
			fraction = float64(n) / 1000
		}
	}
	if value == "" || err != nil || fraction < 0 || fraction > 1 {
		return "", 0, bad
	}
	for _, k := range RemixKinds {
		if k == kind {
			return kind, fraction, nil
		}
	}
	return "", 0, bad
}

// Remix rebuilds a family trace from a trace, as the authors built theirs (their
// gpushare40 and gpushare80 files show how: the CPU-only tasks kept as they are,
// as many GPU tasks as before, each drawn with replacement from the trace's own):
//
//   - "multigpu" and "gpushare": the multi-GPU (or GPU-sharing) tasks make up
//     fraction of the GPU requested; the GPU tasks are redrawn, that many from
//     those tasks and the rest from the other GPU tasks;
//   - "gpuspec": fraction of the GPU tasks are restricted to one GPU model, drawn
//     in proportion to the cluster's GPUs of that model among the models with
//     nodes big enough for the task;
//   - "cpu": the CPU-only tasks are redrawn until they are fraction of all tasks
//     (cpu050: 5 %, cpu250: 25 %; the default trace has 13 %), so that their CPU
//     demand grows with it; GPU tasks stay as they are.
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
		drawn := drawByGPUShare(rng, inside, outside, len(inside)+len(outside), fraction)
		for _, t := range tasks {
			if t.NumGPU > 0 {
				t = drawn[0]
				t.Name = fmt.Sprintf("%s-remix-%d", t.Name, len(out))
				drawn = drawn[1:]
			}
			out = append(out, t)
		}
	case "cpu":
		var cpuOnly []Task
		for _, t := range tasks {
			if t.NumGPU == 0 {
				cpuOnly = append(cpuOnly, t)
			} else {
				out = append(out, t)
			}
		}
		if len(cpuOnly) == 0 || fraction >= 1 {
			return nil, fmt.Errorf("remix cpu: needs CPU-only tasks in the trace and a fraction below 1")
		}
		for n := int(math.Round(fraction / (1 - fraction) * float64(len(out)))); n > 0; n-- {
			t := cpuOnly[rng.IntN(len(cpuOnly))]
			t.Name = fmt.Sprintf("%s-remix-%d", t.Name, len(out))
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

// drawByGPUShare draws n tasks with replacement, so many from inside that they make
// up about fraction of the GPU requested, the rest from outside, and shuffles them.
func drawByGPUShare(rng *rand.Rand, inside, outside []Task, n int, fraction float64) []Task {
	mean := func(ts []Task) float64 {
		var sum float64
		for _, t := range ts {
			sum += float64(t.RequestedGPUMilli())
		}
		return sum / float64(len(ts))
	}
	in, out := mean(inside), mean(outside)
	// k·in / (k·in + (n−k)·out) = fraction
	k := int(math.Round(fraction * float64(n) * out / (in*(1-fraction) + fraction*out)))
	drawn := make([]Task, 0, n)
	for i := 0; i < n; i++ {
		from := outside
		if i < k {
			from = inside
		}
		drawn = append(drawn, from[rng.IntN(len(from))])
	}
	rng.Shuffle(len(drawn), func(i, j int) { drawn[i], drawn[j] = drawn[j], drawn[i] })
	return drawn
}
