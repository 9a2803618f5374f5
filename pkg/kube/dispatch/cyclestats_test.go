package dispatch

import (
	"runtime"
	"testing"
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
