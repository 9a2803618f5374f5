package placement

import (
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/model"
)

// claimPod is a pod with one WaitForFirstConsumer claim that only the given
// available volumes can serve (no provisioner).
func claimPod(name string, volumes ...string) *model.Pod {
	p := cpuPod(name, 100, 1<<20)
	c := model.DelayedClaim{Claim: name + "-data", StorageClass: "local"}
	for _, v := range volumes {
		c.Available = append(c.Available, model.BoundVolume{Claim: c.Claim, Volume: v, NodeAffinity: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{
				{Key: "kubernetes.io/hostname", Operator: corev1.NodeSelectorOpIn, Values: []string{"a1"}}}}}}})
	}
	p.Constraints = &model.Constraints{Volumes: &model.VolumeNeeds{Delayed: []model.DelayedClaim{c}}}
	return p
}

// Two pods of one cycle cannot take the same available volume: the first placed
// takes it (Placement.Volumes), the second finds none; a volume taken in a fork that
// is dropped stays free, one taken in a fork that commits does not.
func TestAvailableVolumeTakenOncePerCycle(t *testing.T) {
	p, _ := New("")
	v := NewView(snapshotOf(gpuNode("a1", 0, "", 0), gpuNode("b1", 0, "", 0)))

	first, second := claimPod("first", "pv-a"), claimPod("second", "pv-a")
	fork := v.Fork()
	pl, u := p.PlacePod(fork, first)
	if u != nil || pl.Node != "a1" || !slices.Equal(pl.Volumes, []string{"pv-a"}) {
		t.Fatalf("first: %+v %v, want a1 with pv-a", pl, u)
	}
	fork.Assign(first, pl)
	if _, u := p.PlacePod(fork, second); u == nil {
		t.Fatal("second placed in the fork where pv-a is taken")
	}
	// The fork is dropped: pv-a is free in v.
	if pl, u := p.PlacePod(v, second); u != nil || !slices.Equal(pl.Volumes, []string{"pv-a"}) {
		t.Fatalf("second after the fork was dropped: %+v %v, want pv-a", pl, u)
	}
	fork.Commit()
	if _, u := p.PlacePod(v, second); u == nil {
		t.Fatal("second placed after the fork that took pv-a committed")
	}
	// A placement made without Volumes (a caller's own) still takes the volume.
	third := claimPod("third", "pv-a", "pv-a2")
	w := NewView(snapshotOf(gpuNode("a1", 0, "", 0)))
	w.Assign(third, Placement{Pod: third.ID, Node: "a1"})
	if pl, u := p.PlacePod(w, claimPod("fourth", "pv-a", "pv-a2")); u != nil || !slices.Equal(pl.Volumes, []string{"pv-a2"}) {
		t.Fatalf("fourth: %+v %v, want pv-a2 (pv-a taken by third)", pl, u)
	}
}

// A claim whose volume is being provisioned for a node (selected-node) can be
// provisioned there only.
func TestSelectedNodeProvisionsThereOnly(t *testing.T) {
	claims := []model.DelayedClaim{{Claim: "c", Provisioner: "csi.example.com", SelectedNode: "a1"}}
	if _, ok := VolumesFor(gpuNode("b1", 0, "", 0), claims, nil); ok {
		t.Error("a claim selected for a1 provisions on b1")
	}
	if v, ok := VolumesFor(gpuNode("a1", 0, "", 0), claims, nil); !ok || v[0] != "" {
		t.Errorf("a claim selected for a1: %v %v on a1, want provisioned", v, ok)
	}
}
