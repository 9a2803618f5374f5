package soak

import (
	"math"
	"strings"
	"testing"
	"time"
)

const exposition = `# TYPE process_resident_memory_bytes gauge
process_resident_memory_bytes 1.048576e+08
# TYPE go_goroutines gauge
go_goroutines 42
# TYPE gantry_scheduler_cycle_duration_seconds histogram
gantry_scheduler_cycle_duration_seconds_bucket{le="0.001"} 90
gantry_scheduler_cycle_duration_seconds_bucket{le="0.002"} 99
gantry_scheduler_cycle_duration_seconds_bucket{le="0.004"} 100
gantry_scheduler_cycle_duration_seconds_bucket{le="+Inf"} 100
gantry_scheduler_cycle_duration_seconds_sum 0.1
gantry_scheduler_cycle_duration_seconds_count 100
`

func TestParseSampleAndP99(t *testing.T) {
	s, err := ParseSample(time.Unix(0, 0), strings.NewReader(exposition))
	if err != nil {
		t.Fatal(err)
	}
	if s.RSSBytes != 100<<20 || s.Goroutines != 42 {
		t.Fatalf("RSS %v goroutines %v", s.RSSBytes, s.Goroutines)
	}
	p99, n := P99Between(Sample{Cycle: map[float64]uint64{}}, s)
	if p99 != 0.002 || n != 100 {
		t.Fatalf("p99 %v over %d cycles, want 0.002 over 100", p99, n)
	}
	if _, err := ParseSample(time.Now(), strings.NewReader("go_goroutines 1\n")); err == nil {
		t.Fatal("a scrape without RSS was accepted")
	}
}

