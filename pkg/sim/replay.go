package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// Config is one openb experiment: a cluster, a trace, and the policies and seeds to
// replay it with.
type Config struct {
	Nodes []*model.Node
	Tasks []Task
	// Policies are placement policy names (placement.New).
	Policies []string
	Seeds    []uint64
	// Inflate is the arrived GPU demand to reach, as a multiple of the cluster's GPU
	// capacity (1.3 in the published protocol).
	Inflate float64
	// Workers replays this many seeds at once; 0 uses every CPU.
	Workers int
	// Progress, when set, is called with tasks replayed so far and in all.
	Progress func(done, total int64)
	// OracleMix, for research only, gives the placer the whole trace's mix before
	// the first arrival, as the authors' simulator does. By default the placer
	// learns the mix from the tasks that have arrived so far, as the scheduler
	// does (placement.NewOnline).
	OracleMix bool
}

// Checkpoints are the arrived percentages reported for an inflation: 90, 95, 100,
// then every 10 up to the inflation.
func Checkpoints(inflate float64) []int {
	points := []int{90, 95, 100}
	for p := 110; float64(p) <= math.Round(inflate*100); p += 10 {
		points = append(points, p)
	}
	return points
}

// Run is the outcome of one policy on one seed.
type Run struct {
	Policy string
	Seed   uint64
	// Unallocated[x] is 100 - allocated GPU % once x% of the cluster's GPU capacity
	// has arrived (x = 0 .. round(inflate*100)).
	Unallocated []float64
	Tasks       int
	Placed      int
	Failed      int
}

// Result is every run of an experiment, policies in Config order, seeds in order.
type Result struct {
	CapacityMilli int64
	Runs          []Run
}

// Replay runs the openb protocol for every policy and seed: shuffle the tasks,
// append tasks drawn with replacement until the requested GPU reaches Inflate times
// the capacity, then place them one at a time in that order with no retries. The
// nodes too are shuffled per seed: equal scores go to the first node in order, as
// in kube-scheduler, which breaks ties by node name, and the authors' simulator,
// which shuffles node names per seed.
func Replay(ctx context.Context, cfg Config) (Result, error) {
	if cfg.Inflate <= 0 {
		return Result{}, fmt.Errorf("inflate must be positive, got %v", cfg.Inflate)
	}
	if len(cfg.Tasks) == 0 {
		return Result{}, fmt.Errorf("the trace has no tasks")
	}
	for _, name := range cfg.Policies {
		if _, err := placement.New(name); err != nil {
			return Result{}, err
		}
	}
	var capacity int64
	for _, n := range cfg.Nodes {
		capacity += int64(len(n.GPUs)) * model.MilliPerGPU
	}
	if capacity == 0 {
		return Result{}, fmt.Errorf("the cluster has no GPUs")
	}
	pods := make([]*model.Pod, len(cfg.Tasks))
	for i, t := range cfg.Tasks {
		pods[i] = t.Pod()
	}
	var shapes []placement.Shape
	if cfg.OracleMix {
		shapes = placement.ShapesOf(pods)
	}

	orders := make([][]int, len(cfg.Seeds))
	clusters := make([]*model.Snapshot, len(cfg.Seeds))
	var total int64
	for i, seed := range cfg.Seeds {
		orders[i] = arrivalOrder(cfg.Tasks, seed, float64(capacity)*cfg.Inflate)
		clusters[i] = shuffledCluster(cfg.Nodes, seed)
		total += int64(len(orders[i]) * len(cfg.Policies))
	}

	type job struct{ policy, seed int }
	jobs := make(chan job)
	runs := make([]Run, len(cfg.Policies)*len(cfg.Seeds))
	errs := make([]error, len(runs))
	var done atomic.Int64
	workers := cfg.Workers
	if workers <= 0 {
		workers = runtime.GOMAXPROCS(0)
	}
	var wg sync.WaitGroup
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				k := j.policy*len(cfg.Seeds) + j.seed
				r := replayOne(ctx, clusters[j.seed], pods, cfg.Tasks, orders[j.seed], capacity, cfg.Inflate, cfg.Policies[j.policy], shapes, func() {
					if d := done.Add(1); cfg.Progress != nil && d%256 == 0 {
						cfg.Progress(d, total)
					}
				})
				r.Seed = cfg.Seeds[j.seed]
				runs[k] = r
				errs[k] = ctx.Err()
			}
		}()
	}
	// Longest first is moot: every job replays about as many tasks.
	for p := range cfg.Policies {
		for s := range cfg.Seeds {
			jobs <- job{p, s}
		}
	}
	close(jobs)
	wg.Wait()
	if cfg.Progress != nil {
		cfg.Progress(total, total)
	}
	for _, err := range errs {
		if err != nil {
			return Result{}, err
		}
	}
	return Result{CapacityMilli: capacity, Runs: runs}, nil
}

