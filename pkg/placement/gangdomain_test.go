package placement

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/model"
)

// zoneGang is n members with 4 GPUs each, each required to share a zone with the
// others (app=ring).
func zoneGang(n int) []*model.Pod {
	pods := make([]*model.Pod, n)
	for i := range pods {
		p := gpuPod(fmt.Sprintf("ring-%d", i), 4, 1000, 1<<30)
		p.Labels = map[string]string{"app": "ring"}
		p.Constraints = &model.Constraints{Affinity: []model.AffinityTerm{selfTerm("ring", corev1.LabelTopologyZone)}}
		pods[i] = p
	}
	return pods
}

func zoned(n *model.Node, zone string) *model.Node {
	n.Labels[corev1.LabelTopologyZone] = zone
	return n
}

// The first member goes where packing puts it: a half-used node in zone a, which
// cannot hold the other two. Zone b can hold all three, so the gang goes there.
func TestGangThatMustShareAZoneTriesEachZone(t *testing.T) {
	s := snapshotOf(
		zoned(gpuNode("a1", 8, "H100", 80<<30), "a"),
		zoned(gpuNode("b1", 8, "H100", 80<<30), "b"),
		zoned(gpuNode("b2", 8, "H100", 80<<30), "b"),
	)
	for _, policy := range []string{"", "bestfit"} {
		t.Run("policy="+policy, func(t *testing.T) {
			p, err := NewOnline(policy)
			if err != nil {
				t.Fatal(err)
			}
			v := NewView(s)
			filler := gpuPod("filler", 4, 1000, 1<<30)
			pl, u := p.PlacePod(v, filler)
			if u != nil || pl.Node != "a1" {
				t.Fatalf("filler: %v %v", pl, u)
			}
			v.Assign(filler, pl)

			gang := zoneGang(3)
			placements, u := p.PlaceGang(v, gang)
			if u != nil {
				t.Fatalf("the gang fits zone b whole, got: %s", u.Message)
			}
			for i, pl := range placements {
				if pl.Pod != gang[i].ID || (pl.Node != "b1" && pl.Node != "b2") {
					t.Errorf("member %d: %+v, want it in zone b under its own ID", i, pl)
				}
			}
			if gang[0].NodeSelector != nil {
				t.Errorf("the caller's pod was changed: %v", gang[0].NodeSelector)
			}
		})
	}
}

// No zone holds the gang: it is refused, and the view is left as it was.
func TestGangThatNoZoneHoldsIsRefused(t *testing.T) {
	p, v := zonedPlacer(t, "a", "b")
	if _, u := p.PlaceGang(v, zoneGang(3)); u == nil {
		t.Fatal("3 x 4 GPUs in one zone of 8 GPUs was placed")
	}
	for _, name := range []string{"a1", "b1"} {
		if idle := v.Node(name).IdleGPUs(); idle != 8 {
			t.Errorf("%s: %d idle GPUs after a refused gang, want 8", name, idle)
		}
	}
}

// Pinning a gang to a domain never overrides a member's own node selector for the
// same key (found by test/oracle, world 170).
func TestGangDomainKeepsTheMembersOwnSelector(t *testing.T) {
	p, v := zonedPlacer(t, "a", "b", "b")
	gang := zoneGang(3)
	for _, m := range gang {
		m.NodeSelector = map[string]string{corev1.LabelTopologyZone: "a"}
	}
	if pls, u := p.PlaceGang(v, gang); u == nil {
		t.Fatalf("a gang whose members select zone a, which cannot hold it, was placed: %+v", pls)
	}
}

// zonedPlacer is the default placer and a view of idle 8-GPU nodes, one per zone
// given, named after their zone and their number in it (a1, b1, b2).
func zonedPlacer(t *testing.T, zones ...string) (*Placer, *View) {
	t.Helper()
	var nodes []*model.Node
	seen := map[string]int{}
	for _, z := range zones {
		seen[z]++
		nodes = append(nodes, zoned(gpuNode(fmt.Sprintf("%s%d", z, seen[z]), 8, "H100", 80<<30), z))
	}
	p, err := NewOnline("")
	if err != nil {
		t.Fatal(err)
	}
	return p, NewView(snapshotOf(nodes...))
}
