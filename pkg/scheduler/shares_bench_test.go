package scheduler

import (
	"fmt"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// BenchmarkShares: the queue accounting every cycle pays once a queue exists (the
// scheduler creates the default one), over 1,000 nodes × 8 GPUs with every GPU bound.
func BenchmarkShares(b *testing.B) {
	snap := model.NewSnapshot()
	snap.Queues["default"] = &model.Queue{Name: "default", Resources: map[model.ResourceName]model.QueueResource{}}
	snap.DefaultQueue = "default"
	for i := 0; i < 1000; i++ {
		n := &model.Node{Name: fmt.Sprintf("n%d", i)}
		n.Allocatable.MilliCPU, n.Allocatable.MemoryBytes = 128000, 1<<40
		for g := 0; g < 8; g++ {
			n.GPUs = append(n.GPUs, model.GPU{Index: g, MemoryBytes: 80 << 30, Healthy: true, Model: "H100"})
			id := model.PodID(fmt.Sprintf("p%d-%d", i, g))
			snap.Pods[id] = &model.Pod{ID: id, Node: n.Name, Preemptible: g%2 == 0,
				GPUs: []model.GPUBinding{{Index: g, Whole: true}}}
		}
		snap.AddNode(n)
	}
	s := &Scheduler{}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, err := s.Shares(snap); err != nil {
			b.Fatal(err)
		}
	}
}
