package agent

import (
	"context"
	"testing"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
)

// A claim whose Unprepare was lost is collected once it has been missing
// from the API for the grace period; a claim that exists is kept.
func TestCheckpointGCCollectsVanishedClaims(t *testing.T) {
	e := newDriverEnv(t, "1xH100")
	d := e.start(t, nil)
	kept := allocatedClaim("uid-kept", "kept", share{device: "gpu-0", memory: "10Gi", shareID: "a"})
	lost := allocatedClaim("uid-lost", "lost", share{device: "gpu-0", memory: "20Gi", shareID: "b"})
	prepare(t, d, kept, lost)

	kube := kubefake.NewClientset(&resourceapi.ResourceClaim{ObjectMeta: kept.ObjectMeta})
	clock := time.Unix(1_000_000, 0)
	gc := &CheckpointGC{Client: kube, Grace: 5 * time.Minute, Interval: time.Minute, now: func() time.Time { return clock }}
	ctx := context.Background()

	if got := gc.Collect(ctx, d); len(got) != 0 {
		t.Fatalf("collected %v at first sight", got)
	}
	clock = clock.Add(2 * time.Minute)
	if got := gc.Collect(ctx, d); len(got) != 0 {
		t.Fatalf("collected %v inside the grace period", got)
	}
	clock = clock.Add(4 * time.Minute)
	got := gc.Collect(ctx, d)
	if len(got) != 1 || got[0] != lost.UID {
		t.Fatalf("collected %v, want [%s]", got, lost.UID)
	}
	allocs := d.Allocations()
	if len(allocs) != 1 || allocs[0].ClaimUID != kept.UID {
		t.Errorf("allocations after GC %+v", allocs)
	}
	if cdiSpecExists(e.cdiRoot, lost.UID) || !cdiSpecExists(e.cdiRoot, kept.UID) {
		t.Error("wrong CDI specs removed")
	}
	// The freed memory can be prepared again.
	again := allocatedClaim("uid-new", "new", share{device: "gpu-0", memory: "60Gi", shareID: "c"})
	if r := prepare(t, d, again)[again.UID]; r.Err != nil {
		t.Errorf("memory of the collected claim still booked: %v", r.Err)
	}
}

// A claim deleted and recreated under the same name is a different claim.
func TestCheckpointGCComparesUIDs(t *testing.T) {
	e := newDriverEnv(t, "1xH100")
	d := e.start(t, nil)
	old := allocatedClaim("uid-old", "same", share{device: "gpu-0"})
	prepare(t, d, old)
	recreated := allocatedClaim("uid-recreated", "same")
	kube := kubefake.NewClientset(&resourceapi.ResourceClaim{ObjectMeta: recreated.ObjectMeta})
	clock := time.Unix(1_000_000, 0)
	gc := &CheckpointGC{Client: kube, Grace: time.Minute, Interval: time.Second, now: func() time.Time { return clock }}
	gc.Collect(context.Background(), d)
	clock = clock.Add(2 * time.Minute)
	if got := gc.Collect(context.Background(), d); len(got) != 1 || got[0] != old.UID {
		t.Errorf("collected %v, want the old UID", got)
	}
}
