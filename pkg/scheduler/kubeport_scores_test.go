package scheduler_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

const ipaScoreSource = "k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/interpodaffinity/scoring_test.go: TestPreferredAffinity/"

func interPodOnly(ipa, _ []int64) []int64 { return ipa }

// TestKubePreferredAffinityScores ports TestPreferredAffinity's score tables.
func TestKubePreferredAffinityScores(t *testing.T) {
	china, india := map[string]string{"region": "China"}, map[string]string{"region": "India"}
	az1, az2 := map[string]string{"az": "az1"}, map[string]string{"az": "az2"}
	chinaAz1 := map[string]string{"region": "China", "az": "az1"}
	s1, s2 := map[string]string{"security": "S1"}, map[string]string{"security": "S2"}
	in1 := func(v string) corev1.PodAffinityTerm { return term("security", in, "region", v) }
	stayS1 := func(p *kpod) *kpod { return p.PrefAff(5, in1("S1")) }
	stayS2 := func(p *kpod) *kpod { return p.PrefAff(6, in1("S2")) }
	awayS1Az := func(p *kpod) *kpod { return p.PrefAnti(5, term("security", in, "az", "S1")) }
	awayS2Az := func(p *kpod) *kpod { return p.PrefAnti(5, term("security", in, "az", "S2")) }
	stayS1AwayS2 := func(p *kpod) *kpod { return p.PrefAff(8, in1("S1")).PrefAnti(5, term("security", in, "az", "S2")) }
	affinity3 := func(p *kpod) *kpod {
		a := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "security", Operator: notIn, Values: []string{"S1"}}, {Key: "security", Operator: in, Values: []string{"S2"}}}}, TopologyKey: "region"}
		b := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "security", Operator: exists}, {Key: "wrongkey", Operator: notExists}}}, TopologyKey: "region"}
		return p.PrefAff(8, a).PrefAff(2, b)
	}
	hard := func(p *kpod) *kpod {
		b := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "security", Operator: exists}, {Key: "wrongkey", Operator: notExists}}}, TopologyKey: "region"}
		return p.Aff(term("security", in, "region", "S1", "value2")).Aff(b)
	}
	nsTerm := func(op metav1.LabelSelectorOperator, namespaces ...string) corev1.PodAffinityTerm {
		t := in1("S1")
		t.Namespaces = namespaces
		t.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: op, Values: []string{"team1"}}}}
		return t
	}
	teams := map[string]map[string]string{
		"subteam1.team1": {"team": "team1"}, "subteam2.team1": {"team": "team1"},
		"subteam1.team2": {"team": "team2"}, "subteam2.team2": {"team": "team2"},
	}
	n := func(name string, labels map[string]string) scenario.Node { return knode(name, labels) }
	on := func(node string, labels map[string]string) *kpod { return mkPod().Labels(labels).Node(node) }
	three := []scenario.Node{n("node1", china), n("node2", india), n("node3", az1)}
	cases := []scoreCase{
		{name: "all nodes are same priority as Affinity is nil", pod: mkPod().Labels(s1), nodes: three},
		{name: "Affinity: pod that matches topology key & pods in nodes will get high score comparing to others which doesn't match either pods in nodes or in topology key",
			pod: stayS1(mkPod().Labels(s1)), pods: []*kpod{on("node1", s1), on("node2", s2), on("node3", s1)}, nodes: three, want: []int64{100, 0, 0}},
		{name: "All the nodes that have the same topology key & label value with one of them has an existing pod that match the affinity rules, have the same score",
			pod: stayS1(mkPod()), pods: []*kpod{on("node1", s1)}, nodes: []scenario.Node{n("node1", china), n("node2", chinaAz1), n("node3", india)}, want: []int64{100, 100, 0}},
		{name: "Affinity: nodes in one region has more matching pods comparing to other region, so the region which has more matches will get high score",
			pod:   stayS2(mkPod().Labels(s1)),
			pods:  []*kpod{on("node1", s2), on("node1", s2), on("node2", s2), on("node3", s2), on("node4", s2), on("node5", s2)},
			nodes: []scenario.Node{n("node1", china), n("node2", india), n("node3", china), n("node4", china), n("node5", india)}, want: []int64{100, 0, 100, 100, 0}},
		{name: "Affinity: different Label operators and values for pod affinity scheduling preference, including some match failures",
			pod: affinity3(mkPod().Labels(s1)), pods: []*kpod{on("node1", s1), on("node2", s2), on("node3", s1)}, nodes: three, want: []int64{20, 100, 0}},
		{name: "Affinity symmetry: considered only the preferredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
			pod: mkPod().Labels(s2), pods: []*kpod{stayS1(on("node1", s1)), stayS2(on("node2", s2))}, nodes: three, want: []int64{0, 100, 0}},
		{name: "Affinity symmetry with namespace selector", nsl: teams,
			pod: mkPod().NS("subteam1.team1").Labels(s1), pods: []*kpod{on("node1", s1).PrefAff(5, nsTerm(in, "subteam2.team2")), stayS2(on("node2", s2))}, nodes: three, want: []int64{100, 0, 0}},
		{name: "AntiAffinity symmetry with namespace selector", nsl: teams,
			pod: mkPod().NS("subteam1.team1").Labels(s1), pods: []*kpod{on("node1", s1).PrefAnti(5, nsTerm(in, "subteam2.team2")), stayS2(on("node2", s2))}, nodes: three, want: []int64{0, 100, 100}},
		{name: "Affinity symmetry: considered RequiredDuringSchedulingIgnoredDuringExecution in pod affinity symmetry",
			pod: mkPod().Labels(s1), pods: []*kpod{hard(on("node1", s1)), hard(on("node2", s2))}, nodes: three, want: []int64{100, 100, 0}},
		{name: "Anti Affinity: pod that does not match existing pods in node will get high score",
			pod: awayS1Az(mkPod().Labels(s1)), pods: []*kpod{on("node1", s1), on("node2", s2)}, nodes: []scenario.Node{n("node1", az1), n("node2", china)}, want: []int64{0, 100}},
		{name: "Anti Affinity: pod that does not match topology key & match the pods in nodes will get higher score comparing to others",
			pod: awayS1Az(mkPod().Labels(s1)), pods: []*kpod{on("node1", s1), on("node2", s1)}, nodes: []scenario.Node{n("node1", az1), n("node2", china)}, want: []int64{0, 100}},
		{name: "Anti Affinity: one node has more matching pods comparing to other node, so the node which has more unmatches will get high score",
			pod: awayS1Az(mkPod().Labels(s1)), pods: []*kpod{on("node1", s1), on("node1", s1), on("node2", s2)}, nodes: []scenario.Node{n("node1", az1), n("node2", india)}, want: []int64{0, 100}},
		{name: "Anti Affinity symmetry: the existing pods in node which has anti affinity match will get high score",
			pod: mkPod().Labels(s2), pods: []*kpod{awayS2Az(on("node1", s1)), awayS1Az(on("node2", s2))}, nodes: []scenario.Node{n("node1", az1), n("node2", az2)}, want: []int64{0, 100}},
		{name: "Affinity and Anti Affinity: considered only preferredDuringSchedulingIgnoredDuringExecution in both pod affinity & anti affinity",
			pod: stayS1AwayS2(mkPod().Labels(s1)), pods: []*kpod{on("node1", s1), on("node2", s1)}, nodes: []scenario.Node{n("node1", china), n("node2", az1)}, want: []int64{100, 0}},
		{name: "Affinity and Anti Affinity: considering both affinity and anti-affinity, the pod to schedule and existing pods have the same labels",
			pod:   stayS1AwayS2(mkPod().Labels(s1)),
			pods:  []*kpod{on("node1", s1), on("node1", s1), on("node2", s1), on("node3", s1), on("node3", s1), on("node4", s1), on("node5", s1)},
			nodes: []scenario.Node{n("node1", chinaAz1), n("node2", india), n("node3", china), n("node4", china), n("node5", india)}, want: []int64{100, 0, 100, 100, 0}},
		{name: "Affinity and Anti Affinity and symmetry: considered only preferredDuringSchedulingIgnoredDuringExecution in both pod affinity & anti affinity & symmetry",
			pod:   stayS1AwayS2(mkPod().Labels(s1)),
			pods:  []*kpod{on("node1", s1), on("node2", s2), stayS1AwayS2(mkPod().Node("node3")), awayS1Az(mkPod().Node("node4"))},
			nodes: []scenario.Node{n("node1", china), n("node2", az1), n("node3", india), n("node4", az2)}, want: []int64{100, 0, 100, 0}},
		{name: "Avoid panic when partial nodes in a topology don't have pods with affinity",
			pod: mkPod().Labels(s1), pods: []*kpod{on("node1", s1), stayS1AwayS2(mkPod().Node("node2"))}, nodes: []scenario.Node{n("node1", china), n("node2", china)}, want: []int64{0, 0}},
		{name: "Affinity with pods matching NamespaceSelector", nsl: teams,
			pod: mkPod().NS("subteam1.team1").Labels(s1).PrefAff(5, nsTerm(in, "subteam2.team2")),
			pods: []*kpod{mkPod().NS("subteam1.team1").Labels(s1).Node("node1"), mkPod().NS("subteam1.team1").Labels(s1).Node("node1"),
				mkPod().NS("subteam1.team2").Labels(s1).Node("node1"), mkPod().NS("subteam2.team1").Labels(s1).Node("node2")},
			nodes: []scenario.Node{n("node1", china), n("node2", india)}, want: []int64{100, 0}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, ipaScoreSource+c.name, interPodOnly) })
	}
}

