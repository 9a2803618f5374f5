package main

import (
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
	"time"
)

func TestGCPercent(t *testing.T) {
	for _, tt := range []struct {
		live uint64
		want int
	}{
		{0, 300},        // before the first collection
		{32 << 20, 300}, // a small cluster: four times its live heap at most
		{85 << 20, 300},
		{128 << 20, 200}, // 256 MiB of headroom
		{150 << 20, 170},
		{256 << 20, 100}, // from here on GOGC=100, as without the tuner
		{420 << 20, 100},
		{4 << 30, 100},
	} {
		if got := gcPercent(tt.live); got != tt.want {
			t.Errorf("gcPercent(%d MiB) = %d, want %d", tt.live>>20, got, tt.want)
		}
	}
}

// A GOGC the operator set is left alone.
func TestTuneGCLeavesAGOGCSet(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(77))
	msg := tuneGC(func(k string) (string, bool) { return "77", k == "GOGC" })
	if !strings.Contains(msg, "GOGC=77 set") {
		t.Errorf("log line %q does not say GOGC is left as set", msg)
	}
	if got := debug.SetGCPercent(77); got != 77 {
		t.Errorf("GOGC %d after tuneGC with GOGC=77 set, want 77", got)
	}
}

// The tuner sets GOGC at its start and again after every collection: this test's heap
// is small, so 300.
func TestGCTunerRetunesAfterEachCollection(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	tunes := make(chan int, 16)
	tuner := newGCTuner(func(p int) {
		select {
		case tunes <- p:
		default:
		}
	})
	tuner.start()
	defer tuner.stop()
	if p := <-tunes; p != gcMaxPercent {
		t.Fatalf("first tune set GOGC %d, want %d for a small heap", p, gcMaxPercent)
	}
	for i := range 3 {
		debug.SetGCPercent(100) // as if something else had moved it
		runtime.GC()
		select {
		case p := <-tunes:
			if got := debug.SetGCPercent(p); p != gcMaxPercent || got != p {
				t.Fatalf("collection %d: tuner set GOGC %d and GOGC is %d, want %d", i, p, got, gcMaxPercent)
			}
		case <-time.After(10 * time.Second):
			t.Fatalf("collection %d: the tuner did not run within 10 s of it", i)
		}
	}
}
