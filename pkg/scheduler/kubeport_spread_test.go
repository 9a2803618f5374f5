package scheduler_test

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

const spreadSource = "k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/podtopologyspread/filtering_test.go: "

var (
	fooSel       = existsSel("foo")
	barSel       = existsSel("bar")
	honor        = corev1.NodeInclusionPolicyHonor
	ignore       = corev1.NodeInclusionPolicyIgnore
	cordonTaints = []corev1.Taint{{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}}
)

// spreadNode is "name zone=z1 node=name" style: a node from "key=value" pairs.
func spreadNode(name string, pairs ...string) scenario.Node {
	labels := map[string]string{}
	for _, p := range pairs {
		k, v, _ := strings.Cut(p, "=")
		labels[k] = v
	}
	return knode(name, labels)
}

// fourNodes are node-a and node-b in zone1, node-x and node-y in zone2, each with
// its name as label "node".
func fourNodes() []scenario.Node {
	return []scenario.Node{
		spreadNode("node-a", "zone=zone1", "node=node-a"), spreadNode("node-b", "zone=zone1", "node=node-b"),
		spreadNode("node-x", "zone=zone2", "node=node-x"), spreadNode("node-y", "zone=zone2", "node=node-y"),
	}
}

// labelled are running pods with the given labels, one per node listed.
func labelled(labels map[string]string, nodes ...string) []*kpod {
	var out []*kpod
	for _, n := range nodes {
		out = append(out, mkPod().Labels(labels).Node(n))
	}
	return out
}

var fooL, barL, fooBarL = map[string]string{"foo": ""}, map[string]string{"bar": ""}, map[string]string{"foo": "", "bar": ""}

func hardSpread(p *kpod, maxSkew int32, key string, sel *metav1.LabelSelector) *kpod {
	return p.Spread(maxSkew, key, true, sel, nil, nil, nil)
}

func ptr32(v int32) *int32 { return &v }

