package scheduler_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	"github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// This file is a small pod builder in the shape of kube-scheduler's st.MakePod, so
// that cases ported from kube-scheduler's plugin tests read like the originals.
// Each case becomes a scenario: the existing pods run (best effort) on their nodes,
// the incoming pod is a pending gang of one, and FitsOn must list exactly the nodes
// kube-scheduler's Filter passes.

// kpod is a pod under construction.
type kpod struct {
	node         string
	nodeSelector map[string]string
	spec         scenario.Spec
}

func (p *kpod) NodeSelector(s map[string]string) *kpod { p.nodeSelector = s; return p }

func mkPod() *kpod { return &kpod{spec: scenario.Spec{Namespace: "default"}} }

func (p *kpod) NS(ns string) *kpod {
	if ns == "" {
		ns = "default"
	}
	p.spec.Namespace = ns
	return p
}
func (p *kpod) Node(n string) *kpod { p.node = n; return p }
func (p *kpod) Labels(l map[string]string) *kpod {
	p.spec.Labels = map[string]string{}
	for k, v := range l {
		p.spec.Labels[k] = v
	}
	return p
}
func (p *kpod) Label(k, v string) *kpod {
	if p.spec.Labels == nil {
		p.spec.Labels = map[string]string{}
	}
	p.spec.Labels[k] = v
	return p
}
func (p *kpod) Terminating() *kpod { p.spec.Terminating = true; return p }

func (p *kpod) affinity() *corev1.Affinity {
	if p.spec.Affinity == nil {
		p.spec.Affinity = &corev1.Affinity{}
	}
	return p.spec.Affinity
}

// term is an affinity term selecting key op values in topologyKey.
func term(key string, op metav1.LabelSelectorOperator, topologyKey string, values ...string) corev1.PodAffinityTerm {
	return corev1.PodAffinityTerm{
		LabelSelector: &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: op, Values: values}}},
		TopologyKey:   topologyKey,
	}
}

const (
	in        = metav1.LabelSelectorOpIn
	notIn     = metav1.LabelSelectorOpNotIn
	exists    = metav1.LabelSelectorOpExists
	notExists = metav1.LabelSelectorOpDoesNotExist
)

func (p *kpod) Aff(t corev1.PodAffinityTerm) *kpod {
	a := p.affinity()
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.RequiredDuringSchedulingIgnoredDuringExecution, t)
	return p
}

func (p *kpod) Anti(t corev1.PodAffinityTerm) *kpod {
	a := p.affinity()
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.RequiredDuringSchedulingIgnoredDuringExecution, t)
	return p
}

func (p *kpod) PrefAff(w int32, t corev1.PodAffinityTerm) *kpod {
	a := p.affinity()
	if a.PodAffinity == nil {
		a.PodAffinity = &corev1.PodAffinity{}
	}
	a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAffinity.PreferredDuringSchedulingIgnoredDuringExecution, corev1.WeightedPodAffinityTerm{Weight: w, PodAffinityTerm: t})
	return p
}

func (p *kpod) PrefAnti(w int32, t corev1.PodAffinityTerm) *kpod {
	a := p.affinity()
	if a.PodAntiAffinity == nil {
		a.PodAntiAffinity = &corev1.PodAntiAffinity{}
	}
	a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution = append(a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution, corev1.WeightedPodAffinityTerm{Weight: w, PodAffinityTerm: t})
	return p
}

// NodeAffinityIn requires node label key in values.
func (p *kpod) NodeAffinityIn(key string, values ...string) *kpod {
	a := p.affinity()
	a.NodeAffinity = &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{Key: key, Operator: corev1.NodeSelectorOpIn, Values: values}}}},
	}}
	return p
}

// Spread adds a topology spread constraint selecting pods with label key (Exists).
func (p *kpod) Spread(maxSkew int32, topologyKey string, hard bool, sel *metav1.LabelSelector, minDomains *int32, affinityPolicy, taintsPolicy *corev1.NodeInclusionPolicy) *kpod {
	when := corev1.DoNotSchedule
	if !hard {
		when = corev1.ScheduleAnyway
	}
	p.spec.Spread = append(p.spec.Spread, corev1.TopologySpreadConstraint{
		MaxSkew: maxSkew, TopologyKey: topologyKey, WhenUnsatisfiable: when, LabelSelector: sel,
		MinDomains: minDomains, NodeAffinityPolicy: affinityPolicy, NodeTaintsPolicy: taintsPolicy,
	})
	return p
}

