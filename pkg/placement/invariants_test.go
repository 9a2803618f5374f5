package placement

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// TestPlacementsKeepGPUsConsistent places a random stream of whole, multi-GPU,
// fractional, memory-share and CPU-only pods with every policy until the cluster is
// full, and checks after each placement what must always hold: no GPU booked above
// its memory, no share on a GPU held whole, whole GPUs only when idle, the node's
// CPU, memory and pod slots never overbooked.
func TestPlacementsKeepGPUsConsistent(t *testing.T) {
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, 7))
			var nodes []*model.Node
			for i := 0; i < 6; i++ {
				nodes = append(nodes, gpuNode(fmt.Sprintf("n%d", i), 1+i%4*2, []string{"H100", "A100"}[i%2], int64(40+40*(i%2))*gib))
			}
			v := NewView(snapshotOf(nodes...))
			p, _ := New(policy)
			placed := 0
			for k := 0; k < 400; k++ {
				var pod *model.Pod
				name := fmt.Sprintf("p%d", k)
				switch rng.IntN(5) {
				case 0:
					pod = gpuPod(name, 1+rng.IntN(3), 2000, 4*gib)
				case 1:
					pod = sharePod(name, int64(100+rng.IntN(900)), 1000, gib)
				case 2:
					pod = memSharePod(name, int64(1+rng.IntN(60))*gib)
				case 3:
					pod = cpuPod(name, 4000, 8*gib)
				default:
					pod = h100Pod(name, 1)
				}
				pl, u := p.PlacePod(v, pod)
				if u != nil {
					continue
				}
				n := v.Node(pl.Node)
				if ok, reason := Feasible(n, pod); !ok {
					t.Fatalf("%s placed %s on %s, which cannot take it: %s", policy, DescribeDemand(pod), pl.Node, reason)
				}
				if len(pl.GPUs) != pod.GPU.Count {
					t.Fatalf("%s gave %d GPUs to a pod asking %d", policy, len(pl.GPUs), pod.GPU.Count)
				}
				v.Assign(pod, pl)
				placed++
				checkNode(t, v.Node(pl.Node))
			}
			if placed < 50 {
				t.Fatalf("%s placed only %d pods", policy, placed)
			}
		})
	}
}

func checkNode(t *testing.T, n *model.Node) {
	t.Helper()
	free := n.Free()
	if free.MilliCPU < 0 || free.MemoryBytes < 0 || free.Pods < 0 {
		t.Fatalf("node %s overbooked: free %+v", n.Name, free)
	}
	for _, g := range n.GPUs {
		if g.AllocatedBytes > g.MemoryBytes {
			t.Fatalf("node %s GPU %d booked %d of %d bytes", n.Name, g.Index, g.AllocatedBytes, g.MemoryBytes)
		}
		if g.Exclusive && g.Sharers > 0 {
			t.Fatalf("node %s GPU %d is held whole and shared by %d", n.Name, g.Index, g.Sharers)
		}
	}
}
