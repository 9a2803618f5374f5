package placement

import (
	"fmt"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// benchCluster is n nodes of 8 80 GB GPUs, 128 cores and 1 TiB each.
func benchCluster(n int) *model.Snapshot {
	s := model.NewSnapshot()
	for i := 0; i < n; i++ {
		node := &model.Node{
			Name:        fmt.Sprintf("node-%05d", i),
			Allocatable: model.Resources{MilliCPU: 128_000, MemoryBytes: 1 << 40, Pods: 110},
		}
		for g := 0; g < 8; g++ {
			node.GPUs = append(node.GPUs, model.GPU{Index: g, Model: "H100", MemoryBytes: 80 << 30, LiveFreeBytes: model.UnknownBytes, Healthy: true})
		}
		s.AddNode(node)
	}
	return s
}

// benchPlace places pods round-robin until b.N placements, starting over on an empty
// view whenever the cluster fills up, and reports placements per second. The placer
// is the scheduler's (NewOnline): each pod arrives in its learned mix before it is
// placed, so the mix is recompiled as it moves (every 256 arrivals), as in
// production. What a placer does once in its life is done before the timer starts:
// its first look at the cluster (node kinds, scarcity) and the first 512 arrivals,
// after 1, 2, 4, ... of which it recompiles; timed with them, a run of a few hundred
// placements measured mostly them, and the figure swung by a factor of 100 with b.N.
func benchPlace(b *testing.B, nodes int, pods []*model.Pod) {
	s := benchCluster(nodes)
	p, err := NewOnline("")
	if err != nil {
		b.Fatal(err)
	}
	warm := NewView(s)
	for i := 0; i < 2*mixRefreshArrivals; i++ {
		pod := pods[i%len(pods)]
		p.Arrive(pod)
		if pl, u := p.PlacePod(warm, pod); u == nil {
			warm.Assign(pod, pl)
		}
	}
	v := NewView(s)
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		pod := pods[i%len(pods)]
		p.Arrive(pod)
		pl, u := p.PlacePod(v, pod)
		if u != nil {
			b.StopTimer()
			v = NewView(s)
			b.StartTimer()
			continue
		}
		v.Assign(pod, pl)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "placements/s")
}

func BenchmarkPlacePod5000x8(b *testing.B) {
	benchPlace(b, 5000, []*model.Pod{gpuPod("p", 1, 4000, 16<<30)})
}

func BenchmarkPlacePodMixed5000x8(b *testing.B) {
	pods := []*model.Pod{
		gpuPod("one", 1, 4000, 16<<30),
		sharePod("half", 500, 2000, 8<<30),
		gpuPod("two", 2, 8000, 32<<30),
		sharePod("quarter", 250, 1000, 4<<30),
		cpuPod("cpu", 2000, 4<<30),
	}
	benchPlace(b, 5000, pods)
}

func BenchmarkPlaceGang5000x8(b *testing.B) {
	s := benchCluster(5000)
	p, _ := New("")
	gang := make([]*model.Pod, 4)
	for i := range gang {
		gang[i] = gpuPod(fmt.Sprintf("worker-%d", i), 8, 64000, 512<<30)
	}
	v := NewView(s)
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		if _, u := p.PlaceGang(v, gang); u != nil {
			b.StopTimer()
			v = NewView(s)
			b.StartTimer()
		}
	}
}
