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

// Remix rebuilds a family trace from a trace as the authors built theirs from the
// default one (their files in github.com/alibaba/clusterdata, cluster-trace-gpu-v2023,
// show how):
//
//   - "gpushare": GPU-sharing tasks request fraction of the GPU requested. The
//     GPU tasks are redrawn with replacement, as many as before, that many from the
//     sharing tasks and the rest from the other GPU tasks; CPU-only tasks are kept
//     (gpushare40 and gpushare80 have the default's 7,064 GPU and 1,088 CPU-only
//     tasks, shuffled).
//   - "multigpu": multi-GPU tasks request fraction of the GPU requested. Every task
//     is kept and multi-GPU tasks drawn with replacement from the trace's own are
//     added until they do (multigpu50 is the default's 8,152 tasks followed by 909
//     multi-GPU ones); a fraction below the trace's drops multi-GPU tasks instead.
//   - "cpu": CPU-only tasks are fraction of all tasks (cpu050: 5 %, cpu250: 25 %;
//     the default has 13 %). GPU tasks are kept; CPU-only tasks drawn with
//     replacement are added (cpu250 has 9,420 tasks), or a random subset of them is
//     kept (cpu050 has 7,439).
//   - "gpuspec": fraction of the GPU tasks, chosen at random, may run only on some
//     GPU models, drawn from the constraints of the authors' gpuspec33, which are
//     production's (see productionSpecs).
func Remix(tasks []Task, nodes []*model.Node, kind string, fraction float64, seed uint64) ([]Task, error) {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	switch kind {
	case "gpushare":
		return remixShare(rng, tasks, fraction)
	case "multigpu":
		return remixMulti(rng, tasks, fraction)
	case "cpu":
		return remixCPU(rng, tasks, fraction)
	case "gpuspec":
		return remixSpec(rng, tasks, nodes, fraction), nil
	}
	return nil, fmt.Errorf("remix: unknown kind %q, want one of %s", kind, strings.Join(RemixKinds, ", "))
}

func isShare(t Task) bool { return t.NumGPU == 1 && t.GPUMilli < model.MilliPerGPU }
func isMulti(t Task) bool { return t.NumGPU > 1 }

// renamed is t with a name that says it was drawn by a remix.
func renamed(t Task, i int) Task {
	t.Name = fmt.Sprintf("%s-remix-%d", t.Name, i)
	return t
}

func remixShare(rng *rand.Rand, tasks []Task, fraction float64) ([]Task, error) {
	var inside, outside []Task
	for _, t := range tasks {
		switch {
		case t.NumGPU == 0:
		case isShare(t):
			inside = append(inside, t)
		default:
			outside = append(outside, t)
		}
	}
	if len(inside) == 0 || len(outside) == 0 {
		return nil, fmt.Errorf("remix gpushare: the trace needs GPU tasks that share a GPU and GPU tasks that do not")
	}
	drawn := drawByGPUShare(rng, inside, outside, len(inside)+len(outside), fraction)
	out := make([]Task, 0, len(tasks))
	for _, t := range tasks {
		if t.NumGPU > 0 {
			t = renamed(drawn[0], len(out))
			drawn = drawn[1:]
		}
		out = append(out, t)
	}
	return out, nil
}

