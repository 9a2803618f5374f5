package cache

import (
	"math"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// FuzzGPUAnnotations reads any text as gantry.dev/gpu-memory, gantry.dev/gpu-fraction
// and gantry.dev/gpus. What must hold: an accepted memory is a positive number of
// bytes; an accepted fraction is 1 to 1000 thousandths of a GPU; NaN and infinities
// are refused; an accepted booking has no negative index nor non-positive share and
// reads back the same after FormatGPUs; a refused booking says what an entry is.
func FuzzGPUAnnotations(f *testing.F) {
	for _, s := range []string{"2000", "20Gi", "NaN", "-1", "0.5", "1e300", "Inf", "20GB", "0,3:21474836480", "x,2:-5,4", "", "1m", "0.0000001"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		if b, err := ParseGPUMemory(s); err == nil && b <= 0 {
			t.Fatalf("gpu-memory %q accepted as %d bytes", s, b)
		}
		if m, err := ParseGPUFraction(s); err == nil && (m < 1 || m > model.MilliPerGPU) {
			t.Fatalf("gpu-fraction %q accepted as %d thousandths", s, m)
		}
		for _, bad := range []string{"NaN", "nan", "Inf", "+Inf", "-Inf", "infinity"} {
			if s == bad {
				if _, err := ParseGPUFraction(s); err == nil {
					t.Fatalf("gpu-fraction %q accepted", s)
				}
				if _, err := ParseGPUMemory(s); err == nil {
					t.Fatalf("gpu-memory %q accepted", s)
				}
			}
		}
		gpus, err := ParseGPUs(s)
		if err != nil {
			return
		}
		for _, g := range gpus {
			if g.Index < 0 || (!g.Whole && (g.MemoryBytes <= 0 || g.MemoryBytes > math.MaxInt64)) {
				t.Fatalf("booking %q read as %+v", s, g)
			}
		}
		again, err := ParseGPUs(FormatGPUs(gpus))
		if err != nil || len(again) != len(gpus) {
			t.Fatalf("booking %q: %+v does not read back (%v)", s, gpus, err)
		}
		for i := range gpus {
			if again[i] != gpus[i] {
				t.Fatalf("booking %q: %+v reads back as %+v", s, gpus, again)
			}
		}
	})
}
