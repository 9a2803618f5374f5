package placement

import (
	"fmt"
	"slices"
	"sync"

	"github.com/gantry-dev/gantry/pkg/model"
)

// View is a copy-on-write overlay of a snapshot's nodes. Writes never change a
// node in place: each Assign or Release replaces the node with a changed copy, so a
// transaction can be thrown away by dropping its View, a *model.Node a caller holds
// never changes under it, and a Placer can cache what it computed about a node by its
// pointer. Fork and Commit nest transactions (a gang, a preemption simulation).
//
// A fork costs what changed, not the cluster's size: a committed fork hands its node
// slice back to its parent (see spare), and the next Fork brings that slice up to
// date with only the nodes written since, so a cycle that places one gang after
// another copies the node list once, not once per gang. A committed fork is spent:
// using it again panics.
//
// A View sees the nodes the snapshot had when NewView was called (NewSharedView: as
// long as the snapshot does not change). It is not safe for concurrent use; while a
// fork is open, write only through the fork.
type View struct {
	snapshot *model.Snapshot
	parent   *View
	// nodes is the current state, in the snapshot's node order.
	nodes []*model.Node
	// shared says nodes is still the snapshot's own list (NewSharedView): the
	// first write copies it, or takes over a committed fork's list (adopt).
	shared bool
	// touched lists, in first-write order, the nodes written since this view was
	// made or last committed; Commit hands exactly these to the parent. touchedSet
	// indexes it once it is long enough for a scan to cost more than a map.
	touched    []int
	touchedSet map[int]struct{}
	// counts are the view's nodes counted by what lets a pod without constraints
	// skip the inter-pod and PreferNoSchedule checks when no node calls for them.
	counts model.NodeCounts
	// volumes are the available PersistentVolumes that pods assigned in this view
	// took for their WaitForFirstConsumer claims (Placement.Volumes), so that no
	// other pod of the cycle takes one again; a fork's reach its parent on Commit,
	// and volumeTaken looks up the ancestors too.
	volumes map[string]struct{}
	recycling
}

// NewView returns a root view of s. Committing it writes the changed nodes into s.
func NewView(s *model.Snapshot) *View {
	v := NewSharedView(s)
	v.nodes, v.shared = slices.Clone(s.Nodes), false
	return v
}

// NewSharedView is NewView for a snapshot that does not change while the view is in
// use: the view reads the snapshot's node list in place until its first write, so a
// scheduling cycle (which holds its snapshot still) copies no node list when it places
// nothing, and one, its first fork's, when it places one gang: the root takes the
// fork's list over when the fork commits, rather than copying its own (adopt). At
// 5,000 nodes each copy was 40 KB and most of an idle cycle (BenchmarkBoundCycle).
func NewSharedView(s *model.Snapshot) *View {
	return &View{snapshot: s, nodes: s.Nodes, shared: true, counts: s.NodeCounts()}
}

// nodeLists keeps the node lists of root views that are done (Done) for the next
// copy of a node list: at steady arrivals each cycle copies the snapshot's list once,
// for its first fork, and a new list of N pointers a cycle was 15 % of
// gantry-scheduler's allocations at 100 pods/s on 2,000 nodes (session 17,
// docs/benchmarks.md). The lists are kept cleared; at most maxNodeLists (a cycle
// releases one or two, and one scheduler runs one cycle at a time).
var nodeLists struct {
	sync.Mutex
	lists [][]*model.Node
}

const maxNodeLists = 4

// copyNodes returns a copy of nodes, in a list kept by Done when one is long enough.
func copyNodes(nodes []*model.Node) []*model.Node {
	nodeLists.Lock()
	var list []*model.Node
	for i := len(nodeLists.lists) - 1; i >= 0; i-- {
		if l := nodeLists.lists[i]; cap(l) >= len(nodes) {
			list = l
			nodeLists.lists = slices.Delete(nodeLists.lists, i, i+1)
			break
		}
	}
	nodeLists.Unlock()
	if list == nil {
		return slices.Clone(nodes)
	}
	return append(list[:0], nodes...)
}

// keepNodes keeps a list no view holds any more for copyNodes.
func keepNodes(list []*model.Node) {
	clear(list) // holds no node alive while it waits
	nodeLists.Lock()
	if len(nodeLists.lists) < maxNodeLists {
		nodeLists.lists = append(nodeLists.lists, list)
	}
	nodeLists.Unlock()
}

// Done ends the use of a root view: the node list it made, if any, is kept for a
// later copy (nodeLists). v and its forks must not be used again. A scheduling cycle
// is done with its view when it has built its plan.
func (v *View) Done() {
	v.usable()
	if v.parent == nil {
		for _, nodes := range [][]*model.Node{v.ownNodes(), v.spare} {
			if nodes != nil {
				keepNodes(nodes)
			}
		}
	}
	v.nodes, v.spare, v.written, v.spent = nil, nil, nil, true
}

// ownNodes is v's node list when v made it (not the snapshot's), else nil.
func (v *View) ownNodes() []*model.Node {
	if v.shared {
		return nil
	}
	return v.nodes
}

