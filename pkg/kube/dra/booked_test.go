package dra

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// A 20 GiB share chosen by the allocator for an engine at 0.75 of an 80 GiB GPU is
// booked for 60 GiB; a whole GPU, a share that covers the engine, and any share of a
// pod without an engine are as chosen, and the allocator's own answer is not changed.
func TestBookedFor(t *testing.T) {
	const GiB = int64(1) << 30
	snap := model.NewSnapshot()
	snap.AddNode(&model.Node{Name: "n", GPUs: []model.GPU{{Index: 0, MemoryBytes: 80 * GiB}, {Index: 1, MemoryBytes: 80 * GiB}, {Index: 2, MemoryBytes: 80 * GiB}}})
	chosen := map[string][]model.GPUBinding{"n": {{Index: 0, MemoryBytes: 20 * GiB}, {Index: 1, Whole: true}, {Index: 2, MemoryBytes: 70 * GiB}}}
	got := BookedFor(snap, chosen, 0.75)["n"]
	want := []int64{60 * GiB, 0, 70 * GiB}
	for i, b := range got {
		if b.MemoryBytes != want[i] || b.Whole != chosen["n"][i].Whole || b.Index != chosen["n"][i].Index {
			t.Errorf("GPU %d booked %+v, want %d GiB", i, b, want[i]/GiB)
		}
	}
	if chosen["n"][0].MemoryBytes != 20*GiB {
		t.Error("BookedFor changed the allocator's choices")
	}
	if same := BookedFor(snap, chosen, 0)["n"]; same[0].MemoryBytes != 20*GiB {
		t.Errorf("without an engine a 20 GiB share is booked %d GiB", same[0].MemoryBytes/GiB)
	}
}
