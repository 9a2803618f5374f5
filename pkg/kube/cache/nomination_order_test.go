package cache

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Nominations are numbered as they are made, and the number survives the informer's
// updates of the pod (the API does not hold it) while the nomination stays; a
// victim's deletionTimestamp becomes its TerminatingDeadline.
func TestNominationsAreNumberedAndVictimsKnowTheirDeadline(t *testing.T) {
	c, s := gpuCluster(t, 2, "a", "b")
	for _, name := range []string{"train-a", "train-b"} {
		running := gpuPod(name, 2, 10, name[len(name)-1:])
		running.Status.Phase = corev1.PodRunning
		c.UpsertPod(running)
	}
	c.UpsertPod(gpuPod("serve-1", 2, 200, ""))
	cycle(c, s)
	first := podOf(c, "ns/serve-1")
	if first.NominatedNode == "" || first.NominationOrder == 0 {
		t.Fatalf("serve-1 nominated to %q with order %d, want a node and an order", first.NominatedNode, first.NominationOrder)
	}
	c.UpsertPod(gpuPod("serve-2", 2, 200, ""))
	cycle(c, s)
	second := podOf(c, "ns/serve-2")
	if second.NominatedNode == "" || second.NominationOrder <= first.NominationOrder {
		t.Fatalf("serve-2 nominated to %q with order %d, want a node and an order after serve-1's %d",
			second.NominatedNode, second.NominationOrder, first.NominationOrder)
	}
	// The informer shows serve-1's nomination: the number stays.
	echo := gpuPod("serve-1", 2, 200, "")
	echo.Status.NominatedNodeName = first.NominatedNode
	c.UpsertPod(echo)
	if got := podOf(c, "ns/serve-1"); got.NominationOrder != first.NominationOrder {
		t.Fatalf("serve-1's order after the echo is %d, want %d", got.NominationOrder, first.NominationOrder)
	}
	// The victim's deletion arrives with a 30 s grace period.
	victim := gpuPod("train-"+first.NominatedNode, 2, 10, first.NominatedNode)
	victim.Status.Phase = corev1.PodRunning
	deadline := time.Unix(2030, 0)
	victim.DeletionTimestamp, victim.DeletionGracePeriodSeconds = ptr.To(metav1.NewTime(deadline)), ptr.To[int64](30)
	c.UpsertPod(victim)
	if got := podOf(c, model.PodID(victim.Namespace+"/"+victim.Name)); !got.Terminating || got.TerminatingDeadline != deadline.Unix() {
		t.Fatalf("victim terminating %v with deadline %d, want true and %d", got.Terminating, got.TerminatingDeadline, deadline.Unix())
	}
}
