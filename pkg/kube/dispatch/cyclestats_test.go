package dispatch

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/tools/events"
)

// A cycle's line tells the GC cycles that ended during it, with their pauses: a
// forced collection between start and stop is seen.
func TestRuntimeSamplerSeesACollection(t *testing.T) {
	s := newRuntimeSampler()
	runtime.GC()
	s.start()
	quiet := s.stop()
	if quiet.Goroutines == 0 || quiet.HeapLive == 0 {
		t.Fatalf("goroutines %d, live heap %d: the runtime's metrics were not read", quiet.Goroutines, quiet.HeapLive)
	}
	s.start()
	runtime.GC()
	st := s.stop()
	if st.GCs < 1 || st.Pauses < 1 || st.PauseMax <= 0 {
		t.Fatalf("a forced GC between start and stop: %d GC cycles, %d pauses, longest %s; want at least one of each", st.GCs, st.Pauses, st.PauseMax)
	}
	if st.GCCPU <= 0 {
		t.Errorf("a forced GC used no GC CPU: %s", st.GCCPU)
	}
}

// The cycle trace has one line per cycle, written by the time Run returns: its
// start, time, the pods and gangs sent to bind, the gangs pending, the binds in
// flight, the budget and the gangs deferred. Three pods with a budget of two are two
// cycles: two pods (one gang deferred), then one.
func TestCycleTraceHasALinePerCycle(t *testing.T) {
	c, s := backlog(t, 3)
	var out bytes.Buffer
	r := New(c, s, nil, events.NewFakeRecorder(1000), nil, Options{BindWorkers: 4, Trace: &out})
	r.binder = newFake(t, &fakeAPI{bind: func(string, int) error { return nil }})
	r.opts.CycleTarget = time.Hour
	before := time.Now()
	for range 2 {
		r.budget = 2
		r.Cycle(context.Background())
	}
	// The first line was flushed (a second since no flush); the second waits in
	// the buffer until Run returns. Run may run cycles of its own before it sees
	// its context ended: lines after the two.
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r.Run(ctx)
	lines := strings.Split(strings.TrimSuffix(out.String(), "\n"), "\n")
	if len(lines) < 2 {
		t.Fatalf("trace %q: want a line for each of the 2 cycles", out.String())
	}
	for i, want := range []struct{ pods, deferred string }{{"2", "1"}, {"1", "0"}} {
		f := strings.Split(lines[i], "\t")
		if len(f) != 8 {
			t.Fatalf("line %q: want 8 tab-separated fields", lines[i])
		}
		start, err := strconv.ParseInt(f[0], 10, 64)
		if err != nil || time.UnixMicro(start).Before(before.Truncate(time.Microsecond)) || time.UnixMicro(start).After(time.Now()) {
			t.Errorf("line %q: start %s is not the cycle's", lines[i], f[0])
		}
		if f[2] != want.pods || f[3] != want.pods || f[4] != "0" || f[6] != "2" || f[7] != want.deferred {
			t.Errorf("line %q: want %s pods in %s gangs, 0 pending, budget 2, %s deferred", lines[i], want.pods, want.pods, want.deferred)
		}
	}
}
