package cache

import (
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/names"
)

// A class named only by a label (KAI's and KubeRay's way: the RayService's
// priorityClassName label) gives the gang its priority; admission still sets
// spec.priority to 0 on the pods, since their spec names no class. When the label
// goes (the RayService is deleted and its pods are on their way out), the gang keeps
// the class's priority: falling back to spec.priority's 0 made the RayService's
// leaving inference gang look like priority 0, and the training it had preempted
// "preempted" it back (seen in TestSeedScenario's logs).
func TestClassFromAGoneOwnerKeepsItsPriority(t *testing.T) {
	c, _ := gpuCluster(t, 1, "n")
	c.UpsertPriorityClass("inference", 125, nil)
	pod := gpuPod("serve", 1, 0, "n")
	pod.Labels = map[string]string{names.LabelPriorityClass: "inference"}
	c.UpsertPod(pod)
	if got := podOf(c, "ns/serve").Priority; got != 125 {
		t.Fatalf("priority with the class label: %d, want 125", got)
	}
	gone := pod.DeepCopy()
	gone.Labels = nil
	c.UpsertPod(gone)
	if got := podOf(c, "ns/serve").Priority; got != 125 {
		t.Errorf("priority once the label is gone: %d, want 125 (the class's, not spec.priority's 0)", got)
	}
}

// A pod whose spec.preemptionPolicy is Never (its class's, copied at admission)
// makes its gang one that preempts nothing.
func TestPreemptionPolicyNeverReachesTheGang(t *testing.T) {
	c, _ := gpuCluster(t, 1, "n")
	never := corev1.PreemptNever
	pod := gpuPod("quiet", 1, 0, "")
	pod.Spec.PreemptionPolicy = &never
	c.UpsertPod(pod)
	if g := c.snap.Gangs[podOf(c, "ns/quiet").Gang]; g == nil || !g.NeverPreempts {
		t.Fatalf("gang of a pod with preemptionPolicy Never: %+v, want NeverPreempts", g)
	}
	pod = gpuPod("loud", 1, 0, "")
	c.UpsertPod(pod)
	if g := c.snap.Gangs[podOf(c, "ns/loud").Gang]; g == nil || g.NeverPreempts {
		t.Fatalf("gang of a pod without preemptionPolicy: %+v, want it to preempt", g)
	}
}
