package scheduler_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	"github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

const ipaSource = "k8s.io/kubernetes@v1.37.2 pkg/scheduler/framework/plugins/interpodaffinity/filtering_test.go: "

// teamNamespaces are the namespaces of kube-scheduler's namespaceSelector cases.
var teamNamespaces = map[string]map[string]string{
	"subteam1.team1": {"team": "team1"},
	"subteam2.team1": {"team": "team1"},
	"subteam1.team2": {"team": "team2"},
}

// TestKubeRequiredAffinitySingleNode ports TestRequiredAffinitySingleNode.
func TestKubeRequiredAffinitySingleNode(t *testing.T) {
	podLabel := map[string]string{"service": "securityscan"}
	podLabel2 := map[string]string{"security": "S1"}
	node1 := []scenario.Node{knode("node1", map[string]string{"region": "r1", "zone": "z11"})}
	existing := func() *kpod { return mkPod().Labels(podLabel).Node("node1") }
	nsTerm := func(topo string, nsSel *metav1.LabelSelector, namespaces ...string) corev1.PodAffinityTerm {
		t := term("service", in, topo, "securityscan", "value2")
		t.NamespaceSelector, t.Namespaces = nsSel, namespaces
		return t
	}
	team1 := &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: "team", Operator: in, Values: []string{"team1"}}}}
	twoTerms := func(v string) *kpod {
		a := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "service", Operator: exists}, {Key: "wrongkey", Operator: notExists}}}, TopologyKey: "region"}
		b := corev1.PodAffinityTerm{LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
			{Key: "service", Operator: in, Values: []string{v}}, {Key: "service", Operator: notIn, Values: []string{"WrongValue"}}}}, TopologyKey: "region"}
		return mkPod().Labels(podLabel2).Aff(a).Aff(b)
	}
	cases := []filterCase{
		{name: "A pod that has no required pod affinity scheduling rules can schedule onto a node with no existing pods", pod: mkPod(), fits: []string{"node1"}},
		{name: "satisfies with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using In operator that matches the existing pod",
			pod: mkPod().Labels(podLabel2).Aff(term("service", in, "region", "securityscan", "value2")), pods: []*kpod{existing()}, fits: []string{"node1"}},
		{name: "satisfies the pod with requiredDuringSchedulingIgnoredDuringExecution in PodAffinity using not in operator in labelSelector that matches the existing pod",
			pod: mkPod().Labels(podLabel2).Aff(term("service", notIn, "region", "securityscan3", "value3")), pods: []*kpod{existing()}, fits: []string{"node1"}},
		{name: "Does not satisfy the PodAffinity with labelSelector because of diff Namespace",
			pod: mkPod().Labels(podLabel2).Aff(nsTerm("", nil, "DiffNameSpace")), pods: []*kpod{mkPod().NS("ns").Label("service", "securityscan").Node("node1")}},
		{name: "Doesn't satisfy the PodAffinity because of unmatching labelSelector with the existing pod",
			pod: mkPod().Labels(podLabel).Aff(term("service", in, "", "antivirusscan", "value2")), pods: []*kpod{existing()}},
		{name: "satisfies the PodAffinity with different label Operators in multiple RequiredDuringSchedulingIgnoredDuringExecution",
			pod: twoTerms("securityscan"), pods: []*kpod{existing()}, fits: []string{"node1"}},
		{name: "The labelSelector requirements(items of matchExpressions) are ANDed, the pod cannot schedule onto the node because one of the matchExpression item don't match.",
			pod: twoTerms("securityscan2"), pods: []*kpod{existing()}},
		{name: "satisfies the PodAffinity and PodAntiAffinity with the existing pod",
			pod:  mkPod().Labels(podLabel2).Aff(term("service", in, "region", "securityscan", "value2")).Anti(term("service", in, "node", "antivirusscan", "value2")),
			pods: []*kpod{existing()}, fits: []string{"node1"}},
		{name: "satisfies the PodAffinity and PodAntiAffinity and PodAntiAffinity symmetry with the existing pod",
			pod:  mkPod().Labels(podLabel2).Aff(term("service", in, "region", "securityscan", "value2")).Anti(term("service", in, "node", "antivirusscan", "value2")),
			pods: []*kpod{existing().Anti(term("service", in, "node", "antivirusscan", "value2"))}, fits: []string{"node1"}},
		{name: "satisfies the PodAffinity but doesn't satisfy the PodAntiAffinity with the existing pod",
			pod:  mkPod().Labels(podLabel2).Aff(term("service", in, "region", "securityscan", "value2")).Anti(term("service", in, "zone", "securityscan", "value2")),
			pods: []*kpod{existing()}},
		{name: "satisfies the PodAffinity and PodAntiAffinity but doesn't satisfy PodAntiAffinity symmetry with the existing pod",
			pod:  mkPod().Labels(podLabel).Aff(term("service", in, "region", "securityscan", "value2")).Anti(term("service", in, "node", "antivirusscan", "value2")),
			pods: []*kpod{existing().Anti(term("service", in, "zone", "securityscan", "value2"))}},
		{name: "pod matches its own Label in PodAffinity and that matches the existing pod Labels",
			pod:     mkPod().Labels(podLabel).Aff(term("service", notIn, "region", "securityscan", "value2")),
			differs: "the existing pod on node2, a node the case's snapshot lacks, is left out: kube-scheduler does not see it either"},
		{name: "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. doesn't satisfy PodAntiAffinity symmetry with the existing pod",
			pod: mkPod().Labels(podLabel), pods: []*kpod{existing().Anti(term("service", in, "zone", "securityscan", "value2"))}},
		{name: "verify that PodAntiAffinity from existing pod is respected when pod has no AntiAffinity constraints. satisfy PodAntiAffinity symmetry with the existing pod",
			pod: mkPod().Labels(podLabel), pods: []*kpod{existing().Anti(term("service", notIn, "zone", "securityscan", "value2"))}, fits: []string{"node1"}},
		{name: "satisfies the PodAntiAffinity with existing pod but doesn't satisfy PodAntiAffinity symmetry with incoming pod",
			pod:  mkPod().Labels(podLabel).Anti(term("service", exists, "region")).Anti(term("security", exists, "region")),
			pods: []*kpod{mkPod().Node("node1").Labels(podLabel2).Anti(term("security", exists, "zone"))}},
		{name: "PodAntiAffinity symmetry check a1: incoming pod and existing pod partially match each other on AffinityTerms",
			pod:  mkPod().Labels(podLabel).Anti(term("service", exists, "zone")).Anti(term("security", exists, "zone")),
			pods: []*kpod{mkPod().Node("node1").Labels(podLabel2).Anti(term("security", exists, "zone"))}},
		{name: "PodAntiAffinity symmetry check a2: incoming pod and existing pod partially match each other on AffinityTerms",
			pod:  mkPod().Labels(podLabel2).Anti(term("security", exists, "zone")),
			pods: []*kpod{mkPod().Node("node1").Labels(podLabel).Anti(term("service", exists, "zone")).Anti(term("security", exists, "zone"))}},
		{name: "PodAntiAffinity symmetry check b1: incoming pod and existing pod partially match each other on AffinityTerms",
			pod:  mkPod().Labels(map[string]string{"abc": "", "xyz": ""}).Anti(term("abc", exists, "zone")).Anti(term("def", exists, "zone")),
			pods: []*kpod{mkPod().Node("node1").Labels(map[string]string{"def": "", "xyz": ""}).Anti(term("abc", exists, "zone")).Anti(term("def", exists, "zone"))}},
		{name: "PodAntiAffinity symmetry check b2: incoming pod and existing pod partially match each other on AffinityTerms",
			pod:  mkPod().Labels(map[string]string{"def": "", "xyz": ""}).Anti(term("abc", exists, "zone")).Anti(term("def", exists, "zone")),
			pods: []*kpod{mkPod().Node("node1").Labels(map[string]string{"abc": "", "xyz": ""}).Anti(term("abc", exists, "zone")).Anti(term("def", exists, "zone"))}},
		{name: "PodAffinity fails PreFilter with an invalid affinity label syntax",
			pod:    mkPod().Labels(podLabel).Aff(term("service", in, "region", "{{.bad-value.}}")).Aff(term("service", in, "node", "antivirusscan", "value2")),
			refuse: scheduler.PendingInvalid},
		{name: "PodAntiAffinity fails PreFilter with an invalid antiaffinity label syntax",
			pod:    mkPod().Labels(podLabel).Aff(term("service", in, "region", "foo")).Aff(term("service", in, "node", "{{.bad-value.}}")),
			refuse: scheduler.PendingInvalid},
		{name: "affinity with NamespaceSelector", nsl: teamNamespaces,
			pod: mkPod().Labels(podLabel2).Aff(nsTerm("region", team1)), pods: []*kpod{mkPod().NS("subteam1.team1").Labels(podLabel).Node("node1")}, fits: []string{"node1"}},
		{name: "affinity with non-matching NamespaceSelector", nsl: teamNamespaces,
			pod: mkPod().Labels(podLabel2).Aff(nsTerm("region", team1)), pods: []*kpod{mkPod().NS("subteam1.team2").Labels(podLabel).Node("node1")}},
		{name: "anti-affinity with matching NamespaceSelector", nsl: teamNamespaces,
			pod: mkPod().NS("subteam1.team1").Labels(podLabel2).Anti(nsTerm("zone", team1)), pods: []*kpod{mkPod().NS("subteam2.team1").Labels(podLabel).Node("node1")}},
		{name: "anti-affinity with matching all NamespaceSelector", nsl: teamNamespaces,
			pod: mkPod().NS("subteam1.team1").Labels(podLabel2).Anti(nsTerm("zone", &metav1.LabelSelector{})), pods: []*kpod{mkPod().NS("subteam2.team1").Labels(podLabel).Node("node1")}},
		{name: "anti-affinity with non-matching NamespaceSelector", nsl: teamNamespaces,
			pod: mkPod().NS("subteam1.team1").Labels(podLabel2).Anti(nsTerm("zone", team1)), pods: []*kpod{mkPod().NS("subteam1.team2").Labels(podLabel).Node("node1")}, fits: []string{"node1"}},
	}
	for _, c := range cases {
		c.nodes = node1
		t.Run(c.name, func(t *testing.T) { c.run(t, ipaSource+"TestRequiredAffinitySingleNode/"+c.name) })
	}
}

