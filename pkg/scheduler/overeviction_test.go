package scheduler_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// TestOverEvictionBurst is issue 19's burst in the core, through whole cycles: 8 nodes
// × 8 GPUs full of 16 training gangs of 4 one-GPU workers, then a burst of 1, 8 or 32
// inference gangs at once (one GPU, or a share), with victims lingering two cycles
// while they terminate and their pods coming back pending, as KubeRay recreates them.
// It reports GPU memory freed ÷ the burst's shortfall (what it needed and was not
// free) and the floor no victim choice can beat (victims come whole: 4 GPUs for a
// rigid gang), and requires the ratio to stay within 1.25 × that floor, with no gang
// evicted whose GPUs no inference pod then took, and no gang left partly bound.
//
//	go test ./pkg/scheduler -run TestOverEvictionBurst -v
func TestOverEvictionBurst(t *testing.T) {
	const GiB = sc.GiB
	shapes := []struct {
		name string
		// trainMin is the training gangs' minimum of 4 workers: 4 is rigid, 2 lets
		// two workers of each go one by one (a RayCluster with minReplicas 2).
		trainMin int
		serve    sc.Gang
		// perGPU is how many burst pods fit on one GPU.
		perGPU int
	}{
		{"whole GPUs, rigid training", 4, sc.Gang{GPUs: 1}, 1},
		{"whole GPUs, elastic training", 2, sc.Gang{GPUs: 1}, 1},
		{"20 GiB shares at 0.75, rigid training", 4, sc.Gang{Share: 20 * GiB, StartFree: 0.75}, 1},
		{"40 GiB shares at 0.5, elastic training", 2, sc.Gang{Share: 40 * GiB, StartFree: 0.5}, 2},
	}
	var table []string
	for _, shape := range shapes {
		for _, burst := range []int{1, 8, 32} {
			r := runBurst(t, shape.trainMin, shape.serve, burst)
			unit := 4
			if shape.trainMin < 4 {
				unit = 1
			}
			gpus := (burst + shape.perGPU - 1) / shape.perGPU
			floorGPUs := (gpus + unit - 1) / unit * unit
			floor := float64(int64(floorGPUs)*80*GiB) / float64(r.shortfall)
			table = append(table, fmt.Sprintf("%-40s %5d %6.2f %6.2f %7d %7d %7d %7d", shape.name, burst, r.ratio(), floor,
				r.gangsEvicted, r.wasted, r.partial, r.cycles))
			name := fmt.Sprintf("%s, burst %d", shape.name, burst)
			switch {
			case r.unbound > 0:
				t.Errorf("%s: %d of %d services never bound in %d cycles", name, r.unbound, burst, r.cycles)
			case r.ratio() > 1.25*floor+1e-9:
				t.Errorf("%s: freed ÷ shortfall is %.2f, above 1.25 × the floor %.2f", name, r.ratio(), floor)
			}
			if r.wasted > 0 {
				t.Errorf("%s: %d evicted gangs' GPUs were taken by no inference pod", name, r.wasted)
			}
			if r.partial > 0 {
				t.Errorf("%s: %d times a gang was seen partly bound outside an eviction", name, r.partial)
			}
		}
	}
	t.Logf("freed ÷ shortfall, the floor no victim choice beats, gangs that lost pods, evicted gangs whose GPUs no service took, partial gangs seen, cycles\n"+
		"%-40s %5s %6s %6s %7s %7s %7s %7s\n%s", "shape", "burst", "ratio", "floor", "gangs", "wasted", "partial", "cycles", strings.Join(table, "\n"))
}

type burstResult struct {
	freed, shortfall                               int64
	gangsEvicted, wasted, partial, unbound, cycles int
}

func (r burstResult) ratio() float64 { return float64(r.freed) / float64(r.shortfall) }

type gpuKey struct {
	node  string
	index int
}

