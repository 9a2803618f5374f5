package deploy

import (
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
)

// The node agent's DaemonSet runs on GPU nodes unless the node opts out with
// gpu.gantry.dev/node-agent=false (nodes whose GPUs another DRA driver
// serves); nodeAgent.optOutLabel renames the label, "" drops the opt-out.
func TestNodeAgentOptOutLabel(t *testing.T) {
	runsOn := func(ds *appsv1.DaemonSet, labels map[string]string) bool {
		node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: labels}}
		pod := ds.Spec.Template.Spec
		for k, v := range pod.NodeSelector {
			if labels[k] != v {
				return false
			}
		}
		a := pod.Affinity
		if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
			return true
		}
		ok, err := corev1helpers.MatchNodeSelectorTerms(node, a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution)
		if err != nil {
			t.Fatal(err)
		}
		return ok
	}
	daemonSet := func(set ...string) *appsv1.DaemonSet {
		var ds appsv1.DaemonSet
		into(t, find(t, render(t, set...), "DaemonSet", "gantry-node-agent"), &ds)
		return &ds
	}
	gpu := map[string]string{"nvidia.com/gpu.present": "true"}
	with := func(k, v string) map[string]string {
		m := map[string]string{"nvidia.com/gpu.present": "true"}
		m[k] = v
		return m
	}
	ds := daemonSet()
	for _, c := range []struct {
		labels map[string]string
		want   bool
	}{
		{gpu, true},
		{with("gpu.gantry.dev/node-agent", "true"), true},
		{with("gpu.gantry.dev/node-agent", "false"), false},
		{map[string]string{}, false}, // not a GPU node
	} {
		if got := runsOn(ds, c.labels); got != c.want {
			t.Errorf("default chart: agent on a node labelled %v = %v, want %v", c.labels, got, c.want)
		}
	}
	ds = daemonSet("nodeAgent.optOutLabel=example.com/no-gantry")
	if runsOn(ds, with("example.com/no-gantry", "false")) || !runsOn(ds, with("gpu.gantry.dev/node-agent", "false")) {
		t.Error("nodeAgent.optOutLabel=example.com/no-gantry: the opt-out label is not the one set")
	}
	ds = daemonSet("nodeAgent.optOutLabel=")
	if !runsOn(ds, with("gpu.gantry.dev/node-agent", "false")) {
		t.Error(`nodeAgent.optOutLabel="": the agent still skips opted-out nodes`)
	}
}
