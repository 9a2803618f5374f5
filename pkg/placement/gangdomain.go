package placement

import (
	"cmp"
	"maps"
	"slices"

	"github.com/gantry-dev/gantry/pkg/model"
)

// A gang whose members must share a topology domain (required pod affinity between
// members: "all workers in one zone") is placed member by member, and the first
// member goes where packing puts it. When that domain cannot hold the rest, the gang
// would wait even though another domain could hold all of it. PlaceGang then tries
// the gang pinned to one domain at a time, the domains with the most idle GPUs first.

// maxGangDomains bounds the domains tried for one gang: a zone or rack key has a
// few, a hostname key has one per node, and the largest domains are the likely ones.
const maxGangDomains = 16

// sharedDomainKey is the topology key of a required affinity term of one member
// that selects another member of the gang, or "" when there is none.
func sharedDomainKey(v *View, pods []*model.Pod) string {
	for _, p := range pods {
		if p.Constraints == nil {
			continue
		}
		for i := range p.Constraints.Affinity {
			t := &p.Constraints.Affinity[i]
			for _, other := range pods {
				if other != p && t.Matches(other, v.snapshot.NamespaceLabels[other.Namespace()]) {
					return t.TopologyKey
				}
			}
		}
	}
	return ""
}

// gangDomains lists the values of key on v's nodes, the most idle GPUs first (then
// by name), at most maxGangDomains of them.
func gangDomains(v *View, key string) []string {
	idle := map[string]int{}
	for _, n := range v.nodes {
		if d, ok := n.Labels[key]; ok && !n.Unschedulable {
			idle[d] += n.IdleGPUs()
		}
	}
	domains := slices.Collect(maps.Keys(idle))
	slices.SortFunc(domains, func(a, b string) int {
		if c := cmp.Compare(idle[b], idle[a]); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	return domains[:min(len(domains), maxGangDomains)]
}

// pinned returns copies of pods that may only go to nodes whose label key is value,
// or nil when a member's own node selector asks for another value. The copies keep
// their IDs, so their placements are the originals'; their own node selectors and
// affinity still apply.
func pinned(pods []*model.Pod, key, value string) []*model.Pod {
	out := make([]*model.Pod, len(pods))
	for i, p := range pods {
		if own, ok := p.NodeSelector[key]; ok && own != value {
			return nil
		}
		c := *p
		c.NodeSelector = maps.Clone(p.NodeSelector)
		if c.NodeSelector == nil {
			c.NodeSelector = map[string]string{}
		}
		c.NodeSelector[key] = value
		out[i] = &c
	}
	return out
}

// placeInOneDomain tries the gang in each of its shared domains in turn, with the
// placer that failed first; ok is false when none holds it (or it shares none).
func (p *Placer) placeInOneDomain(v *View, pods []*model.Pod, order []int) ([]Placement, bool) {
	key := sharedDomainKey(v, pods)
	if key == "" {
		return nil, false
	}
	for _, d := range gangDomains(v, key) {
		members := pinned(pods, key, d)
		if members == nil {
			continue
		}
		if a := p.tryGang(v, members, order); a.failed == nil {
			a.fork.Commit()
			return a.placements, true
		}
	}
	return nil, false
}
