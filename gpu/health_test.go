package gpu_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/gpu"
)

func TestXIDsMarkTheRightGPUUnhealthy(t *testing.T) {
	f := mustFleet(t, "dgxh100")
	tracker := gpu.NewHealthTracker()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- gpu.WatchXIDs(ctx, f, tracker) }()

	f.GPUs[1].InjectXID(13) // application fault: the GPU is fine
	f.GPUs[6].InjectXID(79) // fell off the bus

	var inv *gpu.Inventory
	deadline := time.Now().Add(10 * time.Second)
	for {
		inv = mustDiscover(t, f)
		tracker.Apply(inv)
		if inv.Devices[6].Health.State == gpu.Unhealthy || time.Now().After(deadline) {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("WatchXIDs: %v", err)
	}
	h := inv.Devices[6].Health
	if h.State != gpu.Unhealthy || h.LastXID != 79 || !strings.Contains(strings.Join(h.Reasons, ";"), "fallen off the bus") {
		t.Errorf("GPU 6 health %+v, want unhealthy by xid 79", h)
	}
	if h := inv.Devices[1].Health; h.State != gpu.Healthy {
		t.Errorf("GPU 1 health %+v: an application XID must not take a GPU out of service", h)
	}
	// Sticky: a fresh reading is still unhealthy.
	inv = mustDiscover(t, f)
	tracker.Apply(inv)
	if inv.Devices[6].Health.State != gpu.Unhealthy {
		t.Error("XID health was not sticky")
	}
}
