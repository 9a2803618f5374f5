package scheduler_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// fullNodes are n1 and n2, each full: five cheap low-priority pods and one pod
// labelled app=x of a slightly higher priority, one GPU each.
func fullNodes() ([]scenario.Node, []scenario.Gang) {
	nodes := hostNodes("n1", "n2")
	var gangs []scenario.Gang
	for i := range nodes {
		nodes[i].GPUs = 6
		n := nodes[i].Name
		for j := range 5 {
			gangs = append(gangs, scenario.Gang{Name: fmt.Sprintf("filler-%s-%d", n, j), GPUs: 1, On: n})
		}
		gangs = append(gangs, scenario.Gang{Name: "x-" + n, GPUs: 1, On: n, Priority: 10,
			Spec: scenario.Spec{Labels: map[string]string{"app": "x"}}})
	}
	return nodes, gangs
}

// A preemptor whose required anti-affinity repels a pod on every node evicts that
// pod on one node, not the cheaper pods around it, which free room but leave it
// repelled. The victim search checks the preemptor's inter-pod constraints on the
// whole cluster with the victims gone (placement.FitsOnNode); a node-local check
// would take the cheap pods one by one and give up.
func TestPreemptionEvictsThePodThatRepelsThePreemptor(t *testing.T) {
	nodes, gangs := fullNodes()
	pre := scenario.Gang{Name: "pre", GPUs: 1, Priority: 125, NonPreemptible: true,
		Spec: (&kpod{}).Anti(term("app", in, corev1.LabelHostname, "x")).spec}
	scenario.Run(t, scenario.Scenario{
		Nodes:  nodes,
		Gangs:  append(gangs, pre),
		Expect: scenario.Expect{Evicted: []string{"x-n1-0"}, Nominated: []string{"pre"}},
	})
}

// Likewise for the anti-affinity of the pods already running: a low-priority pod
// that repels the preemptor is the one evicted.
func TestPreemptionEvictsTheRunningPodWhoseAntiAffinityRepels(t *testing.T) {
	nodes, gangs := fullNodes()
	for i := range gangs {
		if gangs[i].Spec.Labels["app"] == "x" {
			gangs[i].Spec = (&kpod{spec: gangs[i].Spec}).Anti(term("role", in, corev1.LabelHostname, "serve")).spec
		}
	}
	pre := scenario.Gang{Name: "pre", GPUs: 1, Priority: 125, NonPreemptible: true,
		Spec: scenario.Spec{Labels: map[string]string{"role": "serve"}}}
	scenario.Run(t, scenario.Scenario{
		Nodes:  nodes,
		Gangs:  append(gangs, pre),
		Expect: scenario.Expect{Evicted: []string{"x-n1-0"}, Nominated: []string{"pre"}},
	})
}

// A preemptor with a DoNotSchedule spread (one per node at most apart) that can
// only go to n1, where two pods it counts already run while n2 holds none, evicts
// those two, not the ten cheaper pods beside them that would free room but leave the
// skew at three.
func TestPreemptionEvictsWhatSkewsThePreemptorsSpread(t *testing.T) {
	nodes := hostNodes("n1", "n2")
	nodes[0].GPUs, nodes[1].GPUs = 12, 6
	counted := scenario.Spec{Labels: map[string]string{"app": "s"}}
	var gangs []scenario.Gang
	for j := range 10 {
		gangs = append(gangs, scenario.Gang{Name: fmt.Sprintf("filler-%d", j), GPUs: 1, On: "n1"})
	}
	gangs = append(gangs,
		scenario.Gang{Name: "s1", GPUs: 1, On: "n1", Priority: 10, Spec: counted},
		scenario.Gang{Name: "s2", GPUs: 1, On: "n1", Priority: 10, Spec: counted},
		scenario.Gang{Name: "kept", Pods: 6, GPUs: 1, On: "n2", NonPreemptible: true})
	pre := scenario.Gang{Name: "pre", GPUs: 1, Priority: 125, NonPreemptible: true,
		Spec: (&kpod{spec: counted}).Spread(1, corev1.LabelHostname, true,
			&metav1.LabelSelector{MatchLabels: map[string]string{"app": "s"}}, nil, nil, nil).spec}
	scenario.Run(t, scenario.Scenario{
		Nodes:  nodes,
		Gangs:  append(gangs, pre),
		Expect: scenario.Expect{Evicted: []string{"s1-0", "s2-0"}, Nominated: []string{"pre"}},
	})
}
