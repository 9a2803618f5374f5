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
