package model

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// PinnedTo adds the node to every term of the pod's required affinity (terms are
// ORed, so each must require it) and leaves the pod itself unchanged.
func TestPinnedTo(t *testing.T) {
	zone := corev1.NodeSelectorRequirement{Key: "zone", Operator: corev1.NodeSelectorOpIn, Values: []string{"a"}}
	p := &Pod{ID: "ns/p", RequiredAffinity: &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{
		{MatchExpressions: []corev1.NodeSelectorRequirement{zone}}, {MatchExpressions: []corev1.NodeSelectorRequirement{zone}},
	}}}
	q := p.PinnedTo("n1")
	if len(p.RequiredAffinity.NodeSelectorTerms[0].MatchFields) != 0 {
		t.Fatal("PinnedTo changed the pod it copied")
	}
	if n := len(q.RequiredAffinity.NodeSelectorTerms); n != 2 {
		t.Fatalf("%d terms, want the pod's 2", n)
	}
	for i, term := range q.RequiredAffinity.NodeSelectorTerms {
		if len(term.MatchExpressions) != 1 || len(term.MatchFields) != 1 || term.MatchFields[0].Key != "metadata.name" || term.MatchFields[0].Values[0] != "n1" {
			t.Errorf("term %d = %+v, want the zone and metadata.name In [n1]", i, term)
		}
	}
	if r := (&Pod{}).PinnedTo("n2").RequiredAffinity; len(r.NodeSelectorTerms) != 1 || r.NodeSelectorTerms[0].MatchFields[0].Values[0] != "n2" {
		t.Errorf("a pod without affinity pinned to n2: %+v", r)
	}
}