func (p *kpod) Toleration(key string) *kpod {
	p.spec.Tolerations = append(p.spec.Tolerations, corev1.Toleration{Key: key, Operator: corev1.TolerationOpExists})
	return p
}

func (p *kpod) Port(protocol corev1.Protocol, ip string, port int32) *kpod {
	p.spec.Ports = append(p.spec.Ports, corev1.ContainerPort{Protocol: protocol, HostIP: ip, HostPort: port, ContainerPort: port})
	return p
}

func (p *kpod) Volume(v corev1.Volume, s *scenario.Storage) *kpod {
	p.spec.Volumes = append(p.spec.Volumes, v)
	p.spec.Storage = s
	return p
}

// existsSel selects pods that have label key.
func existsSel(key string) *metav1.LabelSelector {
	return &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{{Key: key, Operator: metav1.LabelSelectorOpExists}}}
}

// knode is a node with labels (and optionally taints).
func knode(name string, labels map[string]string, taints ...corev1.Taint) scenario.Node {
	return scenario.Node{Name: name, Labels: labels, Taints: taints}
}

// filterCase is one ported Filter case: the nodes the incoming pod fits on.
type filterCase struct {
	name   string
	pod    *kpod
	pods   []*kpod
	nodes  []scenario.Node
	fits   []string
	nsl    map[string]map[string]string
	refuse scheduler.PendingKind
	// differs says why Gantry's expectation differs from kube-scheduler's on purpose.
	differs string
}

// run turns the case into a scenario and runs it.
func (c filterCase) run(t *testing.T, source string) {
	t.Helper()
	sc := scenario.Scenario{Name: c.name, Source: source, Differs: c.differs, Nodes: c.nodes, NoPreemption: true, NamespaceLabels: c.nsl}
	for i, p := range c.pods {
		sc.Gangs = append(sc.Gangs, scenario.Gang{Name: fmt.Sprintf("existing%d", i), On: p.node, BestEffort: true, NodeSelector: p.nodeSelector, Spec: p.spec})
	}
	sc.Gangs = append(sc.Gangs, scenario.Gang{Name: "incoming", BestEffort: true, NodeSelector: c.pod.nodeSelector, Spec: c.pod.spec})
	switch {
	case c.refuse != "":
		sc.Expect.Pending = map[string]scheduler.PendingKind{"incoming": c.refuse}
	case len(c.fits) == 0:
		sc.Expect.FitsOn = map[string][]string{"incoming": nil}
		sc.Expect.Pending = map[string]scheduler.PendingKind{"incoming": scheduler.PendingNoFit}
	default:
		sc.Expect.FitsOn = map[string][]string{"incoming": c.fits}
		sc.Expect.Binds = []string{"incoming"}
	}
	scenario.Run(t, sc)
}

// scoreCase is one ported Score case: the normalized score of each node (nil when
// the plugin has nothing to score, kube-scheduler's Skip).
type scoreCase struct {
	name    string
	pod     *kpod
	pods    []*kpod
	nodes   []scenario.Node
	nsl     map[string]map[string]string
	want    []int64
	differs string
}

// check builds the case's cluster and compares the plugin's scores, which pick
// chooses from the two PreferenceScoresOf returns.
func (c scoreCase) check(t *testing.T, source string, pick func(interPod, spread []int64) []int64) {
	t.Helper()
	t.Logf("ported from %s", source)
	if c.differs != "" {
		t.Logf("Gantry differs on purpose: %s", c.differs)
	}
	sc := scenario.Scenario{Nodes: c.nodes, NamespaceLabels: c.nsl}
	for i, p := range c.pods {
		sc.Gangs = append(sc.Gangs, scenario.Gang{Name: fmt.Sprintf("existing%d", i), On: p.node, BestEffort: true, NodeSelector: p.nodeSelector, Spec: p.spec})
	}
	sc.Gangs = append(sc.Gangs, scenario.Gang{Name: "incoming", BestEffort: true, NodeSelector: c.pod.nodeSelector, Spec: c.pod.spec})
	snap, err := scenario.Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	nodes, ipa, spread := placement.PreferenceScoresOf(placement.NewView(snap), snap.Pods[model.PodID(podNS(c.pod)+"/incoming-0")])
	got := pick(ipa, spread)
	if fmt.Sprint(got) != fmt.Sprint(c.want) {
		t.Errorf("scores of %v = %v, want %v", nodes, got, c.want)
	}
}

func podNS(p *kpod) string {
	if p.spec.Namespace == "" {
		return "ns"
	}
	return p.spec.Namespace
}
