package main

import (
	"fmt"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"sync/atomic"
)

// The collector's pace. With GOGC=100 the heap may grow by as much as the last
// collection found live before the next one starts, so a scheduler whose live heap is
// small collects often: in a drain of 20,000 pods on 5,000 nodes (about 150 MB live)
// the collector took a sixth of the scheduler's CPU, and on a machine the scheduler
// shares with the API server that CPU is the API server's (docs/benchmarks.md,
// session 18). A collection's cost grows with the live heap and the number of
// collections with the bytes allocated over the heap's growth between them, so the
// collector's CPU falls with that growth, whatever is live.
//
// The tuner lets the heap grow by at least gcHeadroom between collections, and by no
// more than gcMaxPercent of what is live: GOGC is gcHeadroom over the live heap, within
// [100, gcMaxPercent]. From 256 MiB live on it is GOGC=100, as without the tuner, so a
// large cluster's peak (100,000 pods: about 420 MB live, 880 MiB at its peak) does not
// move; below, the heap's goal is at most 512 MiB (at 256 MiB live), and a small
// cluster's at most four times its live heap. The soft memory limit (memlimit.go)
// still bounds the heap near the container's limit.
const (
	gcHeadroom   = 256 << 20
	gcMaxPercent = 300
)

// gcPercent is the GOGC for a live heap of live bytes.
func gcPercent(live uint64) int {
	if live == 0 {
		return gcMaxPercent
	}
	p := uint64(gcHeadroom) * 100 / live
	return int(min(max(p, 100), gcMaxPercent))
}

// gcTuner sets GOGC from the live heap after every collection.
type gcTuner struct {
	sample []metrics.Sample
	// tuned, when set, is called after each tune with the GOGC it set (tests).
	tuned   func(percent int)
	stopped atomic.Bool
}

// tuneGC starts the tuner unless GOGC is set (then the collector is left as it says).
// It returns what it did, for the log.
func tuneGC(getenv func(string) (string, bool)) string {
	if v, ok := getenv("GOGC"); ok {
		return fmt.Sprintf("GOGC=%s set: collector's pace left as it says", v)
	}
	newGCTuner(nil).start()
	return fmt.Sprintf("collector's pace: the heap grows by at least %d MiB between collections, at most %d %% of what is live (GOGC %d–%d); set GOGC to choose a fixed one",
		gcHeadroom>>20, gcMaxPercent, 100, gcMaxPercent)
}

func newGCTuner(tuned func(int)) *gcTuner {
	return &gcTuner{sample: []metrics.Sample{{Name: "/gc/heap/live:bytes"}}, tuned: tuned}
}

// start tunes once and then after every collection, until stop.
func (t *gcTuner) start() {
	t.tune()
	t.arm()
}

// stop ends the tuning after the next collection; GOGC stays as last set.
func (t *gcTuner) stop() { t.stopped.Store(true) }

// gcSentinel is an object nothing keeps: the next collection frees it, and its
// cleanup retunes and arms the next one. (A pointer field keeps it out of the tiny
// allocator, whose blocks may outlive it.)
type gcSentinel struct{ _ *byte }

func (t *gcTuner) arm() {
	runtime.AddCleanup(new(gcSentinel), func(t *gcTuner) {
		if t.stopped.Load() {
			return
		}
		t.tune()
		t.arm()
	}, t)
}

// tune sets GOGC for the live heap the last collection found. SetGCPercent moves the
// current cycle's goal at once, from that same live heap.
func (t *gcTuner) tune() {
	metrics.Read(t.sample)
	if t.sample[0].Value.Kind() != metrics.KindUint64 {
		return
	}
	p := gcPercent(t.sample[0].Value.Uint64())
	debug.SetGCPercent(p)
	if t.tuned != nil {
		t.tuned(p)
	}
}