const spreadScoreSource = "k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/podtopologyspread/scoring_test.go: TestPodTopologySpreadScore/"

func spreadOnly(_, spread []int64) []int64 { return spread }

// failed marks nodes that kube-scheduler's table lists as failedNodes (filtered
// out before scoring): an untolerated NoSchedule taint filters them here too, and
// their pods still count, as in kube-scheduler.
func failed(n scenario.Node) scenario.Node {
	n.Taints = []corev1.Taint{{Key: "failed", Effect: corev1.TaintEffectNoSchedule}}
	return n
}

// TestKubeSpreadScores ports TestPodTopologySpreadScore's cases whose candidates are
// the nodes that pass Gantry's filters too.
func TestKubeSpreadScores(t *testing.T) {
	host := func(name string) scenario.Node { return spreadNode(name, corev1.LabelHostname+"="+name) }
	zh := func(name, zone string) scenario.Node {
		return spreadNode(name, "zone="+zone, corev1.LabelHostname+"="+name)
	}
	soft := func(p *kpod, maxSkew int32, key string, sel *metav1.LabelSelector) *kpod {
		return p.Spread(maxSkew, key, false, sel, nil, nil, nil)
	}
	foo := func() *kpod { return mkPod().Labels(fooL) }
	abxyPods := labelled(fooL, "node-a", "node-a", "node-a", "node-a", "node-b", "node-b", "node-x", "node-y", "node-y", "node-y")
	diffPods := append(append(labelled(fooL, "node-a", "node-y"), labelled(fooBarL, "node-b")...), labelled(barL, "node-y")...)
	fourHosts := []scenario.Node{host("node-a"), host("node-b"), host("node-c"), host("node-d")}
	fourZH := []scenario.Node{zh("node-a", "zone1"), zh("node-b", "zone1"), zh("node-x", "zone2"), zh("node-y", "zone2")}
	threeZHFailedY := []scenario.Node{zh("node-a", "zone1"), zh("node-b", "zone1"), zh("node-x", "zone2"), failed(zh("node-y", "zone2"))}
	cases := []scoreCase{
		{name: "one constraint on node, no existing pods", pod: soft(foo(), 1, corev1.LabelHostname, fooSel),
			nodes: []scenario.Node{host("node-a"), host("node-b")}, want: []int64{100, 100}},
		{name: "one constraint on node, only one node is candidate", pod: soft(foo(), 1, corev1.LabelHostname, fooSel),
			pods: labelled(fooL, "node-a", "node-a", "node-b"), nodes: []scenario.Node{host("node-a"), failed(host("node-b"))}, want: []int64{100}},
		{name: "one constraint on node, all nodes have the same number of matching pods", pod: soft(foo(), 1, corev1.LabelHostname, fooSel),
			pods: labelled(fooL, "node-a", "node-b"), nodes: []scenario.Node{host("node-a"), host("node-b")}, want: []int64{100, 100}},
		{name: "one constraint on node, all 4 nodes are candidates", pod: soft(foo(), 1, corev1.LabelHostname, fooSel),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-d", "node-d", "node-d"), nodes: fourHosts, want: []int64{20, 60, 100, 0}},
		{name: "one constraint on node, null selector", pod: soft(foo(), 1, corev1.LabelHostname, nil),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-d", "node-d", "node-d"), nodes: fourHosts, want: []int64{100, 100, 100, 100}},
		{name: "one constraint on node, all 4 nodes are candidates, maxSkew=2", pod: soft(foo(), 2, corev1.LabelHostname, fooSel),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-d", "node-d", "node-d"), nodes: fourHosts, want: []int64{33, 66, 100, 16}},
		{name: "one constraint on node, all 4 nodes are candidates, maxSkew=3", pod: soft(foo(), 3, corev1.LabelHostname, fooSel),
			pods:  labelled(fooL, "node-a", "node-a", "node-a", "node-a", "node-b", "node-b", "node-b", "node-c", "node-c", "node-d"),
			nodes: fourHosts, want: []int64{44, 66, 77, 100}},
		{name: "one constraint on node, 3 out of 4 nodes are candidates", pod: soft(foo(), 1, corev1.LabelHostname, fooSel), pods: abxyPods,
			nodes: []scenario.Node{host("node-a"), host("node-b"), host("node-x"), failed(host("node-y"))}, want: []int64{33, 83, 100}},
		{name: "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key", pod: soft(foo(), 1, corev1.LabelHostname, fooSel), pods: abxyPods,
			nodes: []scenario.Node{host("node-a"), spreadNode("node-b", "n=node-b"), host("node-x"), failed(host("node-y"))}, want: []int64{16, 0, 100}},
		{name: "one constraint on zone, 3 out of 4 nodes are candidates", pod: soft(foo(), 1, "zone", fooSel), pods: abxyPods,
			nodes: threeZHFailedY, want: []int64{75, 75, 100}},
		{name: "two Constraints on zone and node, 2 out of 4 nodes are candidates",
			pod:   soft(soft(foo(), 1, "zone", fooSel), 1, corev1.LabelHostname, fooSel),
			pods:  labelled(fooL, "node-a", "node-a", "node-b", "node-x", "node-x", "node-y", "node-y", "node-y", "node-y"),
			nodes: []scenario.Node{zh("node-a", "zone1"), failed(zh("node-b", "zone1")), zh("node-x", "zone2"), failed(zh("node-y", "zone2"))}, want: []int64{100, 63}},
		{name: "two Constraints on zone, 2 out of 4 nodes are candidates",
			pod:   soft(soft(mkPod().Labels(fooBarL), 1, "zone", fooSel), 1, "zone", barSel),
			pods:  append(labelled(fooBarL, "node-a", "node-b", "node-y"), labelled(fooL, "node-a", "node-y", "node-y")...),
			nodes: []scenario.Node{spreadNode("node-a", "zone=zone1"), failed(spreadNode("node-b", "zone=zone1")), spreadNode("node-x", "zone=zone2"), failed(spreadNode("node-y", "zone=zone2"))},
			want:  []int64{85, 100}},
		{name: "two Constraints on zone and node, with different labelSelectors",
			pod:  soft(soft(mkPod().Labels(fooBarL), 1, "zone", fooSel), 1, corev1.LabelHostname, barSel),
			pods: diffPods, nodes: fourZH, want: []int64{60, 20, 100, 60}},
		{name: "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
			pod:  soft(soft(mkPod().Labels(fooBarL), 1, "zone", fooSel), 1, corev1.LabelHostname, barSel),
			pods: append(append(labelled(barL, "node-b"), labelled(fooL, "node-x")...), labelled(fooBarL, "node-y")...), nodes: fourZH, want: []int64{100, 60, 40, 0}},
		{name: "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
			pod:  soft(soft(mkPod().Labels(fooBarL), 1, "zone", fooSel), 1, corev1.LabelHostname, barSel),
			pods: diffPods, nodes: threeZHFailedY, want: []int64{50, 25, 100}},
		{name: "existing pods in a different namespace do not count", pod: soft(foo(), 1, corev1.LabelHostname, fooSel),
			pods:  append([]*kpod{mkPod().NS("ns1").Labels(fooL).Node("node-a")}, labelled(fooL, "node-a", "node-b", "node-b")...),
			nodes: []scenario.Node{host("node-a"), host("node-b")}, want: []int64{100, 33}},
		{name: "terminating Pods should be excluded", pod: soft(foo(), 1, corev1.LabelHostname, fooSel),
			pods:  []*kpod{mkPod().Labels(fooL).Node("node-a").Terminating(), mkPod().Labels(fooL).Node("node-b")},
			nodes: []scenario.Node{host("node-a"), host("node-b")}, want: []int64{100, 0}},
		{name: "minDomains has no effect when ScheduleAnyway", pod: foo().Spread(2, "node", false, fooSel, ptr32(10), nil, nil),
			pods:  labelled(fooL, "node-a", "node-a", "node-b", "node-b", "node-c"),
			nodes: []scenario.Node{spreadNode("node-a", "node=node-a"), spreadNode("node-b", "node=node-b"), spreadNode("node-c", "node=node-c")}, want: []int64{75, 75, 100}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.check(t, spreadScoreSource+c.name, spreadOnly) })
	}
}