func runBurst(t *testing.T, trainMin int, serve sc.Gang, burst int) burstResult {
	t.Helper()
	snap, sched, linger := trainingCluster(t, 8, trainMin, 2, serve, burst)
	freeAtStart := map[gpuKey]int64{}
	for _, n := range snap.Nodes {
		for i := range n.GPUs {
			freeAtStart[gpuKey{n.Name, n.GPUs[i].Index}] = n.GPUs[i].FreeBytes()
		}
	}
	var r burstResult
	evictedOn := map[model.GangID][]gpuKey{}
	leaving := map[model.PodID]int{}
	for r.cycles = 1; r.cycles <= 30; r.cycles++ {
		snap.Now = sc.Now + int64(r.cycles-1)
		plan := sched.Schedule(snap)
		for _, e := range plan.Evictions {
			p := snap.Pods[e.Pod]
			if _, seen := evictedOn[e.Gang]; !seen {
				r.gangsEvicted++
			}
			n := snap.Node(p.Node)
			for _, b := range p.GPUs {
				evictedOn[e.Gang] = append(evictedOn[e.Gang], gpuKey{p.Node, b.Index})
				r.freed += bindingBytes(n, b)
			}
		}
		leaving = sc.ApplyLingering(snap, plan, linger, leaving)
		r.partial += partlyBound(snap)
		if allBound(snap, burst, serveName) && len(leaving) == 0 {
			break
		}
	}
	needOn := map[gpuKey]int64{}
	used := map[gpuKey]bool{}
	for i := 0; i < burst; i++ {
		p := snap.Pods[sc.PodID(serveName(i), 0)]
		if !p.Bound() {
			r.unbound++
			continue
		}
		n := snap.Node(p.Node)
		for _, b := range p.GPUs {
			k := gpuKey{p.Node, b.Index}
			used[k] = true
			needOn[k] += p.GPU.NeedsLiveFreeBytes(n.GPUByIndex(b.Index))
		}
	}
	for k, need := range needOn {
		r.shortfall += max(0, need-freeAtStart[k])
	}
	for _, gpus := range evictedOn {
		took := false
		for _, k := range gpus {
			took = took || used[k]
		}
		if !took {
			r.wasted++
		}
	}
	return r
}

func bindingBytes(n *model.Node, b model.GPUBinding) int64 {
	if b.Whole {
		return n.GPUByIndex(b.Index).MemoryBytes
	}
	return b.MemoryBytes
}

// partlyBound counts gangs with some members bound, none terminating, and fewer than
// their minimum.
func partlyBound(snap *model.Snapshot) int {
	partial := 0
	for _, g := range snap.Gangs {
		bound, terminating := 0, false
		for _, id := range g.Members {
			if p := snap.Pods[id]; p != nil && p.Bound() {
				bound++
				terminating = terminating || p.Terminating
			}
		}
		if bound > 0 && bound < g.MinMember && !terminating {
			partial++
		}
	}
	return partial
}

func allBound(snap *model.Snapshot, burst int, name func(int) string) bool {
	for i := 0; i < burst; i++ {
		if !snap.Pods[sc.PodID(name(i), 0)].Bound() {
			return false
		}
	}
	return true
}

// trainingCluster is issue 19's cluster in the core: nodes × 8 GPUs, each full of two
// training gangs of 4 one-GPU workers (minimum trainMin), started an hour ago, then
// burst inference gangs shaped like serve (serve-00, serve-01, …), all in queue
// "team". Victims linger for linger cycles while they terminate. It returns the
// snapshot, a scheduler with preemption on, and the nodes' linger counts.
func trainingCluster(t *testing.T, nodes, trainMin, linger int, serve sc.Gang, burst int) (*model.Snapshot, *scheduler.Scheduler, map[string]int) {
	t.Helper()
	s := sc.Scenario{Queues: []sc.Queue{{Name: "team", Quota: -1}}, Linger: map[string]int{}}
	for n := 0; n < nodes; n++ {
		node := fmt.Sprintf("n%d", n)
		s.Nodes = append(s.Nodes, sc.Node{Name: node, GPUs: 8})
		s.Linger[node] = linger
		for k := 0; k < 2; k++ {
			s.Gangs = append(s.Gangs, sc.Gang{Name: fmt.Sprintf("train-%d", 2*n+k), Queue: "team", Priority: 50,
				Pods: 4, Min: trainMin, GPUs: 1, On: node, StartedAgo: int64(3600 + 60*(2*n+k))})
		}
	}
	for i := 0; i < burst; i++ {
		g := serve
		g.Name, g.Queue, g.Priority, g.NonPreemptible = serveName(i), "team", 125, true
		s.Gangs = append(s.Gangs, g)
	}
	snap, err := sc.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New("", scheduler.Config{Preemption: true})
	if err != nil {
		t.Fatal(err)
	}
	return snap, sched, s.Linger
}

func serveName(i int) string { return fmt.Sprintf("serve-%02d", i) }