func TestSummarizeSeesGrowthAndFlatness(t *testing.T) {
	start := time.Unix(0, 0)
	var growing, flat []Sample
	for i := 0; i <= 30; i++ {
		at := start.Add(time.Duration(i) * time.Minute)
		cycles := map[float64]uint64{0.001: uint64(100 * i), math.Inf(1): uint64(100 * i)}
		growing = append(growing, Sample{At: at, RSSBytes: float64(100<<20 + i*(2<<20)), Goroutines: float64(100 + i), Cycle: cycles})
		flat = append(flat, Sample{At: at, RSSBytes: float64(100<<20 + (i%2)*(1<<20)), Goroutines: 100, Cycle: cycles})
	}
	g, err := Summarize(growing, 5*time.Minute, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if g.RSSSlopeMiBPerMin < 1.9 || g.RSSGrowthPct < 20 || g.GoroutineSlopePerMin < 0.9 {
		t.Errorf("a leaking run looks flat: %s", g)
	}
	f, err := Summarize(flat, 5*time.Minute, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(f.RSSGrowthPct) > 1 || f.GoroutineSlopePerMin != 0 || f.CycleP99FirstSeconds != 0.001 || f.CycleP99LastSeconds != 0.001 {
		t.Errorf("a flat run looks like it grows: %s", f)
	}
	if _, err := Summarize(flat[:3], time.Minute, time.Minute); err == nil {
		t.Error("three samples summarized")
	}
}

// A step early in the run (caches filling) then a plateau: the fit after warm-up sees
// growth, the fit over the last two thirds does not; a steady leak shows in both.
func TestLateSlopeSeparatesWarmUpStepFromLeak(t *testing.T) {
	start := time.Unix(0, 0)
	var step, leak []Sample
	for i := 0; i <= 30; i++ {
		at := start.Add(time.Duration(i) * time.Minute)
		cycles := map[float64]uint64{0.001: uint64(100 * i), math.Inf(1): uint64(100 * i)}
		rss := float64(90 << 20)
		if i >= 8 {
			rss = 118 << 20
		}
		step = append(step, Sample{At: at, RSSBytes: rss, HeapBytes: 40 << 20, Goroutines: 100, Cycle: cycles, Load1: float64(i)})
		leak = append(leak, Sample{At: at, RSSBytes: float64(100<<20 + i*(1<<20)), HeapBytes: float64(40<<20 + i*(1<<20)), Goroutines: 100, Cycle: cycles})
	}
	s, err := Summarize(step, 5*time.Minute, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if s.RSSGrowthPct < 5 || math.Abs(s.LateRSSGrowthPct) > 1e-9 || math.Abs(s.LateHeapSlopeMiBPerMin) > 1e-9 {
		t.Errorf("step then plateau: growth after warm-up %.2f%%, over the last 2/3 %.2f%% (want > 5 and 0)", s.RSSGrowthPct, s.LateRSSGrowthPct)
	}
	if s.LoadFirst != 7.5 || s.LoadLast != 27.5 {
		t.Errorf("load first %.2f last %.2f, want 7.5 and 27.5 (means of minutes 5-10 and 25-30)", s.LoadFirst, s.LoadLast)
	}
	l, err := Summarize(leak, 5*time.Minute, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if l.LateRSSSlopeMiBPerMin < 0.99 || l.LateRSSGrowthPct < 15 || l.LateHeapSlopeMiBPerMin < 0.99 {
		t.Errorf("a leak looks flat over the last 2/3: %s", l)
	}
	if !strings.Contains(l.String(), "invariant violations: 0") {
		t.Errorf("the summary does not give the violation count:\n%s", l)
	}
}

// The live heap is the last GC's target over 1+GOGC/100; RssAnon is read in kB.
func TestLiveHeapAndAnonRSS(t *testing.T) {
	exp := exposition + "# TYPE go_memstats_next_gc_bytes gauge\ngo_memstats_next_gc_bytes 6.291456e+07\n" +
		"# TYPE go_gc_gogc_percent gauge\ngo_gc_gogc_percent 200\n"
	s, err := ParseSample(time.Unix(0, 0), strings.NewReader(exp))
	if err != nil {
		t.Fatal(err)
	}
	if s.LiveHeapBytes != 20<<20 {
		t.Errorf("live heap %v, want 20 MiB (60 MiB target at GOGC=200)", s.LiveHeapBytes)
	}
	status := "VmRSS:\t  111840 kB\nRssAnon:\t   42344 kB\nRssFile:\t   69496 kB\n"
	if got := parseRSS(status, "RssAnon:"); got != 42344*1024 {
		t.Errorf("RssAnon %v, want %v", got, 42344*1024)
	}
	if got := parseRSS(status, "RssFile:"); got != 69496*1024 {
		t.Errorf("RssFile %v, want %v", got, 69496*1024)
	}
	if got := parseRSS("VmRSS: 1 kB\n", "RssAnon:"); got != 0 {
		t.Errorf("no RssAnon line read as %v", got)
	}
	// RSS that steps up with the executable's pages while the live heap and the
	// anonymous RSS stay flat, then a live heap that leaks: each fit sees its own.
	start := time.Unix(0, 0)
	var flat, leak []Sample
	for i := 0; i <= 30; i++ {
		at := start.Add(time.Duration(i) * time.Minute)
		cycles := map[float64]uint64{0.001: uint64(100 * i), math.Inf(1): uint64(100 * i)}
		flat = append(flat, Sample{At: at, RSSBytes: float64(100<<20 + i*(1<<20)), LiveHeapBytes: 20 << 20, AnonRSSBytes: 50 << 20, FileRSSBytes: float64(50<<20 + i*(1<<20)), Goroutines: 100, Cycle: cycles})
		leak = append(leak, Sample{At: at, RSSBytes: 100 << 20, LiveHeapBytes: float64(20<<20 + i*(1<<19)), AnonRSSBytes: float64(50<<20 + i*(1<<20)), Goroutines: 100, Cycle: cycles})
	}
	f, err := Summarize(flat, 5*time.Minute, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if f.RSSGrowthPct < 20 || f.LiveHeap.StartMiB != 20 || math.Abs(f.LiveHeap.Pct) > 1e-9 || math.Abs(f.AnonRSS.Pct) > 1e-9 ||
		math.Abs(f.FileRSS.SlopeMiBPerMin-1) > 1e-9 || !strings.Contains(f.String(), "file RSS (the executable's pages): 55.0 MiB") {
		t.Errorf("flat live heap and anonymous RSS under growing RSS: %s", f)
	}
	l, err := Summarize(leak, 5*time.Minute, 5*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	// 0.5 MiB/min for 25 min on a 22.5 MiB start; 1 MiB/min on 55 MiB.
	if math.Abs(l.LiveHeap.SlopeMiBPerMin-0.5) > 1e-9 || math.Abs(l.LiveHeap.Pct-100*12.5/22.5) > 1e-6 || math.Abs(l.AnonRSS.Pct-100*25.0/55) > 1e-6 {
		t.Errorf("leaking live heap / anonymous RSS misread: %+v %+v", l.LiveHeap, l.AnonRSS)
	}
	if !strings.Contains(l.String(), "live heap") || !strings.Contains(l.String(), "anonymous RSS") {
		t.Errorf("the summary does not give the live heap and the anonymous RSS:\n%s", l)
	}
	if strings.Contains(Report{}.String(), "live heap") {
		t.Error("a report without live-heap samples prints a live heap")
	}
}
