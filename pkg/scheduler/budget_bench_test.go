package scheduler_test

import (
	"fmt"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// BenchmarkDrainCycle is the first cycle of a drain (test/bench drain-20k and
// drain-100k: one-GPU pods, each its own gang, 20 GPUs a node, the default queue),
// bounded to a budget of pods (ScheduleWithin), for the cost model in
// docs/scheduler.md: what a cycle costs beside the pods it places. budget=0 is the
// unbounded cycle, which places the whole backlog. order=rebuilt orders the pending
// gangs afresh in the cycle (ScheduleWithin, as gantry sim and the tests do);
// order=kept is gantry-scheduler's cycle, given the Order its cache keeps
// (ScheduleOrdered), which reads only the gangs it reaches, with the queues' charges
// kept, and refreshes the gangs it bound, as the cache does when it assumes them.
// The snapshot does not change between cycles: each places the same pods.
// cpu-ms/cycle is the process's CPU time a cycle (the garbage collector's too), the
// figure to compare on a loaded machine.
func BenchmarkDrainCycle(b *testing.B) {
	for _, shape := range []struct{ nodes, pods int }{{1000, 5000}, {5000, 20000}, {5000, 100000}} {
		snap := drainSnapshot(b, shape.nodes, shape.pods)
		order := keptOrder(snap)
		for _, budget := range []int{0, 256, 1024, 4096} {
			if budget == 0 && shape.pods > 20000 {
				continue // about a minute a cycle on this machine
			}
			for _, kept := range []bool{false, true} {
				name := fmt.Sprintf("nodes=%d/pending=%d/budget=%d/order=rebuilt", shape.nodes, shape.pods, budget)
				if kept {
					name = fmt.Sprintf("nodes=%d/pending=%d/budget=%d/order=kept", shape.nodes, shape.pods, budget)
				}
				b.Run(name, func(b *testing.B) {
					s, err := scheduler.New("", scheduler.Config{Preemption: true})
					if err != nil {
						b.Fatal(err)
					}
					s.ScheduleWithin(snap, nil, 64) // the placer's first look at the cluster
					b.ReportAllocs()
					b.ResetTimer()
					cpu := processCPU()
					placed := 0
					for i := 0; i < b.N; i++ {
						var plan *scheduler.Plan
						if kept {
							plan = s.ScheduleOrdered(snap, order, nil, scheduler.Bound{Pods: budget})
						} else {
							plan = s.ScheduleWithin(snap, nil, budget)
						}
						for _, gb := range plan.Binds {
							placed += len(gb.Placements)
							if kept {
								order.Refresh(snap, gb.Gang) // the cache's part: one refresh per gang bound
							}
						}
						order.Settle()
					}
					b.ReportMetric(float64(placed)/float64(b.N), "pods/cycle")
					b.ReportMetric(float64(processCPU()-cpu)/1e6/float64(b.N), "cpu-ms/cycle")
				})
			}
		}
	}
}

// processCPU is the CPU time the process has used (user and system, every thread,
// the garbage collector's included). On a shared machine a cycle's CPU time says
// more than its wall time, which other processes stretch.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// keptOrder is the Order a cache keeps for snap: every gang and node refreshed.
func keptOrder(snap *model.Snapshot) *scheduler.Order {
	o := scheduler.NewOrder()
	for id := range snap.Gangs {
		o.Refresh(snap, id)
	}
	for _, n := range snap.Nodes {
		o.RefreshNode(snap, n.Name)
	}
	o.Settle()
	return o
}

func drainSnapshot(b *testing.B, nodes, pods int) *model.Snapshot {
	b.Helper()
	s := sc.Scenario{Queues: []sc.Queue{{Name: "default", Quota: -1}}, DefaultQueue: "default"}
	for i := 0; i < nodes; i++ {
		s.Nodes = append(s.Nodes, sc.Node{Name: fmt.Sprintf("node-%05d", i), GPUs: 20, Pods: 110})
	}
	snap, err := sc.Build(s)
	if err != nil {
		b.Fatal(err)
	}
	for i := 0; i < pods; i++ {
		if err := sc.AddGang(snap, sc.Gang{Name: fmt.Sprintf("pod-%06d", i), GPUs: 1, CPU: 100, Memory: 64 << 20}, int64(i)); err != nil {
			b.Fatal(err)
		}
	}
	return snap
}
