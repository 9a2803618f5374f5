package placement

import (
	"math"

	"github.com/google/btree"

	"github.com/gantry-dev/gantry/pkg/model"
)

// rankIndex keeps, for one pod shape, the nodes it fits ordered by their rank, so
// that PlacePod for a plain pod (no node affinity, no device choices, no inter-pod
// constraints in play) finds the best node without ranking every node: it compares
// the view's node pointers with the ones the index last saw (a View never changes a
// node in place) and re-ranks only those that differ. At 5,000 nodes a drain
// placed each pod by ranking 5,000 cached verdicts; now it re-ranks the few nodes
// the last gang took.
//
// The choice is the linear scan's: the least rank, and among equal ranks the
// first node in snapshot order. Nodes that are cordoned or tainted are left out of
// the index and checked per pod, since whether they fit depends on the pod's
// tolerations, which pods of one shape need not share. A rank with a NaN, which
// has no order, turns the index off for its shape.
type rankIndex struct {
	key        shapeKey
	generation uint64
	// seen are the node pointers the index was brought up to date with; ranked
	// holds, per node, whether it is in the tree and with what entry.
	seen    []*model.Node
	ranked  []rankEntry
	tree    *btree.BTreeG[rankEntry]
	special []int // cordoned or tainted nodes, checked per pod
	broken  bool  // a NaN rank was seen
	used    uint64
	// wantGeneration and wantNodes are the workload and node count last asked for
	// while the index was out of date: a rebuild waits for a second ask.
	wantGeneration uint64
	wantNodes      int
}

type rankEntry struct {
	rank  rank
	index int
	gpu   int
	in    bool
}

func entryLess(a, b rankEntry) bool {
	if a.rank.less(b.rank) {
		return true
	}
	if b.rank.less(a.rank) {
		return false
	}
	return a.index < b.index
}

// rankIndexes are a Placer's indexes, one per shape placed recently.
type rankIndexes struct {
	list []*rankIndex
	use  uint64
	// scanOnly turns the indexes off (tests compare them with the scan).
	scanOnly bool
}

// maxRankIndexes bounds the shapes indexed at once; the least recently used goes.
const maxRankIndexes = 4

// indexedBest returns what the linear scan of PlacePod would: the best node's
// index and GPU choice, -1 when none fits. ok is false when the caller must scan:
// a pod with node affinity, device choices or inter-pod constraints in play; an
// index out of date with the workload or the node count, until the same are asked
// for twice (a Placer made for one gang, as PlaceGang's best-fit retry is, or a mix
// that changes with every pod would build indexes never used again); a NaN rank.
func (p *Placer) indexedBest(v *View, q *podQuery, cs *constraintState) (best, gpu int, ok bool) {
	if p.ranks.scanOnly || cs != nil || q.chosen != nil || q.terms.affinity != nil {
		return -1, -1, false
	}
	x := p.rankIndexFor(q.key)
	if !x.sync(p, v, q) || x.broken {
		return -1, -1, false
	}
	best, gpu = -1, -1
	var bestRank rank
	if m, found := x.tree.Min(); found {
		best, bestRank, gpu = m.index, m.rank, m.gpu
	}
	for _, i := range x.special {
		n := v.nodes[i]
		if q.terms.staticMisfit(n) != fits {
			continue
		}
		vd := p.verdict(p.cacheFor(i, n), n, q)
		if vd.misfit != fits {
			continue
		}
		if best < 0 || vd.rank.less(bestRank) || (!bestRank.less(vd.rank) && i < best) {
			best, bestRank, gpu = i, vd.rank, vd.gpu
		}
	}
	return best, gpu, true
}

// rankIndexFor returns the index of key, making an empty one when there is none
// (dropping the least recently used beyond maxRankIndexes); sync builds it on a
// later ask.
func (p *Placer) rankIndexFor(key shapeKey) *rankIndex {
	r := &p.ranks
	r.use++
	for _, x := range r.list {
		if x.key == key {
			x.used = r.use
			return x
		}
	}
	x := &rankIndex{key: key, used: r.use}
	if len(r.list) < maxRankIndexes {
		r.list = append(r.list, x)
		return x
	}
	oldest := 0
	for i, y := range r.list {
		if y.used < r.list[oldest].used {
			oldest = i
		}
	}
	r.list[oldest] = x
	return x
}

// sync brings the index up to date with v's nodes: the nodes whose pointer differs
// from the last sync; from scratch when the workload (and so every rank) changed
// or the node list did. A rebuild costs more than one scan, so it waits until the
// same workload and node count are asked for twice (a mix that changes with every
// pod keeps the scan); sync reports false when the caller must scan.
func (x *rankIndex) sync(p *Placer, v *View, q *podQuery) bool {
	if x.tree == nil || x.generation != p.generation || len(x.seen) != len(v.nodes) {
		if x.wantGeneration != p.generation || x.wantNodes != len(v.nodes) {
			x.wantGeneration, x.wantNodes, x.tree = p.generation, len(v.nodes), nil
			return false
		}
		x.generation, x.broken, x.special = p.generation, false, x.special[:0]
		x.seen = make([]*model.Node, len(v.nodes))
		x.ranked = make([]rankEntry, len(v.nodes))
		x.tree = btree.NewG(16, entryLess)
	}
	specialChanged := false
	for i, n := range v.nodes {
		if x.seen[i] == n {
			continue
		}
		wasSpecial := x.seen[i] != nil && isSpecial(x.seen[i])
		x.seen[i] = n
		if e := x.ranked[i]; e.in {
			x.tree.Delete(e)
		}
		x.ranked[i] = rankEntry{}
		if special := isSpecial(n); special || wasSpecial {
			specialChanged = true
			if special {
				continue
			}
		}
		vd := p.verdict(p.cacheFor(i, n), n, q)
		if vd.misfit != fits {
			continue
		}
		if hasNaN(vd.rank) {
			x.broken = true
		}
		e := rankEntry{rank: vd.rank, index: i, gpu: vd.gpu, in: true}
		x.ranked[i] = e
		x.tree.ReplaceOrInsert(e)
	}
	if specialChanged {
		x.special = x.special[:0]
		for i, n := range x.seen {
			if isSpecial(n) {
				x.special = append(x.special, i)
			}
		}
	}
	return true
}

// isSpecial: whether a pod of an indexed shape fits depends on the pod, not only
// on its shape (cordon and taints against its tolerations).
func isSpecial(n *model.Node) bool { return n.Unschedulable || len(n.Taints) > 0 }

func hasNaN(r rank) bool {
	for _, f := range r {
		if math.IsNaN(f) {
			return true
		}
	}
	return false
}
