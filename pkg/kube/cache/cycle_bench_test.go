package cache

import (
	"context"
	"fmt"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// BenchmarkBoundCycle is gantry-scheduler's cycle through the cache (PrepareOrdered,
// the core with a budget of 256, Commit) at the end of drain-100k: 5,000 nodes of 24
// GPUs, 100,000 one-GPU pods bound, the default queue. idle is a cycle with nothing
// pending (the last cycle of a drain); changes=N a cycle after N pods arrived, which
// it places (changes=1 is steady arrivals, a pod per cycle). It says what a cycle costs as the bound pods grow: nothing of them, if
// it holds the lock for the changes only. shares compares what the status reporter
// holds the lock for every 2 s: Shares over every pod (from=pods, as it did) or from
// the charges the cache keeps (from=kept, Cache.Shares). cpu-ms/op is the process's
// CPU (GC included), the figure that holds on a loaded machine.
func BenchmarkBoundCycle(b *testing.B) {
	const nodes, gpus, bound = 5000, 24, 100000
	c, s := benchCluster(b, nodes, gpus)
	for i := range bound {
		p := gpuPod(fmt.Sprintf("bound-%06d", i), 1, 0, fmt.Sprintf("node-%05d", i%nodes))
		p.Status.Phase = corev1.PodRunning
		c.UpsertPod(p)
	}
	now := time.Unix(2000, 0)
	var schedule, commit time.Duration
	run := func() *Decisions {
		prep := c.PrepareOrdered(context.Background(), now, func(snap *model.Snapshot, order *scheduler.Order, skip func(model.GangID) bool) *scheduler.Plan {
			return s.ScheduleOrdered(snap, order, skip, scheduler.Bound{Pods: 256})
		})
		d := c.Commit(prep.Plan, now)
		schedule, commit = schedule+prep.Schedule, commit+d.Held
		return d
	}
	run()
	b.Run("idle", func(b *testing.B) {
		measure(b, func() { run() })
	})
	for _, n := range []int{1, 16, 256} {
		b.Run(fmt.Sprintf("changes=%d", n), func(b *testing.B) {
			placed := 0
			schedule, commit = 0, 0
			measure(b, func() {
				b.StopTimer()
				pods := make([]*corev1.Pod, n)
				for i := range pods {
					pods[i] = gpuPod(fmt.Sprintf("new-%d", i), 1, 0, "")
					c.UpsertPod(pods[i])
				}
				b.StartTimer()
				for _, bt := range run().Batches {
					placed += len(bt.Reqs)
				}
				b.StopTimer()
				for _, p := range pods {
					c.DeletePod(p.Namespace, p.Name)
				}
				b.StartTimer()
			})
			b.ReportMetric(float64(placed)/float64(b.N), "pods/op")
			b.ReportMetric(schedule.Seconds()*1e3/float64(b.N), "schedule-ms/op")
			b.ReportMetric(commit.Seconds()*1e3/float64(b.N), "commit-ms/op")
		})
	}
	b.Run("shares/from=pods", func(b *testing.B) {
		measure(b, func() { c.View(func(snap *model.Snapshot) { _, _ = s.Shares(snap) }) })
	})
	b.Run("shares/from=kept", func(b *testing.B) {
		measure(b, func() { _, _, _ = c.Shares() })
	})
}

// measure runs f b.N times and reports the process's CPU per run.
func measure(b *testing.B, f func()) {
	b.ReportAllocs()
	b.ResetTimer()
	cpu := processCPU()
	for range b.N {
		f()
	}
	b.ReportMetric(float64(processCPU()-cpu)/1e6/float64(b.N), "cpu-ms/op")
}

// processCPU is the CPU time the process has used, every thread and the GC's.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// benchCluster is a cache of nodes with gpus whole GPUs each and the default queue.
func benchCluster(b *testing.B, nodes, gpus int) (*Cache, *scheduler.Scheduler) {
	b.Helper()
	c := New([]string{testScheduler}, &gang.StaticLookup{}, "default")
	c.SetQueues(map[string]*model.Queue{"default": {Name: "default", Resources: map[model.ResourceName]model.QueueResource{
		model.ResourceGPU: {Quota: model.Unlimited, Limit: model.Unlimited, OverQuotaWeight: 1}}}})
	alloc := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
		corev1.ResourcePods: resource.MustParse("110"), names.ExtendedGPUResource: *resource.NewQuantity(int64(gpus), resource.DecimalSI),
	}
	for i := range nodes {
		c.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("node-%05d", i), Labels: map[string]string{names.LabelGFDMemory: "81920"}},
			Status: corev1.NodeStatus{Allocatable: alloc}})
	}
	s, err := scheduler.New("bestfit", scheduler.Config{Preemption: true})
	if err != nil {
		b.Fatal(err)
	}
	return c, s
}
