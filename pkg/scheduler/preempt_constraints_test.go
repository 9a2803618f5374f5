package scheduler_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"

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
