package placement

import (
	"fmt"
	"math/rand"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/model"
)

// TestRankIndexChoosesAsTheScan places random pods of a few shapes on a random
// cluster (cordoned and tainted nodes among them, pods that tolerate the taint and
// pods with a node selector, which the scan places; a PreferNoSchedule taint
// puts every pod on the scan, so there is none) through forks committed and
// dropped, pods coming and going, with every policy, and checks that a Placer
// using its rank indexes chooses exactly the node and GPUs that a Placer ranking
// every node chooses, every time.
func TestRankIndexChoosesAsTheScan(t *testing.T) {
	for _, policy := range Policies() {
		t.Run(policy, func(t *testing.T) {
			rng := rand.New(rand.NewSource(5))
			s := snapshotOf()
			for i := 0; i < 60; i++ {
				n := gpuNode(fmt.Sprintf("n%02d", i), 4+4*rng.Intn(2), []string{"H100", "A100"}[rng.Intn(2)], 80*gib)
				switch rng.Intn(10) {
				case 0:
					n.Unschedulable = true
				case 1:
					n.Taints = []corev1.Taint{taintNoSchedule("dedicated")}
				}
				s.AddNode(n)
			}
			indexed, _ := New(policy)
			scan, _ := New(policy)
			scan.ranks.scanOnly = true
			views := []*View{NewView(s)}
			var bound []*model.Pod
			used := 0
			for step := 0; step < 1500; step++ {
				v := views[len(views)-1]
				switch op := rng.Intn(20); {
				case op == 0 && len(views) < 3:
					views = append(views, v.Fork())
					continue
				case op == 1 && len(views) > 1:
					v.Commit()
					views = views[:len(views)-1]
					continue
				case op == 2 && len(views) > 1:
					views = views[:len(views)-1]
					continue
				case op < 5 && len(bound) > 0:
					k := rng.Intn(len(bound))
					v.Release(bound[k])
					bound = append(bound[:k], bound[k+1:]...)
					continue
				}
				pod := randomPlainPod(rng, step)
				got, gu := indexed.PlacePod(v, pod)
				want, wu := scan.PlacePod(v, pod)
				if (gu == nil) != (wu == nil) || !reflect.DeepEqual(got, want) {
					t.Fatalf("step %d: %s placed at %+v (%v) with the index, at %+v (%v) by the scan", step, describePod(pod), got, gu, want, wu)
				}
				if gu == nil {
					v.Assign(pod, got)
					pod.Node, pod.GPUs = got.Node, got.GPUs
					bound = append(bound, pod)
					used++
				}
			}
			if used < 300 {
				t.Fatalf("only %d of the pods were placed: the test does not exercise the index", used)
			}
			built := 0
			for _, x := range indexed.ranks.list {
				if x.tree != nil {
					built++
				}
			}
			if built == 0 {
				t.Fatal("the indexed Placer built no index")
			}
		})
	}
}

func randomPlainPod(rng *rand.Rand, step int) *model.Pod {
	name := fmt.Sprintf("p%d", step)
	var p *model.Pod
	switch rng.Intn(4) {
	case 0:
		p = gpuPod(name, 1, 1000, gib)
	case 1:
		p = gpuPod(name, 2, 4000, 8*gib)
	case 2:
		p = sharePod(name, 500, 500, gib)
	default:
		p = cpuPod(name, 2000, 4*gib)
	}
	switch rng.Intn(8) {
	case 0:
		p.Tolerations = []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpExists}}
	case 1:
		p.NodeSelector = map[string]string{"kubernetes.io/hostname": fmt.Sprintf("n%02d", rng.Intn(60))}
	}
	return p
}

func describePod(p *model.Pod) string {
	return fmt.Sprintf("%s (%d GPUs, %d milli, tolerations %d, selector %v)", p.ID, p.GPU.Count, p.GPU.FractionMilli, len(p.Tolerations), p.NodeSelector)
}
