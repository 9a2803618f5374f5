package cache

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// gpuCluster is a cache with nodes of gpus whole GPUs each (counted by the device
// plugin: nvidia.com/gpu).
func gpuCluster(t *testing.T, gpus int, nodes ...string) (*Cache, *scheduler.Scheduler) {
	t.Helper()
	c := New([]string{testScheduler}, &gang.StaticLookup{}, "")
	for _, n := range nodes {
		alloc := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
			corev1.ResourcePods: resource.MustParse("110"), names.ExtendedGPUResource: *resource.NewQuantity(int64(gpus), resource.DecimalSI),
		}
		c.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: n, Labels: map[string]string{names.LabelGFDMemory: "81920"}},
			Status: corev1.NodeStatus{Allocatable: alloc}})
	}
	s, err := scheduler.New("bestfit", scheduler.Config{Preemption: true})
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// gpuPod is a pod of ours asking for gpus whole GPUs, at priority, bound to node
// when node is not empty.
func gpuPod(name string, gpus int, priority int32, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.Unix(1000, 0)},
		Spec: corev1.PodSpec{
			SchedulerName: testScheduler, NodeName: node, Priority: ptr.To(priority),
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{
				names.ExtendedGPUResource: *resource.NewQuantity(int64(gpus), resource.DecimalSI)}}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

func cycle(c *Cache, s *scheduler.Scheduler) *Decisions {
	now := time.Unix(2000, 0)
	prep := c.PrepareOrdered(context.Background(), now, func(snap *model.Snapshot, order *scheduler.Order, skip func(model.GangID) bool) *scheduler.Plan {
		return s.ScheduleOrdered(snap, order, skip, scheduler.Bound{})
	})
	return c.Commit(prep.Plan, now)
}

// podOf returns the snapshot's pod, read through the cache's lock.
func podOf(c *Cache, id model.PodID) model.Pod {
	var p model.Pod
	c.View(func(s *model.Snapshot) {
		if q := s.Pods[id]; q != nil {
			p = *q
		}
	})
	return p
}

func idleGPUs(c *Cache, node string) int {
	n := 0
	c.View(func(s *model.Snapshot) {
		for _, g := range s.Node(node).GPUs {
			if g.Idle() {
				n++
			}
		}
	})
	return n
}

func TestCommitAssumesAndTheInformerLagDoesNotUndoIt(t *testing.T) {
	c, s := gpuCluster(t, 2, "a")
	pod := gpuPod("p", 2, 10, "")
	c.UpsertPod(pod)
	d := cycle(c, s)
	if len(d.Batches) != 1 || len(d.Batches[0].Reqs) != 1 {
		t.Fatalf("batches = %+v, want p bound", d.Batches)
	}
	if got := podOf(c, "ns/p"); got.Node != "a" {
		t.Fatalf("after Commit p is on %q, want assumed on a", got.Node)
	}
	// An update that still shows the pod unbound (the informer lags the Binding).
	c.UpsertPod(pod.DeepCopy())
	if got := podOf(c, "ns/p"); got.Node != "a" || idleGPUs(c, "a") != 0 {
		t.Fatalf("after a lagging update p is on %q with %d idle GPUs, want still assumed on a", got.Node, idleGPUs(c, "a"))
	}
	// A second cycle must not place it again.
	if d := cycle(c, s); len(d.Batches) != 0 {
		t.Fatalf("second cycle binds %+v again", d.Batches)
	}
}

func TestForgetFreesWhatAnAssumedPodHeld(t *testing.T) {
	c, s := gpuCluster(t, 2, "a")
	c.UpsertPod(gpuPod("p", 2, 10, ""))
	cycle(c, s)
	c.Forget("ns/p")
	if got := podOf(c, "ns/p"); got.Node != "" || idleGPUs(c, "a") != 2 {
		t.Fatalf("after Forget p is on %q with %d idle GPUs, want pending and 2 idle", got.Node, idleGPUs(c, "a"))
	}
	if d := cycle(c, s); len(d.Batches) != 1 {
		t.Fatalf("after Forget the next cycle binds %+v, want p again", d.Batches)
	}
}

func TestTheAPIsWordReplacesAnAssumption(t *testing.T) {
	c, s := gpuCluster(t, 2, "a", "b")
	pod := gpuPod("p", 2, 10, "")
	c.UpsertPod(pod)
	d := cycle(c, s)
	planned := d.Batches[0].Reqs[0].Placement.Node
	other := map[string]string{"a": "b", "b": "a"}[planned]
	bound := pod.DeepCopy()
	bound.Spec.NodeName = other
	c.UpsertPod(bound)
	if got := podOf(c, "ns/p"); got.Node != other {
		t.Fatalf("p is on %q, want %q as the API says", got.Node, other)
	}
	if idleGPUs(c, planned) != 2 || idleGPUs(c, other) != 0 {
		t.Fatalf("idle GPUs %s=%d %s=%d, want the planned node free", planned, idleGPUs(c, planned), other, idleGPUs(c, other))
	}
}