// setNode replaces the i-th node, keeping counts.
func (v *View) setNode(i int, n *model.Node) {
	if v.shared {
		v.nodes, v.shared = copyNodes(v.nodes), false
	}
	v.counts.Add(v.nodes[i], -1)
	v.counts.Add(n, 1)
	v.nodes[i] = n
	v.logWrite(i)
}

// Fork returns a child transaction: it starts as v's current state, and its writes
// reach v only on Commit.
// It costs the nodes written in v since the last fork of v was committed (or, the
// first time, a copy of v's node list).
func (v *View) Fork() *View {
	v.usable()
	f := &View{
		snapshot: v.snapshot,
		parent:   v,
		nodes:    v.forkNodes(),
		counts:   v.counts,
	}
	f.forkedAt, f.forkEpoch = len(v.written), v.epoch
	return f
}

// Commit applies this view's writes to its parent, or, for a root view, to the
// snapshot (replacing the changed nodes there). A root view stays usable; a fork is
// spent, its node list handed to the parent for its next Fork: do not use it again.
func (v *View) Commit() {
	v.usable()
	adopted := v.parent != nil && v.parent.shared
	if adopted {
		v.parent.adopt(v)
	}
	for _, i := range v.touched {
		switch {
		case adopted:
		case v.parent != nil:
			v.parent.setNode(i, v.nodes[i])
			v.parent.touch(i)
		default:
			v.snapshot.AddNode(v.nodes[i])
		}
	}
	v.touched = v.touched[:0]
	v.touchedSet = nil
	if v.parent != nil && len(v.volumes) > 0 {
		if v.parent.volumes == nil {
			v.parent.volumes = map[string]struct{}{}
		}
		for pv := range v.volumes {
			v.parent.volumes[pv] = struct{}{}
		}
		clear(v.volumes)
	}
	switch {
	case adopted:
		v.nodes, v.spare, v.written, v.spent = nil, nil, nil, true
	case v.parent != nil:
		v.parent.park(v)
	}
}

// adopt takes a fork's node list, as the fork commits, as v's own: v is shared (it
// has written nothing, so it has no spare either), and the fork's list is v's nodes
// with the fork's writes. It does what setNode and touch would for each of them.
func (v *View) adopt(f *View) {
	for _, i := range f.touched {
		v.counts.Add(v.nodes[i], -1)
		v.counts.Add(f.nodes[i], 1)
	}
	v.nodes, v.shared = f.nodes, false
	for _, i := range f.touched {
		v.logWrite(i)
		v.touch(i)
	}
}

// Node returns the named node's current state, or nil. Callers must not modify it.
func (v *View) Node(name string) *model.Node {
	v.usable()
	i := v.snapshot.NodeIndex(name)
	if i < 0 || i >= len(v.nodes) {
		return nil
	}
	return v.nodes[i]
}

// NodeCount is the number of nodes the view holds.
func (v *View) NodeCount() int { v.usable(); return len(v.nodes) }

// NodeAt returns the i-th node's current state in snapshot order. Callers must not
// modify it.
func (v *View) NodeAt(i int) *model.Node { return v.nodes[i] }

// Assign books pod p at pl: its CPU, memory and pod count on the node, and its GPU
// shares (model.Node.Book, on a copy of the node). It does not change p. It panics
// when pl names a node or a GPU the view does not hold, which is a bug in the caller
// (placements come from this view).
func (v *View) Assign(p *model.Pod, pl Placement) {
	v.usable()
	i, n := v.writable(pl.Node)
	for _, b := range pl.GPUs {
		if n.GPUByIndex(b.Index) == nil {
			panic(fmt.Sprintf("placement: assign %s: node %s has no GPU %d", p.ID, pl.Node, b.Index))
		}
	}
	v.takeVolumes(p, n, pl)
	n.Book(p, pl.GPUs)
	v.setNode(i, n)
}

// Release undoes the booking of a bound pod (p.Node, p.GPUs): what preemption
// would free. A pod that is not bound, or whose node the view lacks, changes nothing.
func (v *View) Release(p *model.Pod) {
	v.usable()
	if !p.Bound() || v.Node(p.Node) == nil {
		return
	}
	i, n := v.writable(p.Node)
	n.Unbook(p, p.GPUs)
	v.setNode(i, n)
}

// writable returns a fresh copy of the named node for a write, and marks it touched.
func (v *View) writable(name string) (int, *model.Node) {
	i := v.snapshot.NodeIndex(name)
	if i < 0 || i >= len(v.nodes) {
		panic(fmt.Sprintf("placement: node %q is not in the view", name))
	}
	v.touch(i)
	return i, v.nodes[i].Clone()
}

// touchedScan is how many touched nodes are searched by a scan before touchedSet
// indexes them: a gang touches a few nodes, a preemption a few more.
const touchedScan = 16

func (v *View) touch(i int) {
	if v.touchedSet != nil {
		if _, ok := v.touchedSet[i]; ok {
			return
		}
		v.touchedSet[i] = struct{}{}
	} else if slices.Contains(v.touched, i) {
		return
	} else if len(v.touched) >= touchedScan {
		v.touchedSet = make(map[int]struct{}, 2*touchedScan)
		for _, t := range v.touched {
			v.touchedSet[t] = struct{}{}
		}
		v.touchedSet[i] = struct{}{}
	}
	v.touched = append(v.touched, i)
}
