package sim

import (
	"fmt"
	"os"
	"strconv"
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
	if rm := os.Getenv("DBG_REMIX"); rm != "" {
		k, f, _ := ParseRemix(rm)
		tasks, _ = Remix(tasks, nodes, k, f, 1)
	}
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
		g3 := map[string]int{}
		failMilli := map[string]int64{}
		var arrived, alloc int64
		stop := int64(float64(capacity) * stopAt())
		for _, i := range order {
			if arrived >= stop {
				break
			}
			arrived += tasks[i].RequestedGPUMilli()
			pl, u := placer.PlacePod(v, pods[i])
			if u != nil {
				k := fmt.Sprintf("%dx%d", tasks[i].NumGPU, tasks[i].GPUMilli)

				fails[k]++
				if os.Getenv("DBG_V") != "" && tasks[i].NumGPU == 8 {
					fmt.Printf("  fail %s cpu %d mem %d\n", k, tasks[i].MilliCPU, tasks[i].MemoryBytes>>30)
				}
				failMilli[k] += tasks[i].RequestedGPUMilli()
				continue
			}
			v.Assign(pods[i], pl)
			if os.Getenv("DBG_G3") != "" && v.Node(pl.Node).GPUs[0].Model == "G3" {
				k := fmt.Sprintf("%dx%d", tasks[i].NumGPU, tasks[i].GPUMilli)
				if tasks[i].NumGPU == 1 && tasks[i].GPUMilli < 1000 {
					k = "share"
				}
				if tasks[i].NumGPU == 8 && tasks[i].MilliCPU >= 120000 {
					k = "8big"
				}
				g3[k]++
				if k == "0x0" || k == "4x1000" {
					others := 0
					for j := 0; j < v.NodeCount(); j++ {
						if ok, _ := placement.Feasible(v.NodeAt(j), pods[i]); ok && v.NodeAt(j).GPUs[0].Model != "G3" {
							others++
						}
					}
					fmt.Printf("  on G3: %s cpu %d mem %d; other feasible nodes %d\n", k, tasks[i].MilliCPU, tasks[i].MemoryBytes>>30, others)
				}
			}
			alloc += tasks[i].RequestedGPUMilli()
		}
		// end state: free GPU milli by node situation
		var freeNoCPU, freePartial, freeIdle float64
		idleHist := map[int]int{}
		sliver := map[int64]int{}
		for i := 0; i < v.NodeCount(); i++ {
			n := v.NodeAt(i)
			free := n.Free()
			idle := n.IdleGPUs()
			idleHist[idle]++
			if os.Getenv("DBG_V") != "" && idle == 8 {
				fmt.Printf("  idle node %s %s free cpu %d mem %d\n", n.Name, n.GPUs[0].Model, free.MilliCPU, free.MemoryBytes>>30)
			}
			var f float64
			for _, g := range n.GPUs {
				f += float64(g.FreeBytes()) * 1000 / float64(g.MemoryBytes)
				if fm := g.FreeBytes() * 1000 / g.MemoryBytes; fm > 0 && fm < 1000 && free.MilliCPU >= 2000 {
					sliver[fm/50*50]++
				}
			}
			if free.MilliCPU < 2000 {
				freeNoCPU += f
			} else {
				freeIdle += float64(idle) * 1000
				freePartial += f - float64(idle)*1000
			}
		}
		fmt.Printf("G3 placements %v\n", g3)
		fmt.Printf("%s: unalloc@100 %.2f fails %v failMilli %v\n  free GPU on CPU-starved nodes %.0f, idle %.0f, partial %.0f; idle hist %v\n  slivers %v\n", policy, 100-100*float64(alloc)/float64(capacity), fails, failMilli, freeNoCPU, freeIdle, freePartial, idleHist, sliver)
	}
}

func stopAt() float64 {
	if v := os.Getenv("DBG_STOP"); v != "" {
		f, _ := strconv.ParseFloat(v, 64)
		return f
	}
	return 1.0
}