// preemption is one node of 2 GPUs held by a preemptible pod, and an inference pod
// that needs both.
func preemption(t *testing.T) (*Cache, *scheduler.Scheduler) {
	c, s := gpuCluster(t, 2, "a")
	running := gpuPod("train", 2, 10, "a")
	running.Status.Phase = corev1.PodRunning
	c.UpsertPod(running)
	c.UpsertPod(gpuPod("serve", 2, 200, ""))
	return c, s
}

func TestCommitRecordsVictimsAndNominationsBeforeAnyEcho(t *testing.T) {
	c, s := preemption(t)
	d := cycle(c, s)
	if len(d.Evictions) != 1 || d.Evictions[0].Pod.ID != "ns/train" {
		t.Fatalf("evictions = %+v, want train", d.Evictions)
	}
	if got := d.Evictions[0].GPUMemory; got != 2*80<<30 {
		t.Fatalf("the victim holds %d bytes of GPU memory, want its two whole 80 GiB GPUs", got)
	}
	if len(d.Nominations) != 1 {
		t.Fatalf("nominations = %+v, want serve nominated", d.Nominations)
	}
	if got := podOf(c, "ns/serve"); got.NominatedNode != "a" {
		t.Fatalf("serve's nomination in the cache is %q before any echo, want a", got.NominatedNode)
	}
	if got := podOf(c, "ns/train"); !got.Terminating {
		t.Fatal("the victim is not marked terminating at Commit")
	}
	// An informer update of the preemptor without the nomination (the patch has
	// not landed yet) keeps it.
	c.UpsertPod(gpuPod("serve", 2, 200, ""))
	if got := podOf(c, "ns/serve"); got.NominatedNode != "a" {
		t.Fatalf("a lagging update dropped serve's nomination (%q)", got.NominatedNode)
	}
	// The next cycle waits for the victim: no second search, no new eviction.
	if d := cycle(c, s); len(d.Evictions) != 0 || len(d.Batches) != 0 {
		t.Fatalf("second cycle evicts %+v and binds %+v, want it to wait for its victim", d.Evictions, d.Batches)
	}
	if !c.NeedsVictims("ns/serve") {
		t.Fatal("NeedsVictims = false for a preemptor still pending")
	}
}

func TestRefusedEvictionRunsOnAndAPreemptorGoneNeedsNoVictims(t *testing.T) {
	c, s := preemption(t)
	cycle(c, s)
	c.UnmarkTerminating("ns/train")
	if got := podOf(c, "ns/train"); got.Terminating {
		t.Fatal("UnmarkTerminating left the victim terminating")
	}
	c.DeletePod("ns", "serve")
	if c.NeedsVictims("ns/serve") {
		t.Fatal("NeedsVictims = true for a deleted preemptor")
	}
}

func TestBadAnnotationIsATypedPendingReason(t *testing.T) {
	c, s := gpuCluster(t, 2, "a")
	pod := gpuPod("p", 1, 10, "")
	pod.Annotations = map[string]string{names.AnnotationGPUFraction: "NaN"}
	c.UpsertPod(pod)
	d := cycle(c, s)
	if len(d.Pending) != 1 || d.Pending[0].Kind != scheduler.PendingInvalidPod {
		t.Fatalf("pending = %+v, want p pending as invalid_pod", d.Pending)
	}
}

func TestBindBackoffHoldsTheGangBack(t *testing.T) {
	c, s := gpuCluster(t, 2, "a")
	c.UpsertPod(gpuPod("p", 2, 10, ""))
	d := cycle(c, s)
	c.Forget("ns/p")
	c.Backoff(d.Batches[0].Gang, time.Unix(2000, 0).Add(time.Minute))
	if d := cycle(c, s); len(d.Batches) != 0 {
		t.Fatalf("a gang in backoff was bound again: %+v", d.Batches)
	}
}

// The echo of our own binding, bound where the cycle assumed it, wakes no cycle: a
// drain's echoes would each wake one that finds nothing to do. A pod bound anywhere
// else, or a new pod, still does.
func TestBindEchoWakesNoCycle(t *testing.T) {
	c, s := gpuCluster(t, 8, "n1")
	drain := func() bool {
		select {
		case <-c.Changed():
			return true
		default:
			return false
		}
	}
	c.UpsertPod(gpuPod("a", 1, 0, ""))
	c.UpsertPod(gpuPod("b", 1, 0, ""))
	if !drain() {
		t.Fatal("a new pending pod woke no cycle")
	}
	d := cycle(c, s)
	if len(d.Batches) != 2 {
		t.Fatalf("%d batches, want both pods placed", len(d.Batches))
	}
	drain()
	c.UpsertPod(gpuPod("a", 1, 0, "n1"))
	if drain() {
		t.Fatal("the echo of a's binding, where it was assumed, woke a cycle")
	}
	if p := podOf(c, "ns/a"); p.Node != "n1" || len(p.GPUs) != 1 {
		t.Fatalf("a after its echo: node %q, %d GPUs; want n1 holding one", p.Node, len(p.GPUs))
	}
	c.UpsertPod(gpuPod("c", 1, 0, "n1"))
	if !drain() {
		t.Fatal("a pod bound by someone else woke no cycle")
	}
	c.DeletePod("ns", "b")
	if !drain() {
		t.Fatal("a deleted assumed pod woke no cycle")
	}
}
