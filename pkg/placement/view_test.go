package placement

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

func TestViewAssignCopiesOnWrite(t *testing.T) {
	s := snapshotOf(gpuNode("a", 2, "H100", 80*gib))
	original := s.Node("a")
	v := NewView(s)
	pod := memSharePod("p", 20*gib)
	v.Assign(pod, Placement{Pod: pod.ID, Node: "a", GPUs: []model.GPUBinding{{Index: 1, MemoryBytes: 20 * gib}}})

	got := v.Node("a")
	if got == original {
		t.Fatal("Assign changed the snapshot's node in place")
	}
	if original.Requested != (model.Resources{}) || original.GPUs[1].AllocatedBytes != 0 {
		t.Fatalf("snapshot node changed before Commit: %+v", original)
	}
	if want := (model.Resources{MilliCPU: 1000, MemoryBytes: gib, Pods: 1}); got.Requested != want {
		t.Fatalf("Requested = %+v, want %+v", got.Requested, want)
	}
	if g := got.GPUs[1]; g.AllocatedBytes != 20*gib || g.Sharers != 1 || g.Exclusive {
		t.Fatalf("GPU 1 = %+v, want 20 GiB booked by one sharer", g)
	}

	before := v.Node("a")
	v.Assign(pod, Placement{Pod: pod.ID, Node: "a", GPUs: []model.GPUBinding{{Index: 1, MemoryBytes: 20 * gib}}})
	if v.Node("a") == before || before.GPUs[1].AllocatedBytes != 20*gib {
		t.Fatal("a second write changed a node a caller already held")
	}
}

func TestViewForkRollbackAndCommit(t *testing.T) {
	s := snapshotOf(gpuNode("a", 2, "H100", 80*gib), gpuNode("b", 2, "H100", 80*gib))
	root := NewView(s)
	whole := func(node string, gpu int) Placement {
		return Placement{Node: node, GPUs: []model.GPUBinding{{Index: gpu, MemoryBytes: 80 * gib, Whole: true}}}
	}
	pod := gpuPod("p", 1, 1000, gib)

	thrownAway := root.Fork()
	thrownAway.Assign(pod, whole("a", 0))
	if root.Node("a").IdleGPUs() != 2 {
		t.Fatal("a fork's write reached its parent without Commit")
	}

	outer := root.Fork()
	outer.Assign(pod, whole("a", 0))
	inner := outer.Fork()
	inner.Assign(pod, whole("b", 1))
	inner.Commit()
	if outer.Node("b").IdleGPUs() != 1 {
		t.Fatal("inner Commit did not reach the outer fork")
	}
	if root.Node("a").IdleGPUs() != 2 || root.Node("b").IdleGPUs() != 2 {
		t.Fatal("inner Commit reached the root past an uncommitted fork")
	}
	outer.Commit()
	if root.Node("a").IdleGPUs() != 1 || root.Node("b").IdleGPUs() != 1 {
		t.Fatal("outer Commit did not reach the root")
	}
	if s.Node("a").IdleGPUs() != 2 {
		t.Fatal("the snapshot changed before the root committed")
	}
	root.Commit()
	if s.Node("a").IdleGPUs() != 1 || s.Node("b").IdleGPUs() != 1 {
		t.Fatal("root Commit did not write the snapshot")
	}
}

func TestViewReleaseUndoesAssign(t *testing.T) {
	s := snapshotOf(gpuNode("a", 2, "H100", 80*gib))
	s.Nodes[0].GPUs[0].LiveFreeBytes = 79 * gib
	v := NewView(s)
	share := memSharePod("share", 30*gib)
	whole := gpuPod("whole", 1, 2000, 2*gib)
	sharePl := Placement{Node: "a", GPUs: []model.GPUBinding{{Index: 0, MemoryBytes: 30 * gib}}}
	wholePl := Placement{Node: "a", GPUs: []model.GPUBinding{{Index: 1, MemoryBytes: 80 * gib, Whole: true}}}
	v.Assign(share, sharePl)
	v.Assign(whole, wholePl)
	if got := v.Node("a").GPUs[0].LiveFreeBytes; got != 49*gib {
		t.Fatalf("live free after a 30 GiB share = %d GiB, want 49", got/gib)
	}

	share.Node, share.GPUs = "a", sharePl.GPUs
	whole.Node, whole.GPUs = "a", wholePl.GPUs
	v.Release(share)
	v.Release(whole)
	n := v.Node("a")
	if n.Requested != (model.Resources{}) {
		t.Fatalf("Requested after release = %+v, want zero", n.Requested)
	}
	for i, g := range n.GPUs {
		if !g.Idle() {
			t.Fatalf("GPU %d after release = %+v, want idle", i, g)
		}
	}
	if got := n.GPUs[0].LiveFreeBytes; got != 79*gib {
		t.Fatalf("live free after release = %d GiB, want 79", got/gib)
	}
	v.Release(gpuPod("pending", 1, 0, 0))
	if v.Node("a") != n {
		t.Fatal("releasing a pod that is not bound changed the node")
	}
}