// drawByGPUShare draws n tasks with replacement, so many from inside that they make
// up about fraction of the GPU requested, the rest from outside, and shuffles them.
func drawByGPUShare(rng *rand.Rand, inside, outside []Task, n int, fraction float64) []Task {
	in, out := meanGPU(inside), meanGPU(outside)
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

func meanGPU(ts []Task) float64 {
	var sum float64
	for _, t := range ts {
		sum += float64(t.RequestedGPUMilli())
	}
	return sum / float64(len(ts))
}

func remixMulti(rng *rand.Rand, tasks []Task, fraction float64) ([]Task, error) {
	var multi []Task
	var multiGPU, otherGPU float64
	for _, t := range tasks {
		if isMulti(t) {
			multi = append(multi, t)
			multiGPU += float64(t.RequestedGPUMilli())
		} else {
			otherGPU += float64(t.RequestedGPUMilli())
		}
	}
	if len(multi) == 0 || otherGPU == 0 && fraction < 1 || otherGPU > 0 && fraction >= 1 {
		return nil, fmt.Errorf("remix multigpu: the trace needs multi-GPU tasks and other GPU tasks, and a fraction below 1")
	}
	if fraction == 1 {
		return append([]Task(nil), multi...), nil
	}
	target := fraction * otherGPU / (1 - fraction)
	if target < multiGPU {
		// Drop multi-GPU tasks at random until they request no more than target.
		drop := map[int]bool{}
		order := rng.Perm(len(tasks))
		for _, i := range order {
			if multiGPU <= target {
				break
			}
			if isMulti(tasks[i]) {
				drop[i] = true
				multiGPU -= float64(tasks[i].RequestedGPUMilli())
			}
		}
		out := make([]Task, 0, len(tasks)-len(drop))
		for i, t := range tasks {
			if !drop[i] {
				out = append(out, t)
			}
		}
		return out, nil
	}
	out := append([]Task(nil), tasks...)
	for multiGPU < target {
		t := multi[rng.IntN(len(multi))]
		out = append(out, renamed(t, len(out)))
		multiGPU += float64(t.RequestedGPUMilli())
	}
	return out, nil
}

func remixCPU(rng *rand.Rand, tasks []Task, fraction float64) ([]Task, error) {
	var cpuOnly []int
	for i, t := range tasks {
		if t.NumGPU == 0 {
			cpuOnly = append(cpuOnly, i)
		}
	}
	gpuTasks := len(tasks) - len(cpuOnly)
	if len(cpuOnly) == 0 || fraction >= 1 {
		return nil, fmt.Errorf("remix cpu: needs CPU-only tasks in the trace and a fraction below 1")
	}
	want := int(math.Round(fraction / (1 - fraction) * float64(gpuTasks)))
	if want <= len(cpuOnly) {
		// Keep a random subset, in the trace's order.
		drop := map[int]bool{}
		for _, k := range rng.Perm(len(cpuOnly))[:len(cpuOnly)-want] {
			drop[cpuOnly[k]] = true
		}
		out := make([]Task, 0, gpuTasks+want)
		for i, t := range tasks {
			if !drop[i] {
				out = append(out, t)
			}
		}
		return out, nil
	}
	out := append([]Task(nil), tasks...)
	for n := want - len(cpuOnly); n > 0; n-- {
		out = append(out, renamed(tasks[cpuOnly[rng.IntN(len(cpuOnly))]], len(out)))
	}
	return out, nil
}

// productionSpecs are the GPU-model constraints of the authors' gpuspec33 trace,
// which carries production's own ("about 33 % of GPU tasks in our production
// cluster have GPU type constraints"), with how many of 121 constrained tasks had
// each, counted in two stretches of that file (pods 0000-0219 and 4172-4393). T4
// nodes hold 14 % of the cluster's GPUs but are asked for by half the constrained
// tasks, which is why every policy leaves much more unallocated on gpuspec33.
var productionSpecs = []struct {
	models string
	count  float64
}{
	{"T4", 64}, {"V100M16|V100M32", 17}, {"P100", 13}, {"G2", 13},
	{"P100|V100M16|V100M32", 5}, {"G3", 3}, {"G2|P100|T4|V100M16|V100M32", 3},
	{"P100|T4|V100M16|V100M32", 2}, {"V100M32", 1},
}

// remixSpec restricts a fraction of the GPU tasks to GPU models. Each gets a
// production constraint that some node of the cluster, empty, can satisfy, drawn
// by the constraint's frequency; where none can (a cluster without openb's models),
// one model, drawn in proportion to its GPUs among the models with a node that
// fits the task.
func remixSpec(rng *rand.Rand, tasks []Task, nodes []*model.Node, fraction float64) []Task {
	out := append([]Task(nil), tasks...)
	var gpuTasks []int
	for i, t := range out {
		if t.NumGPU > 0 && len(t.Models) == 0 {
			gpuTasks = append(gpuTasks, i)
		}
	}
	rng.Shuffle(len(gpuTasks), func(i, j int) { gpuTasks[i], gpuTasks[j] = gpuTasks[j], gpuTasks[i] })
	gpuTasks = gpuTasks[:int(math.Round(fraction*float64(len(gpuTasks))))]
	sort.Ints(gpuTasks)
	for _, i := range gpuTasks {
		t := &out[i]
		type option struct {
			models []string
			weight float64
		}
		var options []option
		for _, s := range productionSpecs {
			models := strings.Split(s.models, "|")
			if fitsSome(*t, nodes, models) {
				options = append(options, option{models, s.count})
			}
		}
		if len(options) == 0 {
			gpusByModel := map[string]float64{}
			for _, n := range nodes {
				if len(n.GPUs) > 0 && fitsSome(*t, []*model.Node{n}, []string{n.GPUs[0].Model}) {
					gpusByModel[n.GPUs[0].Model] += float64(len(n.GPUs))
				}
			}
			for m, g := range gpusByModel {
				options = append(options, option{[]string{m}, g})
			}
			sort.Slice(options, func(a, b int) bool { return options[a].models[0] < options[b].models[0] })
		}
		if len(options) == 0 {
			continue // no node can take the task: leave it unconstrained
		}
		var total float64
		for _, o := range options {
			total += o.weight
		}
		pick := rng.Float64() * total
		t.Models = options[len(options)-1].models
		for _, o := range options {
			if pick < o.weight {
				t.Models = o.models
				break
			}
			pick -= o.weight
		}
	}
	return out
}

// fitsSome reports whether some node with GPUs of one of models could take t when
// empty: enough GPUs, CPU and memory.
func fitsSome(t Task, nodes []*model.Node, models []string) bool {
	for _, n := range nodes {
		if len(n.GPUs) < t.NumGPU || len(n.GPUs) == 0 || n.Allocatable.MilliCPU < t.MilliCPU || n.Allocatable.MemoryBytes < t.MemoryBytes {
			continue
		}
		for _, m := range models {
			if n.GPUs[0].Model == m {
				return true
			}
		}
	}
	return false
}
