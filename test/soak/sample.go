// Package soak runs gantry-scheduler for a long stretch of churn on 1,000 kwok nodes
// and reports whether it stays flat: its resident memory and goroutine count (their
// slope after warm-up) and its cycle-latency p99 at the start and at the end. The
// test is TestSoak; it runs only when SOAK_DURATION is set (`make soak` sets 30m).
//
// This file holds the sampling and the figures, which are pure and unit-tested.
package soak

import (
	"fmt"
	"io"
	"math"
	"sort"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// cycleMetric is the scheduler's cycle-latency histogram.
const cycleMetric = "gantry_scheduler_cycle_duration_seconds"

// Sample is one scrape of the scheduler's /metrics.
type Sample struct {
	At         time.Time `json:"at"`
	RSSBytes   float64   `json:"rssBytes"`
	Goroutines float64   `json:"goroutines"`
	// HeapBytes is the Go heap in use (go_memstats_heap_inuse_bytes; 0 when not
	// exposed): RSS that grows while it stays flat is the runtime keeping freed pages,
	// not live data.
	HeapBytes float64 `json:"heapBytes"`
	// LiveHeapBytes is the heap the last GC found live: its next target
	// (go_memstats_next_gc_bytes) over 1+GOGC/100 (go_gc_gogc_percent, 100 when not
	// exposed); 0 when not exposed. Unlike RSS and heap in use it does not swing with
	// the GC cycle or the scavenger, so a leak shows in it directly.
	LiveHeapBytes float64 `json:"liveHeapBytes"`
	// AnonRSSBytes is the RSS without the executable's file pages (RssAnon of
	// /proc/PID/status, set by the caller; 0 when unknown): the 104 MB binary's pages
	// count in RSS as they are first touched and the kernel may drop and fault them
	// again, which is not the scheduler's memory growing.
	AnonRSSBytes float64 `json:"anonRssBytes"`
	// FileRSSBytes is the RSS of file pages (RssFile; 0 when unknown): the executable's
	// pages touched so far, so that RSS growth can be told apart into the two.
	FileRSSBytes float64 `json:"fileRssBytes"`
	// Load1 is the test machine's 1-minute load average when the sample was taken
	// (set by the caller; 0 when unknown), to read the cycle p99 against.
	Load1 float64 `json:"load1"`
	// Cycle is the cumulative cycle-latency histogram: upper bound → count.
	Cycle map[float64]uint64 `json:"-"`
}

// ParseSample reads the figures a soak tracks from a Prometheus text exposition.
func ParseSample(at time.Time, r io.Reader) (Sample, error) {
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(r)
	if err != nil {
		return Sample{}, fmt.Errorf("parse /metrics: %w", err)
	}
	s := Sample{At: at, Cycle: map[float64]uint64{}}
	gauge := func(name string) (float64, error) {
		f := fams[name]
		if f == nil || len(f.Metric) == 0 {
			return 0, fmt.Errorf("/metrics has no %s", name)
		}
		m := f.Metric[0]
		switch {
		case m.Gauge != nil:
			return m.Gauge.GetValue(), nil
		case m.Untyped != nil:
			return m.Untyped.GetValue(), nil
		}
		return 0, fmt.Errorf("%s is not a gauge", name)
	}
	if s.RSSBytes, err = gauge("process_resident_memory_bytes"); err != nil {
		return s, err
	}
	if s.Goroutines, err = gauge("go_goroutines"); err != nil {
		return s, err
	}
	if h, err := gauge("go_memstats_heap_inuse_bytes"); err == nil {
		s.HeapBytes = h
	}
	if next, err := gauge("go_memstats_next_gc_bytes"); err == nil {
		gogc, err := gauge("go_gc_gogc_percent")
		if err != nil || gogc <= 0 {
			gogc = 100
		}
		s.LiveHeapBytes = next / (1 + gogc/100)
	}
	if f := fams[cycleMetric]; f != nil && len(f.Metric) > 0 && f.Metric[0].Histogram != nil {
		s.Cycle = buckets(f.Metric[0].Histogram)
	}
	return s, nil
}

func buckets(h *dto.Histogram) map[float64]uint64 {
	out := map[float64]uint64{math.Inf(1): h.GetSampleCount()}
	for _, b := range h.Bucket {
		out[b.GetUpperBound()] = b.GetCumulativeCount()
	}
	return out
}

// P99Between is the 99th percentile of the cycles observed between two samples, as
// the upper bound of the bucket that holds it (Prometheus buckets are all we have),
// and how many cycles that was.
func P99Between(from, to Sample) (seconds float64, cycles uint64) {
	var bounds []float64
	for b := range to.Cycle {
		bounds = append(bounds, b)
	}
	sort.Float64s(bounds)
	total := to.Cycle[math.Inf(1)] - from.Cycle[math.Inf(1)]
	if total == 0 {
		return math.NaN(), 0
	}
	rank := uint64(math.Ceil(0.99 * float64(total)))
	for _, b := range bounds {
		if to.Cycle[b]-from.Cycle[b] >= rank {
			return b, total
		}
	}
	return math.Inf(1), total
}

// Slope fits y = a + b·t by least squares over the samples and returns b per minute
// and the fitted value at the first sample (for a relative growth).
func Slope(samples []Sample, y func(Sample) float64) (perMinute, start float64) {
	n := float64(len(samples))
	if n < 2 {
		return 0, 0
	}
	t0 := samples[0].At
	var sx, sy, sxx, sxy float64
	for _, s := range samples {
		x := s.At.Sub(t0).Minutes()
		v := y(s)
		sx, sy, sxx, sxy = sx+x, sy+v, sxx+x*x, sxy+x*v
	}
	den := n*sxx - sx*sx
	if den == 0 {
		return 0, sy / n
	}
	b := (n*sxy - sx*sy) / den
	return b, (sy - b*sx) / n
}

// Report is what a soak measured.
type Report struct {
	Duration    time.Duration `json:"duration"`
	WarmUp      time.Duration `json:"warmUp"`
	Samples     int           `json:"samples"`
	RSSStartMiB float64       `json:"rssStartMiB"`
	// RSSSlopeMiBPerMin is the fitted slope after warm-up; RSSGrowthPct that slope
	// over the rest of the run, as a percentage of the fitted start.
	RSSSlopeMiBPerMin       float64 `json:"rssSlopeMiBPerMin"`
	RSSGrowthPct            float64 `json:"rssGrowthPct"`
	GoroutinesStart         float64 `json:"goroutinesStart"`
	GoroutinesEnd           float64 `json:"goroutinesEnd"`
	GoroutineSlopePerMin    float64 `json:"goroutineSlopePerMin"`
	CycleP99FirstSeconds    float64 `json:"cycleP99FirstSeconds"`
	CycleP99LastSeconds     float64 `json:"cycleP99LastSeconds"`
	CyclesFirst, CyclesLast uint64
	Window                  time.Duration `json:"window"`
	// Late* fit the last two thirds of the run only: a warm-up step (caches filling
	// as the churn creates objects) ends before it, a leak goes on through it.
	LateRSSSlopeMiBPerMin  float64 `json:"lateRssSlopeMiBPerMin"`
	LateRSSGrowthPct       float64 `json:"lateRssGrowthPct"`
	LateHeapSlopeMiBPerMin float64 `json:"lateHeapSlopeMiBPerMin"`
	// LiveHeap and AnonRSS are the same fit after warm-up for Sample.LiveHeapBytes
	// and Sample.AnonRSSBytes (zero when not sampled): what the scheduler keeps
	// alive, and its RSS without the executable's pages.
	LiveHeap Growth `json:"liveHeap"`
	AnonRSS  Growth `json:"anonRss"`
	// FileRSS is the same fit for Sample.FileRSSBytes: the executable's pages.
	FileRSS Growth `json:"fileRss"`
	// LoadFirst and LoadLast are the mean 1-minute load averages over the p99's
	// first and last windows (0 when not sampled).
	LoadFirst, LoadLast float64
	// Violations is the invariant checker's count, set by the caller.
	Violations int `json:"violations"`
}

// Growth is a least-squares fit of a figure in MiB: its fitted start, its slope, and
// that slope over the fitted span as a percentage of the start.
type Growth struct {
	StartMiB       float64 `json:"startMiB"`
	SlopeMiBPerMin float64 `json:"slopeMiBPerMin"`
	Pct            float64 `json:"pct"`
}

// growth fits y (bytes) over samples; the zero Growth when y is never set.
func growth(samples []Sample, y func(Sample) float64) Growth {
	set := false
	for _, s := range samples {
		set = set || y(s) > 0
	}
	if !set || len(samples) < 2 {
		return Growth{}
	}
	slope, base := Slope(samples, func(s Sample) float64 { return y(s) / (1 << 20) })
	g := Growth{StartMiB: base, SlopeMiBPerMin: slope}
	if base > 0 {
		g.Pct = 100 * slope * samples[len(samples)-1].At.Sub(samples[0].At).Minutes() / base
	}
	return g
}

// Summarize computes a Report from samples in time order: warm-up is left out of the
// slopes, and the p99 compares the first and the last window after warm-up.
func Summarize(samples []Sample, warmUp, window time.Duration) (Report, error) {
	if len(samples) < 4 {
		return Report{}, fmt.Errorf("only %d samples: run longer", len(samples))
	}
	start := samples[0].At
	var steady []Sample
	for _, s := range samples {
		if s.At.Sub(start) >= warmUp {
			steady = append(steady, s)
		}
	}
	if len(steady) < 3 {
		return Report{}, fmt.Errorf("only %d samples after a %s warm-up: run longer", len(steady), warmUp)
	}
	r := Report{Duration: samples[len(samples)-1].At.Sub(start), WarmUp: warmUp, Samples: len(samples), Window: window}
	rss := growth(steady, func(s Sample) float64 { return s.RSSBytes })
	r.RSSStartMiB, r.RSSSlopeMiBPerMin, r.RSSGrowthPct = rss.StartMiB, rss.SlopeMiBPerMin, rss.Pct
	r.LiveHeap = growth(steady, func(s Sample) float64 { return s.LiveHeapBytes })
	r.AnonRSS = growth(steady, func(s Sample) float64 { return s.AnonRSSBytes })
	r.FileRSS = growth(steady, func(s Sample) float64 { return s.FileRSSBytes })
	r.GoroutineSlopePerMin, _ = Slope(steady, func(s Sample) float64 { return s.Goroutines })
	r.GoroutinesStart, r.GoroutinesEnd = steady[0].Goroutines, steady[len(steady)-1].Goroutines
	first, last := steady[0], steady[len(steady)-1]
	firstEnd, lastStart := first, last
	for _, s := range steady {
		if s.At.Sub(first.At) <= window {
			firstEnd = s
		}
	}
	for i := len(steady) - 1; i >= 0 && last.At.Sub(steady[i].At) <= window; i-- {
		lastStart = steady[i]
	}
	r.CycleP99FirstSeconds, r.CyclesFirst = P99Between(first, firstEnd)
	r.CycleP99LastSeconds, r.CyclesLast = P99Between(lastStart, last)
	r.LoadFirst = meanLoad(steady, first.At, firstEnd.At)
	r.LoadLast = meanLoad(steady, lastStart.At, last.At)
	var late []Sample
	for _, s := range samples {
		if s.At.Sub(start) >= r.Duration/3 {
			late = append(late, s)
		}
	}
	if len(late) >= 3 {
		lateRSS := growth(late, func(s Sample) float64 { return s.RSSBytes })
		r.LateRSSSlopeMiBPerMin, r.LateRSSGrowthPct = lateRSS.SlopeMiBPerMin, lateRSS.Pct
		r.LateHeapSlopeMiBPerMin = growth(late, func(s Sample) float64 { return s.HeapBytes }).SlopeMiBPerMin
	}
	return r, nil
}

// meanLoad is the mean Load1 of the samples taken from from to to.
func meanLoad(samples []Sample, from, to time.Time) float64 {
	var sum float64
	n := 0
	for _, s := range samples {
		if !s.At.Before(from) && !s.At.After(to) {
			sum += s.Load1
			n++
		}
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

func (r Report) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "soak %s (warm-up %s, %d samples)\n", r.Duration.Round(time.Second), r.WarmUp, r.Samples)
	fmt.Fprintf(&b, "  RSS: %.1f MiB at the start of the steady part, slope %+.3f MiB/min, growth %+.2f%% (goal < 5%%)\n", r.RSSStartMiB, r.RSSSlopeMiBPerMin, r.RSSGrowthPct)
	fmt.Fprintf(&b, "  goroutines: %.0f → %.0f, slope %+.3f/min (goal: no growth)\n", r.GoroutinesStart, r.GoroutinesEnd, r.GoroutineSlopePerMin)
	fmt.Fprintf(&b, "  RSS over the last 2/3: slope %+.3f MiB/min, growth %+.2f%%; Go heap in use slope %+.3f MiB/min\n",
		r.LateRSSSlopeMiBPerMin, r.LateRSSGrowthPct, r.LateHeapSlopeMiBPerMin)
	if r.LiveHeap.StartMiB > 0 {
		fmt.Fprintf(&b, "  live heap (kept by the last GC): %.1f MiB at the start of the steady part, slope %+.3f MiB/min, growth %+.2f%%\n",
			r.LiveHeap.StartMiB, r.LiveHeap.SlopeMiBPerMin, r.LiveHeap.Pct)
	}
	if r.AnonRSS.StartMiB > 0 {
		fmt.Fprintf(&b, "  anonymous RSS (RSS less the executable's pages): %.1f MiB at the start of the steady part, slope %+.3f MiB/min, growth %+.2f%%\n",
			r.AnonRSS.StartMiB, r.AnonRSS.SlopeMiBPerMin, r.AnonRSS.Pct)
	}
	if r.FileRSS.StartMiB > 0 {
		fmt.Fprintf(&b, "  file RSS (the executable's pages): %.1f MiB at the start of the steady part, slope %+.3f MiB/min, growth %+.2f%%\n",
			r.FileRSS.StartMiB, r.FileRSS.SlopeMiBPerMin, r.FileRSS.Pct)
	}
	fmt.Fprintf(&b, "  cycle p99 (bucket bound): first %s %.4gs over %d cycles (load %.1f), last %s %.4gs over %d cycles (load %.1f) (goal: the same)\n",
		r.Window, r.CycleP99FirstSeconds, r.CyclesFirst, r.LoadFirst, r.Window, r.CycleP99LastSeconds, r.CyclesLast, r.LoadLast)
	fmt.Fprintf(&b, "  invariant violations: %d (goal 0)", r.Violations)
	return b.String()
}

// parseRSS reads a line of a /proc/PID/status such as "RssAnon:" or "RssFile:" (in
// kB) as bytes; 0 when it is missing.
func parseRSS(status, field string) float64 {
	for _, line := range strings.Split(status, "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			var kb float64
			if _, err := fmt.Sscan(rest, &kb); err == nil {
				return kb * 1024
			}
		}
	}
	return 0
}