// TestKubeSpreadSingleConstraint ports TestSingleConstraint.
func TestKubeSpreadSingleConstraint(t *testing.T) {
	foo := func() *kpod { return mkPod().Labels(fooL) }
	threeNodes := []scenario.Node{spreadNode("node-a", "node=node-a"), spreadNode("node-b", "node=node-b"), spreadNode("node-c", "node=node-c")}
	fooNodes := []scenario.Node{spreadNode("node-a", "node=node-a", "foo="), spreadNode("node-b", "node=node-b", "foo="), spreadNode("node-x", "node=node-x", "foo="), spreadNode("node-y", "node=node-y")}
	taintedY := []scenario.Node{spreadNode("node-a", "node=node-a", "foo="), spreadNode("node-b", "node=node-b", "foo="), spreadNode("node-x", "node=node-x", "foo="), spreadNode("node-y", "node=node-y")}
	taintedY[3].Taints = cordonTaints
	nodeAffinityFoo := func() *kpod {
		p := foo()
		p.affinity().NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "foo", Operator: corev1.NodeSelectorOpIn, Values: []string{""}}}}}}}
		return p
	}
	notB := func() *kpod {
		p := foo()
		p.affinity().NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{
			MatchExpressions: []corev1.NodeSelectorRequirement{{Key: "node", Operator: corev1.NodeSelectorOpNotIn, Values: []string{"node-b"}}}}}}}
		return p
	}
	realChain := "Gantry runs the whole filter chain, so nodes the case marks 'in real case, it's false' (NodeAffinity or TaintToleration reject them) are not in FitsOn"
	cases := []filterCase{
		{name: "no existing pods", pod: hardSpread(foo(), 1, "zone", fooSel), nodes: fourNodes(), fits: []string{"node-a", "node-b", "node-x", "node-y"}},
		{name: "no existing pods, incoming pod doesn't match itself", pod: hardSpread(foo(), 1, "zone", barSel), nodes: fourNodes(), fits: []string{"node-a", "node-b", "node-x", "node-y"}},
		{name: "existing pods in a different namespace do not count", pod: hardSpread(foo(), 1, "zone", fooSel), nodes: fourNodes(),
			pods: []*kpod{mkPod().NS("ns1").Labels(fooL).Node("node-a"), mkPod().NS("ns2").Labels(fooL).Node("node-a"), mkPod().Labels(fooL).Node("node-x"), mkPod().Labels(fooL).Node("node-y")},
			fits: []string{"node-a", "node-b"}},
		{name: "existing pods do not match null selector", pod: hardSpread(foo(), 1, "zone", nil), nodes: fourNodes(),
			pods: labelled(fooL, "node-x", "node-y"), fits: []string{"node-a", "node-b", "node-x", "node-y"}},
		{name: "pods spread across zones as 3/3, all nodes fit", pod: hardSpread(foo(), 1, "zone", fooSel), nodes: fourNodes(),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-y", "node-y", "node-y"), fits: []string{"node-a", "node-b", "node-x", "node-y"}},
		{name: "pods spread across zones as 1/2 due to absence of label 'zone' on node-b", pod: hardSpread(foo(), 1, "zone", fooSel),
			nodes: []scenario.Node{spreadNode("node-a", "zone=zone1", "node=node-a"), spreadNode("node-b", "zon=zone1", "node=node-b"), spreadNode("node-x", "zone=zone2", "node=node-x"), spreadNode("node-y", "zone=zone2", "node=node-y")},
			pods:  labelled(fooL, "node-a", "node-b", "node-x", "node-y"), fits: []string{"node-a"}},
		{name: "pod cannot be scheduled as all nodes don't have label 'rack'", pod: hardSpread(foo(), 1, "rack", fooSel),
			nodes: []scenario.Node{spreadNode("node-a", "zone=zone1", "node=node-a"), spreadNode("node-x", "zone=zone2", "node=node-x")}},
		{name: "pods spread across nodes as 2/1/0/3, only node-x fits", pod: hardSpread(foo(), 1, "node", fooSel), nodes: fourNodes(),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-y", "node-y", "node-y"), fits: []string{"node-x"}},
		{name: "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit", pod: hardSpread(foo(), 2, "node", fooSel), nodes: fourNodes(),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-y", "node-y", "node-y"), fits: []string{"node-b", "node-x"}},
		{name: "pods spread across nodes as 2/1/0/3, but pod doesn't match itself", pod: hardSpread(mkPod().Labels(barL), 1, "node", fooSel), nodes: fourNodes(),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-y", "node-y", "node-y"), fits: []string{"node-b", "node-x"}},
		{name: "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits", pod: hardSpread(foo().NodeAffinityIn("node", "node-a", "node-y"), 1, "node", fooSel), nodes: fourNodes(),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-y", "node-y", "node-y"), fits: []string{"node-a"}, differs: realChain},
		{name: "terminating Pods should be excluded", pod: hardSpread(foo(), 1, "node", fooSel),
			nodes: []scenario.Node{spreadNode("node-a", "node=node-a"), spreadNode("node-b", "node=node-b")},
			pods:  []*kpod{mkPod().Labels(fooL).Node("node-a").Terminating(), mkPod().Labels(fooL).Node("node-b")}, fits: []string{"node-a"}},
		{name: "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits", pod: hardSpread(notB(), 1, "zone", fooSel), nodes: fourNodes(),
			pods: labelled(fooL, "node-b", "node-b", "node-y"), fits: []string{"node-a"}, differs: realChain},
		{name: "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node fits",
			pod: foo().Spread(2, "node", true, fooSel, ptr32(4), nil, nil), nodes: threeNodes,
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-b", "node-c"), fits: []string{"node-c"}},
		{name: "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes fit",
			pod: foo().Spread(2, "node", true, fooSel, ptr32(2), nil, nil), nodes: threeNodes,
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-b", "node-c"), fits: []string{"node-a", "node-b", "node-c"}},
		{name: "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth nodes fit",
			pod: foo().Spread(2, "zone", true, fooSel, ptr32(3), nil, nil), nodes: fourNodes(),
			pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x", "node-y"}},
		{name: "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all nodes fit",
			pod: foo().Spread(2, "zone", true, fooSel, ptr32(1), nil, nil), nodes: fourNodes(),
			pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-a", "node-b", "node-x", "node-y"}},
		{name: "NodeAffinityPolicy honored with labelSelectors", pod: hardSpread(foo().NodeSelector(fooL), 1, "node", fooSel), nodes: fooNodes,
			pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"}, differs: realChain},
		{name: "NodeAffinityPolicy ignored with labelSelectors", pod: foo().NodeSelector(fooL).Spread(1, "node", true, fooSel, nil, &ignore, nil), nodes: fooNodes,
			pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"}},
		{name: "NodeAffinityPolicy honored with nodeAffinity", pod: hardSpread(nodeAffinityFoo(), 1, "node", fooSel), nodes: fooNodes,
			pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"}, differs: realChain},
		{name: "NodeAffinityPolicy ignored with nodeAffinity", pod: nodeAffinityFoo().Spread(1, "node", true, fooSel, nil, &ignore, nil), nodes: fooNodes,
			pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"}},
		{name: "NodeTaintsPolicy honored", pod: foo().Spread(1, "node", true, fooSel, nil, nil, &honor), nodes: taintedY,
			pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"}, differs: realChain},
		{name: "NodeTaintsPolicy ignored", pod: hardSpread(foo(), 1, "node", fooSel), nodes: taintedY,
			pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, spreadSource+"TestSingleConstraint/"+c.name) })
	}
}

// TestKubeSpreadMultipleConstraints ports TestMultipleConstraints.
func TestKubeSpreadMultipleConstraints(t *testing.T) {
	foo := func() *kpod { return mkPod().Labels(fooL) }
	zoneNode := func(p *kpod, zoneSel, nodeSel *metav1.LabelSelector) *kpod {
		return hardSpread(hardSpread(p, 1, "zone", zoneSel), 1, "node", nodeSel)
	}
	inclusionNodes := func(fooOn string, taintY bool) []scenario.Node {
		ns := fourNodes()
		for i := range ns {
			if strings.Contains(fooOn, ns[i].Name[len("node-"):]) {
				ns[i].Labels["foo"] = ""
			}
		}
		if taintY {
			ns[3].Taints = cordonTaints
		}
		return ns
	}
	noNodeOnX := fourNodes()
	delete(noNodeOnX[2].Labels, "node")
	realChain := "Gantry runs the whole filter chain: node-y fails TaintToleration or the node selector there too"
	cases := []filterCase{
		{name: "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]", pod: zoneNode(foo(), fooSel, fooSel), nodes: fourNodes(),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-y", "node-y", "node-y"), fits: []string{"node-x"}},
		{name: "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]", pod: zoneNode(foo(), fooSel, fooSel), nodes: fourNodes(),
			pods: labelled(fooL, "node-a", "node-a", "node-b", "node-y", "node-y", "node-y", "node-y")},
		{name: "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]", pod: zoneNode(mkPod().Labels(fooBarL), fooSel, barSel), nodes: fourNodes(),
			pods: append(labelled(fooL, "node-a"), labelled(barL, "node-y")...), fits: []string{"node-x"}},
		{name: "Constraints hold different labelSelectors, spreads = [1/0, 0/0/1/1]", pod: zoneNode(mkPod().Labels(fooBarL), fooSel, barSel), nodes: fourNodes(),
			pods: append(labelled(fooL, "node-a"), labelled(barL, "node-x", "node-y")...)},
		{name: "Constraints hold different labelSelectors, spreads = [2/3, 1/0/0/1]", pod: zoneNode(mkPod().Labels(fooBarL), fooSel, barSel), nodes: fourNodes(),
			pods: append(append(labelled(fooL, "node-a", "node-y", "node-y"), labelled(fooBarL, "node-a")...), labelled(fooBarL, "node-y")...), fits: []string{"node-b"}},
		{name: "Constraints hold different labelSelectors but pod doesn't match itself on 'zone' constraint", pod: zoneNode(mkPod().Labels(barL), fooSel, barSel), nodes: fourNodes(),
			pods: append(labelled(fooL, "node-a"), labelled(barL, "node-x", "node-y")...), fits: []string{"node-a", "node-b"}},
		{name: "two Constraints on zone and node, absence of label 'node' on node-x, spreads = [1/1, 1/0/0/1]", pod: zoneNode(foo(), fooSel, fooSel), nodes: noNodeOnX,
			pods: labelled(fooL, "node-a", "node-y"), fits: []string{"node-b"}},
		{name: "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
			pod:   hardSpread(foo().NodeSelector(fooL), 1, "zone", fooSel).Spread(1, "node", true, fooSel, nil, &ignore, nil),
			nodes: inclusionNodes("abx", false), pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"}},
		{name: "two node inclusion Constraints, zone: honor/honor, node: honor/ignore",
			pod:   hardSpread(foo().Spread(1, "zone", true, fooSel, nil, nil, &honor), 1, "node", fooSel),
			nodes: inclusionNodes("abx", true), pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"}},
		{name: "two node inclusion Constraints, zone: honor/ignore, node: honor/ignore",
			pod:   zoneNode(foo().NodeSelector(fooL), fooSel, fooSel),
			nodes: inclusionNodes("axy", true), pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"},
			differs: realChain + "; node-b lacks the label foo the pod's node selector asks for"},
		{name: "two node inclusion Constraints, zone: honor/honor, node: ignore/ignore",
			pod:   foo().NodeSelector(fooL).Spread(1, "zone", true, fooSel, nil, nil, &honor).Spread(1, "node", true, fooSel, nil, &ignore, nil),
			nodes: inclusionNodes("axy", true), pods: labelled(fooL, "node-a", "node-b", "node-y"), fits: []string{"node-x"}},
		{name: "two Constraints on zone, spreads = [3/3, 2/1]", pod: hardSpread(hardSpread(mkPod().Labels(fooBarL), 1, "zone", barSel), 1, "zone", fooSel), nodes: fourNodes(),
			pods: append(labelled(fooBarL, "node-a", "node-b", "node-y"), labelled(fooL, "node-a", "node-y", "node-y")...), fits: []string{"node-x", "node-y"}},
		{name: "two Constraints on zone, spreads = [3/4, 2/1]", pod: hardSpread(hardSpread(mkPod().Labels(fooBarL), 1, "zone", barSel), 1, "zone", fooSel), nodes: fourNodes(),
			pods: append(labelled(fooBarL, "node-a", "node-b", "node-y"), labelled(fooL, "node-a", "node-y", "node-y", "node-y")...)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, spreadSource+"TestMultipleConstraints/"+c.name) })
	}
}