// arrivalOrder is the protocol's task order for a seed: a shuffle of all tasks,
// then tasks drawn with replacement until the requested GPU reaches target milli.
func arrivalOrder(tasks []Task, seed uint64, target float64) []int {
	rng := rand.New(rand.NewPCG(seed, 0))
	order := rng.Perm(len(tasks))
	var requested float64
	for _, i := range order {
		requested += float64(tasks[i].RequestedGPUMilli())
	}
	hasGPU := false
	for _, t := range tasks {
		hasGPU = hasGPU || t.RequestedGPUMilli() > 0
	}
	for hasGPU && requested < target {
		i := rng.IntN(len(tasks))
		order = append(order, i)
		requested += float64(tasks[i].RequestedGPUMilli())
	}
	return order
}

// shuffledCluster is the cluster with its nodes in the seed's order.
func shuffledCluster(nodes []*model.Node, seed uint64) *model.Snapshot {
	s := model.NewSnapshot()
	for _, i := range rand.New(rand.NewPCG(seed, 1)).Perm(len(nodes)) {
		s.AddNode(nodes[i])
	}
	return s
}

// NewPlacer builds the placer a replay runs: the scheduler's own
// (placement.NewOnline, as pkg/scheduler builds it), or, with oracle shapes, one
// that knows the mix in advance.
func NewPlacer(policy string, oracle []placement.Shape) (*placement.Placer, error) {
	if oracle == nil {
		return placement.NewOnline(policy)
	}
	p, err := placement.New(policy)
	if err == nil {
		p.SetWorkload(oracle)
	}
	return p, err
}

// replayOne places tasks in order with one policy on a fresh view of the cluster.
// The snapshot is shared between concurrent replays: a View never writes it unless
// committed, and this replay never commits. The placer learns each task as it
// arrives, before placing it, as the scheduler sees a pod pending before it places
// it.
func replayOne(ctx context.Context, s *model.Snapshot, pods []*model.Pod, tasks []Task, order []int, capacity int64, inflate float64, policy string, oracle []placement.Shape, tick func()) Run {
	placer, _ := NewPlacer(policy, oracle) // validated by Replay
	view := placement.NewView(s)
	last := int(math.Round(inflate * 100))
	run := Run{Policy: policy, Unallocated: make([]float64, last+1), Tasks: len(order)}
	for x := range run.Unallocated {
		run.Unallocated[x] = math.NaN()
	}
	run.Unallocated[0] = 100
	var arrived, allocated int64
	next := 1 // the next arrived percentage to record
	for k, i := range order {
		if k%512 == 0 && ctx.Err() != nil {
			return run
		}
		pod := pods[i]
		arrived += tasks[i].RequestedGPUMilli()
		placer.Arrive(pod)
		if pl, u := placer.PlacePod(view, pod); u == nil {
			view.Assign(pod, pl)
			allocated += tasks[i].RequestedGPUMilli()
			run.Placed++
		} else {
			run.Failed++
		}
		unallocated := 100 - 100*float64(allocated)/float64(capacity)
		for next <= last && arrived*100 >= int64(next)*capacity {
			run.Unallocated[next] = unallocated
			next++
		}
		tick()
	}
	// Rounding can leave the last percentage a hair out of reach; the end state is
	// its value.
	final := 100 - 100*float64(allocated)/float64(capacity)
	for ; next <= last; next++ {
		run.Unallocated[next] = final
	}
	return run
}
