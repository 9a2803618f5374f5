package sim

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

func TestDebugReplay(t *testing.T) {
	pol := os.Getenv("DBG_POLICY")
	if pol == "" {
		t.Skip()
	}
	trace := os.Getenv("DBG_TRACE")
	if trace == "" {
		trace = "default"
	}
	nodes, _ := LoadNodes("/work/shared/data/openb/openb_node_list_gpu_node.csv")
	tasks, _ := LoadTasks("/work/shared/data/openb/openb_pod_list_" + trace + ".csv")
	s := model.NewSnapshot()
	var capacity int64
	for _, n := range nodes {
		s.AddNode(n)
		capacity += int64(len(n.GPUs)) * 1000
	}
	pods := make([]*model.Pod, len(tasks))
	for i, tk := range tasks {
		pods[i] = tk.Pod()
	}
	for _, policy := range strings.Split(pol, ",") {
		order := arrivalOrder(tasks, 42, float64(capacity)*1.3)
		placer, _ := placement.New(policy)
		placer.SetWorkload(placement.ShapesOf(pods))
		v := placement.NewView(s)
		fails := map[string]int{}
		failMilli := map[string]int64{}
		var arrived, alloc int64
		stop := int64(float64(capacity) * 1.0)
		for _, i := range order {
			if arrived >= stop {
				break
			}
			arrived += tasks[i].RequestedGPUMilli()
			pl, u := placer.PlacePod(v, pods[i])
			if u != nil {
				k := fmt.Sprintf("%dx%d", tasks[i].NumGPU, tasks[i].GPUMilli)
				if tasks[i].NumGPU == 1 && tasks[i].GPUMilli < 1000 {
					k = "share"
				}
				fails[k]++
				failMilli[k] += tasks[i].RequestedGPUMilli()
				continue
			}
			v.Assign(pods[i], pl)
			alloc += tasks[i].RequestedGPUMilli()
		}
		// end state: free GPU milli by node situation
		var freeNoCPU, freePartial, freeIdle float64
		idleHist := map[int]int{}
		for i := 0; i < v.NodeCount(); i++ {
			n := v.NodeAt(i)
			free := n.Free()
			idle := n.IdleGPUs()
			idleHist[idle]++
			var f float64
			for _, g := range n.GPUs {
				f += float64(g.FreeBytes()) * 1000 / float64(g.MemoryBytes)
			}
			if free.MilliCPU < 2000 {
				freeNoCPU += f
			} else {
				freeIdle += float64(idle) * 1000
				freePartial += f - float64(idle)*1000
			}
		}
		fmt.Printf("%s: unalloc@100 %.2f fails %v failMilli %v\n  free GPU on CPU-starved nodes %.0f, idle %.0f, partial %.0f; idle hist %v\n", policy, 100-100*float64(alloc)/float64(capacity), fails, failMilli, freeNoCPU, freeIdle, freePartial, idleHist)
	}
}
