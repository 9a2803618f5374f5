package placement

import "github.com/gantry-dev/gantry/pkg/model"

// recycling lets a View hand the node list of a committed fork to its next fork,
// so that Fork costs the nodes written since rather than a copy of every node (a
// cycle forks once per gang; at 5,000 nodes a copy was 40 KB and most of a one-pod
// gang's cost beside PlacePod).
//
// A committed fork's nodes equal its parent's except at the nodes the parent wrote
// after the fork was made (the fork's own writes reach the parent on Commit, and a
// parent is written while a fork is open only when that fork is then dropped, but a
// careless caller is tolerated): the parent logs the index of every node it writes,
// and the spare list is brought up to date from the log. The log is cut when it
// grows past a quarter of the nodes (a copy is then as cheap); the epoch tells the
// forks made before a cut, and the spare kept from before it, that the log no longer
// covers them.
type recycling struct {
	// spare is the node list of the last fork committed into this view, equal to
	// nodes but at the indices in written[spareAt:].
	spare   []*model.Node
	spareAt int
	// written logs, in order, the index of every node setNode wrote since the last
	// cut; epoch counts the cuts.
	written []int
	epoch   int
	// forkedAt and forkEpoch are, for a fork, its parent's len(written) and epoch
	// when the fork was made.
	forkedAt, forkEpoch int
	// spent is set once a fork has committed and handed its nodes to its parent.
	spent bool
}

// logWrite records that the i-th node was written, and cuts the log (dropping the
// spare) once bringing a spare up to date would cost as much as a copy.
func (v *View) logWrite(i int) {
	v.written = append(v.written, i)
	if len(v.written) > max(64, len(v.nodes)/4) {
		v.written = v.written[:0]
		v.epoch++
		v.spare = nil
	}
}

// forkNodes returns a node list equal to v's for a new fork: the spare brought up
// to date, or a copy when there is none.
func (v *View) forkNodes() []*model.Node {
	nodes := v.spare
	if nodes == nil {
		return copyNodes(v.nodes)
	}
	v.spare = nil
	for _, i := range v.written[v.spareAt:] {
		nodes[i] = v.nodes[i]
	}
	return nodes
}

// park takes a fork's node list, just committed into v, as v's spare, when v's log
// still covers what v wrote since the fork was made. The fork is spent.
func (v *View) park(f *View) {
	if f.forkEpoch == v.epoch && len(f.nodes) == len(v.nodes) {
		v.spare, v.spareAt = f.nodes, f.forkedAt
	}
	f.nodes, f.spare, f.written, f.spent = nil, nil, nil, true
}

// usable panics when v is a fork that has committed: its node list now belongs to
// its parent's next fork.
func (v *View) usable() {
	if v.spent {
		panic("placement: a View used after its Commit (a fork is spent once committed; fork its parent again)")
	}
}