// TestKubeRequiredAffinityMultipleNodes ports TestRequiredAffinityMultipleNodes.
func TestKubeRequiredAffinityMultipleNodes(t *testing.T) {
	podLabelA := map[string]string{"foo": "bar"}
	china := map[string]string{"region": "China"}
	chinaAz1 := map[string]string{"region": "China", "az": "az1"}
	india := map[string]string{"region": "India"}
	rz := func(name, region, zone string) scenario.Node {
		return knode(name, map[string]string{"region": region, "zone": zone, "hostname": name})
	}
	hostOnly := []scenario.Node{knode("nodeA", map[string]string{corev1.LabelHostname: "nodeA"}), knode("nodeB", map[string]string{corev1.LabelHostname: "nodeB"})}
	threeRegions := func(a, b, c string) []scenario.Node {
		return []scenario.Node{knode(a, china), knode(b, chinaAz1), knode(c, india)}
	}
	cases := []filterCase{
		{name: "A pod can be scheduled onto all the nodes that have the same topology key & label value with one of them has an existing pod that matches the affinity rules",
			pod: mkPod().Aff(term("foo", in, "region", "bar")), pods: []*kpod{mkPod().Node("node1").Labels(podLabelA)},
			nodes: threeRegions("node1", "node2", "node3"), fits: []string{"node1", "node2"}},
		{name: "The affinity rule is to schedule all of the pods of this collection to the same zone. The first pod of the collection should not be blocked from being scheduled onto any node, even there's no existing pod that matches the rule anywhere.",
			pod:   mkPod().Labels(map[string]string{"foo": "bar", "service": "securityscan"}).Aff(term("foo", in, "zone", "bar")).Aff(term("service", in, "zone", "securityscan")),
			pods:  []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": "bar"})},
			nodes: []scenario.Node{knode("nodeA", map[string]string{"zone": "az1", "hostname": "h1"}), knode("nodeB", map[string]string{"zone": "az2", "hostname": "h2"})},
			fits:  []string{"nodeA", "nodeB"}},
		{name: "The first pod of the collection can only be scheduled on nodes labelled with the requested topology keys",
			pod:   mkPod().Labels(map[string]string{"foo": "bar", "service": "securityscan"}).Aff(term("foo", in, "zone", "bar")).Aff(term("service", in, "zone", "securityscan")),
			pods:  []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": "bar"})},
			nodes: []scenario.Node{knode("nodeA", map[string]string{"zoneLabel": "az1", "hostname": "h1"}), knode("nodeB", map[string]string{"zoneLabel": "az2", "hostname": "h2"})}},
		{name: "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB.",
			pod: mkPod().Anti(term("foo", in, "region", "abc")), pods: []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": "abc"})},
			nodes: []scenario.Node{knode("nodeA", map[string]string{"region": "r1", "hostname": "nodeA"}), knode("nodeB", map[string]string{"region": "r1", "hostname": "nodeB"})}},
		{name: "This test ensures that anti-affinity matches a pod when any term of the anti-affinity rule matches a pod.",
			pod:   mkPod().Anti(term("foo", in, "region", "abc")).Anti(term("service", in, "zone", "securityscan")),
			pods:  []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": "abc", "service": "securityscan"})},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z2")}},
		{name: "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA and nodeB but can be scheduled onto nodeC",
			pod: mkPod().Anti(term("foo", in, "region", "abc")), pods: []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": "abc"})},
			nodes: threeRegions("nodeA", "nodeB", "nodeC"), fits: []string{"nodeC"}},
		{name: "NodeA and nodeB have same topologyKey and label value. NodeA has an existing pod that matches the inter pod affinity rule. The pod can not be scheduled onto nodeA, nodeB, but can be scheduled onto nodeC (NodeC has an existing pod that match the inter pod affinity rule but in different namespace)",
			pod: mkPod().NS("NS1").Labels(map[string]string{"foo": "123"}).Anti(term("foo", in, "region", "bar")),
			pods: []*kpod{mkPod().Node("nodeA").NS("NS1").Labels(map[string]string{"foo": "bar"}),
				mkPod().Node("nodeC").NS("NS2").Anti(term("foo", in, "region", "123"))},
			nodes: threeRegions("nodeA", "nodeB", "nodeC"), fits: []string{"nodeC"}},
		{name: "Test existing pod's anti-affinity: if an existing pod has a term with invalid topologyKey, labelSelector of the term is firstly checked, and then topologyKey of the term is also checked",
			pod: mkPod().Label("foo", ""), pods: []*kpod{mkPod().Node("nodeA").Anti(term("foo", exists, "invalid-node-label"))},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z1")}, fits: []string{"nodeA", "nodeB"}},
		{name: "Test incoming pod's anti-affinity: even if labelSelector matches, we still check if topologyKey matches",
			pod: mkPod().Anti(term("foo", exists, "invalid-node-label")), pods: []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": ""})},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z1")}, fits: []string{"nodeA", "nodeB"}},
		{name: "Test existing pod's anti-affinity: incoming pod wouldn't considered as a fit as it violates each existingPod's terms on all nodes",
			pod:   mkPod().Label("foo", "").Label("bar", ""),
			pods:  []*kpod{mkPod().Node("nodeA").Anti(term("foo", exists, "zone")), mkPod().Node("nodeA").Anti(term("bar", exists, "region"))},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z2")}},
		{name: "Test incoming pod's anti-affinity: incoming pod wouldn't considered as a fit as it at least violates one anti-affinity rule of existingPod",
			pod:   mkPod().Anti(term("foo", exists, "zone")).Anti(term("bar", exists, "region")),
			pods:  []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": ""}), mkPod().Node("nodeB").Labels(map[string]string{"bar": ""})},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z2")}},
		{name: "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
			pod:   mkPod().Label("foo", "").Label("bar", ""),
			pods:  []*kpod{mkPod().Node("nodeA").Anti(term("foo", exists, "invalid-node-label")).Anti(term("bar", exists, "zone"))},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z2")}, fits: []string{"nodeB"}},
		{name: "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when one term has invalid topologyKey",
			pod:   mkPod().Anti(term("foo", exists, "invalid-node-label")).Anti(term("bar", exists, "zone")),
			pods:  []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": "", "bar": ""})},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z2")}, fits: []string{"nodeB"}},
		{name: "Test existing pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when all terms have valid topologyKey",
			pod:   mkPod().Label("foo", "").Label("bar", ""),
			pods:  []*kpod{mkPod().Node("nodeA").Anti(term("foo", exists, "region")).Anti(term("bar", exists, "zone"))},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z2")}},
		{name: "Test incoming pod's anti-affinity: only when labelSelector and topologyKey both match, it's counted as a single term match - case when all terms have valid topologyKey",
			pod:   mkPod().Anti(term("foo", exists, "region")).Anti(term("bar", exists, "zone")),
			pods:  []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": "", "bar": ""})},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z2")}},
		{name: "Test existing pod's anti-affinity: existingPod on nodeA and nodeB has at least one anti-affinity term matches incoming pod, so incoming pod can only be scheduled to nodeC",
			pod: mkPod().Label("foo", "").Label("bar", ""),
			pods: []*kpod{mkPod().Node("nodeA").Anti(term("foo", exists, "zone")).Anti(term("labelA", exists, "zone")),
				mkPod().Node("nodeB").Anti(term("bar", exists, "zone")).Anti(term("labelB", exists, "zone"))},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z2"), rz("nodeC", "r1", "z3")}, fits: []string{"nodeC"}},
		{name: "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match",
			pod:   mkPod().Aff(term("foo", exists, "region")).Aff(term("bar", exists, "zone")),
			pods:  []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": "", "bar": ""})},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z1")}, fits: []string{"nodeA", "nodeB"}},
		{name: "Test incoming pod's affinity: firstly check if all affinityTerms match, and then check if all topologyKeys match, and the match logic should be satisfied on the same pod",
			pod:   mkPod().Aff(term("foo", exists, "region")).Aff(term("bar", exists, "zone")),
			pods:  []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": ""}), mkPod().Node("nodeB").Labels(map[string]string{"bar": ""})},
			nodes: []scenario.Node{rz("nodeA", "r1", "z1"), rz("nodeB", "r1", "z2")}},
		{name: "Test incoming pod's host-scoped affinity (fast path)",
			pod: mkPod().Aff(term("foo", exists, corev1.LabelHostname)), pods: []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": ""})},
			nodes: hostOnly, fits: []string{"nodeA"}},
		{name: "Test incoming pod's host-scoped anti-affinity (fast path)",
			pod: mkPod().Anti(term("foo", exists, corev1.LabelHostname)), pods: []*kpod{mkPod().Node("nodeA").Labels(map[string]string{"foo": ""})},
			nodes: hostOnly, fits: []string{"nodeB"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.run(t, ipaSource+"TestRequiredAffinityMultipleNodes/"+c.name) })
	}
}
