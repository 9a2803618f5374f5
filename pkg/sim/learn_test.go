package sim

import (
	"context"
	"fmt"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// The simulator's default placer is the scheduler's: same constructor, same policy,
// learning the mix online with the same half-life.
func TestSimulatorBuildsTheSchedulersPlacer(t *testing.T) {
	sched, err := scheduler.New("", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	simPlacer, err := NewPlacer(placement.DefaultPolicy, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := simPlacer.Settings(), sched.Placer.Settings(); got != want || !got.LearnsMix {
		t.Fatalf("simulator placer = %+v, scheduler placer = %+v; want the same, learning online", got, want)
	}
	oracle, _ := NewPlacer(placement.DefaultPolicy, []placement.Shape{{GPU: model.GPUDemand{Count: 1}, Weight: 1}})
	if oracle.Settings().LearnsMix {
		t.Fatal("the oracle placer learns; it should keep the mix it was given")
	}
}

// TestNodeOrderIsShuffledPerSeed: ties go to the first node in order, and the
// order is the seed's. Node a takes only "any" tasks usefully: with a fixed order
// [a, b], a task that accepts any model always lands on a, and a later task that
// needs model A then fails whenever the any-task came first. Shuffled per seed,
// the any-task sometimes lands on b, and both fit.
func TestNodeOrderIsShuffledPerSeed(t *testing.T) {
	nodes := []*model.Node{tinyNode("a", "A"), tinyNode("b", "B")}
	tasks := []Task{{Name: "any", NumGPU: 1, GPUMilli: 1000}, {Name: "needs-a", NumGPU: 1, GPUMilli: 1000, Models: []string{"A"}}}
	var seeds []uint64
	for s := uint64(1); s <= 40; s++ {
		seeds = append(seeds, s)
	}
	res, err := Replay(context.Background(), Config{Nodes: nodes, Tasks: tasks, Policies: []string{"bestfit"}, Seeds: seeds, Inflate: 1, Workers: 1})
	if err != nil {
		t.Fatal(err)
	}
	outcomes := map[string]int{}
	for _, run := range res.Runs {
		if order := arrivalOrder(tasks, run.Seed, 2000); order[0] == 0 {
			outcomes[fmt.Sprintf("any first, %d failed", run.Failed)]++
		}
	}
	if outcomes["any first, 0 failed"] == 0 || outcomes["any first, 1 failed"] == 0 {
		t.Fatalf("with the any-task first, outcomes by seed = %v; want both, as the node order changes with the seed", outcomes)
	}
}

func tinyNode(name, gpuModel string) *model.Node {
	return &model.Node{
		Name: name, Labels: map[string]string{"kubernetes.io/hostname": name},
		Allocatable: model.Resources{MilliCPU: 8000, MemoryBytes: 1 << 34, Pods: 100},
		GPUs:        []model.GPU{{Index: 0, Model: gpuModel, MemoryBytes: 16_000_000_000, LiveFreeBytes: model.UnknownBytes, Healthy: true}},
	}
}

// TestReplayLearnsOnlyFromArrivals: the default replay learns the mix from the
// tasks that have arrived, and only from them. Two nodes of 2 GPUs, one with 16
// cores, one with 64; a CPU-only task of 8 cores and four GPU tasks of 8 cores
// each. All fit only if the CPU-only task goes to cpu-rich.
func TestReplayLearnsOnlyFromArrivals(t *testing.T) {
	s := model.NewSnapshot()
	for _, n := range []struct {
		name string
		cpu  int64
	}{{"cpu-poor", 16000}, {"cpu-rich", 64000}} {
		node := tinyNode(n.name, "A")
		node.Allocatable.MilliCPU = n.cpu
		node.GPUs = append(node.GPUs, node.GPUs[0])
		node.GPUs[1].Index = 1
		s.AddNode(node)
	}
	tasks := []Task{{Name: "etl", MilliCPU: 8000}}
	for i := 0; i < 4; i++ {
		tasks = append(tasks, Task{Name: fmt.Sprint("train-", i), MilliCPU: 8000, NumGPU: 1, GPUMilli: 1000})
	}
	pods := make([]*model.Pod, len(tasks))
	for i, task := range tasks {
		pods[i] = task.Pod()
	}
	replay := func(order []int, oracle []placement.Shape) int {
		return replayOne(context.Background(), s, pods, tasks, order, 4000, 1, "fgd", oracle, func() {}).Failed
	}
	// CPU-only task first: the oracle knows the GPU tasks' 8 cores per GPU and sends
	// it to cpu-rich; online, nothing has told the placer yet, it takes half of
	// cpu-poor's CPU, and a GPU there is stranded.
	first := []int{0, 1, 2, 3, 4}
	if oracle, online := replay(first, placement.ShapesOf(pods)), replay(first, nil); oracle != 0 || online != 1 {
		t.Fatalf("CPU-only task first, failed tasks: oracle %d, online %d; want 0 and 1 (online cannot know what has not arrived)", oracle, online)
	}
	// After one GPU task has arrived, the online placer knows 8 cores per GPU.
	if online := replay([]int{1, 0, 2, 3, 4}, nil); online != 0 {
		t.Fatalf("CPU-only task second, %d failed online; want 0 (the first arrival taught the CPU per GPU)", online)
	}
}
