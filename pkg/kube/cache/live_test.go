package cache

import (
	"context"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

func liveFree(c *Cache, node string, index int) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.snap.Node(node).GPUByIndex(index).LiveFreeBytes
}

// Free memory the node agent measured is trusted until it is older than the
// bound: an agent (or NVML) that died leaves its last reading in GPUNode
// status, and a cycle after the bound must not place by it.
func TestOldLiveFreeMemoryIsNotTrusted(t *testing.T) {
	c := draCluster(t, 1, 2, func(int) string { return "NVIDIA H100 80GB HBM3" })
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c.clock = func() time.Time { return t0.Add(time.Minute) }
	c.SetLiveMaxAge(5 * time.Minute)
	c.SetLive("node-0000", map[string]LiveGPU{
		"GPU-node-0000-0": {FreeBytes: 10 << 30, Healthy: true, SampledAt: t0},
		"GPU-node-0000-1": {FreeBytes: 20 << 30, Healthy: true, SampledAt: t0.Add(2 * time.Minute)},
	})
	if got := liveFree(c, "node-0000", 0); got != 10<<30 {
		t.Fatalf("fresh reading: live free %d, want %d", got, 10<<30)
	}
	s, err := scheduler.New("bestfit", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	cycle := func(at time.Time) {
		c.clock = func() time.Time { return at }
		c.Prepare(context.Background(), at, s.ScheduleSkipping)
	}
	cycle(t0.Add(4 * time.Minute))
	if got := liveFree(c, "node-0000", 0); got != 10<<30 {
		t.Errorf("4m old reading (bound 5m): live free %d, want %d", got, 10<<30)
	}
	cycle(t0.Add(5 * time.Minute))
	if got := liveFree(c, "node-0000", 0); got != model.UnknownBytes {
		t.Errorf("5m old reading (bound 5m): live free %d, want unknown", got)
	}
	if got := liveFree(c, "node-0000", 1); got != 20<<30 {
		t.Errorf("3m old reading of GPU 1: live free %d, want %d", got, 20<<30)
	}
	cycle(t0.Add(7 * time.Minute))
	if got := liveFree(c, "node-0000", 1); got != model.UnknownBytes {
		t.Errorf("5m old reading of GPU 1: live free %d, want unknown", got)
	}
	// A new reading is trusted again.
	c.SetLive("node-0000", map[string]LiveGPU{"GPU-node-0000-0": {FreeBytes: 30 << 30, Healthy: true, SampledAt: t0.Add(7 * time.Minute)}})
	if got := liveFree(c, "node-0000", 0); got != 30<<30 {
		t.Errorf("new reading: live free %d, want %d", got, 30<<30)
	}
	// A reading already too old when it arrives is never trusted.
	c.SetLive("node-0000", map[string]LiveGPU{"GPU-node-0000-0": {FreeBytes: 40 << 30, Healthy: true, SampledAt: t0}})
	if got := liveFree(c, "node-0000", 0); got != model.UnknownBytes {
		t.Errorf("reading older than the bound on arrival: live free %d, want unknown", got)
	}
}
