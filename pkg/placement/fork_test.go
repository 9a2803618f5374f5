package placement

import (
	"fmt"
	"math/rand"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// TestForkKeepsEveryViewsState drives nested forks through random writes, commits
// and drops — and the careless cases a fork tolerates: a parent written while its
// fork is open, forks dropped after their parent moved on — with the node lists of
// committed forks recycled, and checks every open view against a model of what it
// must hold after each step: its parent's state when forked, its own writes, and
// its committed children's writes.
//
// A shared root (NewSharedView, as a cycle makes) must hold the same, and never
// write the snapshot's own node list.
func TestForkKeepsEveryViewsState(t *testing.T) {
	for _, shared := range []bool{false, true} {
		t.Run(fmt.Sprintf("shared=%v", shared), func(t *testing.T) { forkKeepsEveryViewsState(t, shared) })
	}
}

func forkKeepsEveryViewsState(t *testing.T, shared bool) {
	const nodes = 40
	var names []string
	s := snapshotOf()
	for i := 0; i < nodes; i++ {
		n := gpuNode(fmt.Sprintf("n%02d", i), 1, "H100", 80*gib)
		s.AddNode(n)
		names = append(names, n.Name)
	}
	type open struct {
		v       *View
		pods    []int        // the model: pods booked per node
		touched map[int]bool // nodes written since made or last committed
	}
	rng := rand.New(rand.NewSource(21))
	root := NewView(s)
	if shared {
		root = NewSharedView(s)
	}
	snapNodes := append([]*model.Node(nil), s.Nodes...)
	stack := []*open{{v: root, pods: make([]int, nodes), touched: map[int]bool{}}}
	reused, forks := 0, 0
	for step := 0; step < 20000; step++ {
		top := stack[len(stack)-1]
		switch op := rng.Intn(10); {
		case op < 4: // book a pod on the top view
			i := rng.Intn(nodes)
			pod := cpuPod(fmt.Sprintf("p%d", step), 1000, gib)
			top.v.Assign(pod, Placement{Pod: pod.ID, Node: names[i]})
			top.pods[i]++
			top.touched[i] = true
		case op == 4 && len(stack) > 1: // careless: write the parent while its fork is open
			parent := stack[len(stack)-2]
			i := rng.Intn(nodes)
			pod := cpuPod(fmt.Sprintf("p%d", step), 1000, gib)
			parent.v.Assign(pod, Placement{Pod: pod.ID, Node: names[i]})
			parent.pods[i]++
			parent.touched[i] = true
		case op < 7 && len(stack) < 5: // fork the top
			before := top.v.spare
			f := top.v.Fork()
			forks++
			if before != nil && len(f.nodes) > 0 && &f.nodes[0] == &before[0] {
				reused++
			}
			stack = append(stack, &open{v: f, pods: append([]int(nil), top.pods...), touched: map[int]bool{}})
		case op < 9 && len(stack) > 1: // commit the top into its parent
			parent := stack[len(stack)-2]
			top.v.Commit()
			for i := range top.touched {
				parent.pods[i] = top.pods[i]
				parent.touched[i] = true
			}
			stack = stack[:len(stack)-1]
		case len(stack) > 1: // drop the top
			stack = stack[:len(stack)-1]
		}
		for i, n := range s.Nodes {
			if n != snapNodes[i] {
				t.Fatalf("step %d: the snapshot's node %s was written by a view", step, names[i])
			}
		}
		for depth, o := range stack {
			for i := 0; i < nodes; i++ {
				if got := o.v.NodeAt(i).Requested.Pods; got != int64(o.pods[i]) {
					t.Fatalf("step %d: view at depth %d holds %d pods on %s, want %d", step, depth, got, names[i], o.pods[i])
				}
			}
		}
	}
	if forks == 0 || reused < forks/4 {
		t.Fatalf("%d of %d forks reused a committed fork's node list, want at least a quarter", reused, forks)
	}
}

// TestForkCostsTheChanges: a fork made after a committed one takes its node list
// and copies only the nodes written since.
func TestForkCostsTheChanges(t *testing.T) {
	s := snapshotOf(gpuNode("a", 1, "H100", 80*gib), gpuNode("b", 1, "H100", 80*gib))
	root := NewView(s)
	first := root.Fork()
	list := &first.nodes[0]
	pod := cpuPod("p", 1000, gib)
	first.Assign(pod, Placement{Pod: pod.ID, Node: "a"})
	first.Commit()
	second := root.Fork()
	if &second.nodes[0] != list {
		t.Fatal("the fork after a Commit copied the node list instead of taking the committed fork's")
	}
	if second.Node("a").Requested.Pods != 1 || second.Node("b").Requested.Pods != 0 {
		t.Fatalf("recycled fork holds a=%d b=%d pods, want 1 and 0", second.Node("a").Requested.Pods, second.Node("b").Requested.Pods)
	}
	defer func() {
		if recover() == nil {
			t.Fatal("a committed fork could still be written")
		}
	}()
	first.Assign(pod, Placement{Pod: pod.ID, Node: "b"})
}

// TestSharedViewCopiesOnceAGang: a cycle's root reads the snapshot's node list in
// place; its first fork copies it, and the root takes that copy over on Commit
// instead of copying its own. The counts the inter-pod checks read follow.
func TestSharedViewCopiesOnceAGang(t *testing.T) {
	s := snapshotOf(gpuNode("a", 1, "H100", 80*gib), gpuNode("b", 1, "H100", 80*gib))
	root := NewSharedView(s)
	if &root.nodes[0] != &s.Nodes[0] {
		t.Fatal("a shared view copied the snapshot's node list before any write")
	}
	f := root.Fork()
	list := &f.nodes[0]
	pod := cpuPod("p", 1000, gib)
	pod.Constraints = &model.Constraints{AntiAffinity: []model.AffinityTerm{{}}}
	f.Assign(pod, Placement{Pod: pod.ID, Node: "b"})
	f.Commit()
	if &root.nodes[0] != list {
		t.Fatal("the root copied the node list on its fork's Commit instead of taking the fork's")
	}
	if root.Node("b").Requested.Pods != 1 || s.Node("b").Requested.Pods != 0 {
		t.Fatalf("root holds %d pods on b, the snapshot %d: want 1 and 0", root.Node("b").Requested.Pods, s.Node("b").Requested.Pods)
	}
	if root.counts.AntiAffinity != 1 || root.counts.Affinity != 0 {
		t.Fatalf("root counts %d nodes with anti-affinity pods and %d with affinity ones, want 1 and 0", root.counts.AntiAffinity, root.counts.Affinity)
	}
	second := root.Fork()
	second.Assign(cpuPod("q", 1000, gib), Placement{Pod: "ns/q", Node: "a"})
	second.Commit()
	if root.Node("a").Requested.Pods != 1 || root.Node("b").Requested.Pods != 1 {
		t.Fatalf("after a second gang the root holds a=%d b=%d, want 1 and 1", root.Node("a").Requested.Pods, root.Node("b").Requested.Pods)
	}
	if s.Node("a").Requested.Pods != 0 || s.Node("b").Requested.Pods != 0 {
		t.Fatal("the snapshot changed under a view that was never committed")
	}
}

// TestDoneListServesTheNextCycle: a cycle's root view, once done, hands the node
// list it made to the next cycle's first copy, cleared while it waits; the next
// cycle's views hold the snapshot's nodes, not the last cycle's writes. A view that
// is done cannot be used.
func TestDoneListServesTheNextCycle(t *testing.T) {
	s := snapshotOf(gpuNode("a", 1, "H100", 80*gib), gpuNode("b", 1, "H100", 80*gib))
	first := NewSharedView(s)
	f := first.Fork()
	list := &f.nodes[0]
	pod := cpuPod("p", 1000, gib)
	f.Assign(pod, Placement{Pod: pod.ID, Node: "a"})
	f.Commit()
	kept := first.nodes
	first.Done()
	if kept[0] != nil || kept[1] != nil {
		t.Fatal("a list kept for the next cycle still holds its nodes")
	}
	next := NewSharedView(s)
	g := next.Fork()
	if &g.nodes[0] != list {
		t.Fatal("the next cycle's first fork allocated a node list instead of taking the last cycle's")
	}
	if g.Node("a").Requested.Pods != 0 || g.Node("b") != s.Node("b") {
		t.Fatalf("the recycled list holds a=%d pods, want the snapshot's 0", g.Node("a").Requested.Pods)
	}
	g.Assign(pod, Placement{Pod: pod.ID, Node: "b"})
	g.Commit()
	if next.Node("b").Requested.Pods != 1 || s.Node("b").Requested.Pods != 0 {
		t.Fatal("a write to the recycled list reached the snapshot, or not the view")
	}
	next.Done()
	defer func() {
		if recover() == nil {
			t.Fatal("a view could still be read once done")
		}
	}()
	first.Node("a")
}
