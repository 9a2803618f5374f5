package placement

import (
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

func h100Pod(name string, gpus int) *model.Pod {
	p := gpuPod(name, gpus, 1000, gib)
	p.GPU.Models = []string{"H100"}
	return p
}

func TestPlaceGang(t *testing.T) {
	tests := []struct {
		name   string
		policy string
		nodes  []*model.Node
		gang   []*model.Pod
		// wantNodes are the nodes of the placements in gang order; nil when the gang
		// must not fit.
		wantNodes []string
		// wantMessage is the Unschedulable message when it must not fit.
		wantMessage string
	}{
		{
			name:      "two members that fit only on two nodes together",
			nodes:     []*model.Node{gpuNode("node-a", 4, "H100", 80*gib), gpuNode("node-b", 4, "H100", 80*gib)},
			gang:      []*model.Pod{h100Pod("w0", 4), h100Pod("w1", 4)},
			wantNodes: []string{"node-a", "node-b"},
		},
		{
			name: "the big member is placed first so that both fit",
			// spread would put the 4-GPU member, were it placed first, on the emptier
			// 8-GPU node and leave the 8-GPU member nowhere.
			policy:    "spread",
			nodes:     []*model.Node{gpuNode("node-4", 4, "H100", 80*gib), gpuNode("node-8", 8, "H100", 80*gib)},
			gang:      []*model.Pod{h100Pod("small", 4), h100Pod("big", 8)},
			wantNodes: []string{"node-4", "node-8"},
		},
		{
			name:        "more members than GPUs",
			nodes:       []*model.Node{gpuNode("node-a", 1, "H100", 80*gib), gpuNode("node-b", 1, "H100", 80*gib), gpuNode("node-c", 4, "A100", 80*gib)},
			gang:        []*model.Pod{h100Pod("w0", 1), h100Pod("w1", 1), h100Pod("w2", 1)},
			wantMessage: "needs 3 pods with 1 H100 each, at most 2 fit (node-a, node-b); for the others: 2 insufficient free GPUs, 1 no GPU of an accepted model",
		},
		{
			name:        "a member that fits nowhere",
			nodes:       []*model.Node{gpuNode("node-a", 4, "H100", 80*gib)},
			gang:        []*model.Pod{cpuPod("head", 2000, gib), h100Pod("w0", 8)},
			wantMessage: "needs 2 pods (1 with 2 CPUs and 1 GiB memory, 1 with 8 H100), at most 1 fits (node-a); for the others: 1 insufficient free GPUs",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := snapshotOf(tt.nodes...)
			v := NewView(s)
			p, err := New(tt.policy)
			if err != nil {
				t.Fatal(err)
			}
			placements, u := p.PlaceGang(v, tt.gang)
			if tt.wantNodes == nil {
				if u == nil {
					t.Fatalf("PlaceGang placed %+v, want unschedulable", placements)
				}
				if u.Message != tt.wantMessage {
					t.Fatalf("message = %q\nwant      %q", u.Message, tt.wantMessage)
				}
				for i := 0; i < v.NodeCount(); i++ {
					if n := v.NodeAt(i); n != s.Nodes[i] {
						t.Fatalf("a failed gang left node %s changed in the view", n.Name)
					}
				}
				return
			}
			if u != nil {
				t.Fatalf("PlaceGang: %s", u.Message)
			}
			used := 0
			for i, pl := range placements {
				if pl.Node != tt.wantNodes[i] || pl.Pod != tt.gang[i].ID {
					t.Fatalf("placement %d = %s on %s, want %s on %s", i, pl.Pod, pl.Node, tt.gang[i].ID, tt.wantNodes[i])
				}
				used += tt.gang[i].GPU.Count
			}
			idle := 0
			for i := 0; i < v.NodeCount(); i++ {
				idle += v.NodeAt(i).IdleGPUs()
			}
			total := 0
			for _, n := range tt.nodes {
				total += len(n.GPUs)
			}
			if idle != total-used {
				t.Fatalf("view has %d idle GPUs after the gang, want %d: placements were not assigned", idle, total-used)
			}
		})
	}
}

func TestPlacePodUnschedulableSaysWhy(t *testing.T) {
	tainted := gpuNode("tainted", 8, "H100", 80*gib)
	tainted.Taints = append(tainted.Taints, taintNoSchedule("dedicated"))
	busy := gpuNode("busy", 2, "H100", 80*gib)
	busy.GPUs[0].Exclusive, busy.GPUs[0].AllocatedBytes = true, 80*gib
	v := NewView(snapshotOf(tainted, busy, gpuNode("small", 1, "H100", 80*gib)))
	p, _ := New("")
	_, u := p.PlacePod(v, h100Pod("p", 2))
	if u == nil {
		t.Fatal("placed a pod that fits nowhere")
	}
	want := "no node fits a pod with 2 H100: of 3 nodes, 2 insufficient free GPUs, 1 untolerated taint dedicated"
	if u.Message != want {
		t.Fatalf("message = %q\nwant      %q", u.Message, want)
	}
	if u.Reasons[ReasonFreeGPUs] != 2 || u.Reasons[ReasonTaint+" dedicated"] != 1 {
		t.Fatalf("reasons = %v", u.Reasons)
	}
	if !strings.Contains(u.Error(), "2 H100") {
		t.Fatalf("Error() = %q", u.Error())
	}
}

func TestCompareDemandOrdersHardestFirst(t *testing.T) {
	pods := []*model.Pod{
		cpuPod("cpu", 8000, gib),
		sharePod("quarter", 250, 1000, gib),
		memSharePod("mem-share", 20*gib),
		gpuPod("one", 1, 1000, gib),
		gpuPod("eight", 8, 1000, gib),
		sharePod("half", 500, 1000, gib),
	}
	want := []model.PodID{"ns/eight", "ns/one", "ns/mem-share", "ns/half", "ns/quarter", "ns/cpu"}
	sorted := append([]*model.Pod(nil), pods...)
	slices.SortStableFunc(sorted, func(a, b *model.Pod) int { return CompareDemand(b, a) })
	for i, p := range sorted {
		if p.ID != want[i] {
			t.Fatalf("position %d = %s, want %s (order %v)", i, p.ID, want[i], sorted)
		}
	}
}
