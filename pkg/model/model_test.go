package model

import (
	"strings"
	"testing"
)

func TestBookAndUnbookAreInverse(t *testing.T) {
	n := &Node{Name: "a", Allocatable: Resources{MilliCPU: 8000, MemoryBytes: 64 << 30, Pods: 10}, GPUs: []GPU{
		{Index: 0, MemoryBytes: 80 << 30, LiveFreeBytes: 80 << 30, Healthy: true},
		{Index: 1, MemoryBytes: 80 << 30, LiveFreeBytes: UnknownBytes, Healthy: true},
	}}
	whole := &Pod{ID: "ns/whole", Requests: Resources{MilliCPU: 1000, MemoryBytes: 1 << 30}}
	share := &Pod{ID: "ns/share", Requests: Resources{MilliCPU: 500}}
	wholeGPU := []GPUBinding{{Index: 0, Whole: true}}
	shareGPU := []GPUBinding{{Index: 1, MemoryBytes: 20 << 30}}

	n.Book(whole, wholeGPU)
	n.Book(share, shareGPU)
	if g := n.GPUs[0]; !g.Exclusive || g.AllocatedBytes != 80<<30 || g.LiveFreeBytes != 0 || g.FreeBytes() != 0 {
		t.Errorf("whole GPU after booking: %+v", g)
	}
	if g := n.GPUs[1]; g.Exclusive || g.Sharers != 1 || g.FreeBytes() != 60<<30 || g.LiveFreeBytes != UnknownBytes {
		t.Errorf("shared GPU after booking: %+v", g)
	}
	if n.Requested != (Resources{MilliCPU: 1500, MemoryBytes: 1 << 30, Pods: 2}) {
		t.Errorf("requested = %+v; each pod takes one slot even with Pods unset", n.Requested)
	}
	n.Unbook(share, shareGPU)
	n.Unbook(whole, wholeGPU)
	for i, g := range n.GPUs {
		if !g.Idle() {
			t.Errorf("GPU %d not idle after unbooking: %+v", i, g)
		}
	}
	if n.GPUs[0].LiveFreeBytes != 80<<30 {
		t.Errorf("live free memory not restored: %d", n.GPUs[0].LiveFreeBytes)
	}
	if n.Requested != (Resources{}) {
		t.Errorf("requested after unbooking = %+v", n.Requested)
	}
}

func TestDemandBytes(t *testing.T) {
	g := &GPU{MemoryBytes: 24 << 30}
	cases := []struct {
		d        GPUDemand
		book     int64
		needLive int64
	}{
		{GPUDemand{Count: 1}, 24 << 30, 24 << 30},
		{GPUDemand{Count: 1, MemoryBytes: 10 << 30}, 10 << 30, 10 << 30},
		{GPUDemand{Count: 1, FractionMilli: 250}, 6 << 30, 6 << 30},
		// vLLM at 0.75 needs three quarters free, and takes them: one demand, one
		// booking (issue 19), whatever smaller share it asked for.
		{GPUDemand{Count: 1, MemoryBytes: 4 << 30, StartFreeFraction: 0.75}, 18 << 30, 18 << 30},
		{GPUDemand{Count: 1, FractionMilli: 250, StartFreeFraction: 0.5}, 12 << 30, 12 << 30},
		// A share larger than the engine's need books the share.
		{GPUDemand{Count: 1, MemoryBytes: 20 << 30, StartFreeFraction: 0.5}, 20 << 30, 20 << 30},
		// A whole GPU books the GPU; its engine's fraction only bounds live memory.
		{GPUDemand{Count: 1, StartFreeFraction: 0.9}, 24 << 30, 24 << 30},
	}
	for _, c := range cases {
		if got := c.d.BytesOn(g); got != c.book {
			t.Errorf("%+v books %d, want %d", c.d, got, c.book)
		}
		if got := c.d.NeedsLiveFreeBytes(g); got != c.needLive {
			t.Errorf("%+v needs %d live free, want %d", c.d, got, c.needLive)
		}
	}
}

func TestShareConflict(t *testing.T) {
	const gpu = 80 << 30
	issue := GPUDemand{Count: 1, MemoryBytes: 20 << 30, StartFreeFraction: 0.75}
	msg := issue.ShareConflict(gpu)
	for _, want := range []string{"20 GiB", "0.75", "60 GiB free", "booked for 60 GiB"} {
		if !strings.Contains(msg, want) {
			t.Errorf("ShareConflict = %q, want it to mention %q", msg, want)
		}
	}
	for _, d := range []GPUDemand{
		{Count: 1, MemoryBytes: 60 << 30, StartFreeFraction: 0.75}, // agree
		{Count: 1, MemoryBytes: 20 << 30},                          // no engine
		{Count: 1, StartFreeFraction: 0.9},                         // whole GPU
	} {
		if msg := d.ShareConflict(gpu); msg != "" {
			t.Errorf("%+v: ShareConflict = %q, want none", d, msg)
		}
	}
}

func TestCanonicalGPUModel(t *testing.T) {
	for in, want := range map[string]string{
		"NVIDIA A10G":             "NVIDIA-A10G",
		"NVIDIA-A10G":             "NVIDIA-A10G",
		" NVIDIA  H100 80GB HBM3": "NVIDIA-H100-80GB-HBM3",
		"NVIDIA A100-SXM4-80GB":   "NVIDIA-A100-SXM4-80GB",
	} {
		if got := CanonicalGPUModel(in); got != want {
			t.Errorf("CanonicalGPUModel(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestRemoveNodeKeepsTheIndex(t *testing.T) {
	s := NewSnapshot()
	for _, name := range []string{"a", "b", "c"} {
		s.AddNode(&Node{Name: name})
	}
	s.RemoveNode("a")
	if s.Node("a") != nil || len(s.Nodes) != 2 {
		t.Fatalf("a still there: %v", s.Nodes)
	}
	for _, name := range []string{"b", "c"} {
		if n := s.Node(name); n == nil || n.Name != name || s.Nodes[s.NodeIndex(name)] != n {
			t.Errorf("index broken for %s", name)
		}
	}
}
