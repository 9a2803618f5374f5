package cache

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A preemptor's nomination whose room is gone (a higher-priority pod holds the node,
// and nothing is terminating there) is withdrawn at Commit, and stays cleared in the
// cache while the informer still shows the old nomination.
func TestCommitClearsAWithdrawnNomination(t *testing.T) {
	c, s := gpuCluster(t, 2, "a")
	held := gpuPod("held", 2, 1000, "a")
	held.Status.Phase = corev1.PodRunning
	c.UpsertPod(held)
	serve := gpuPod("serve", 2, 200, "")
	serve.Status.NominatedNodeName = "a"
	c.UpsertPod(serve)
	d := cycle(c, s)
	if len(d.Withdrawn) != 1 || len(d.Withdrawn[0].Pods) != 1 || d.Withdrawn[0].Pods[0] != "ns/serve" {
		t.Fatalf("withdrawn = %+v, want serve's nomination", d.Withdrawn)
	}
	if got := podOf(c, "ns/serve"); got.NominatedNode != "" {
		t.Fatalf("serve is still nominated to %q in the cache after Commit", got.NominatedNode)
	}
	c.UpsertPod(serve) // the informer has not seen the patch yet
	if got := podOf(c, "ns/serve"); got.NominatedNode != "" {
		t.Fatalf("a lagging update brought serve's withdrawn nomination back (%q)", got.NominatedNode)
	}
}
