package dispatch

import (
	"bufio"
	"io"
	"math"
	"runtime/metrics"
	"strconv"
	"time"

	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
)

// A cycle that takes ten times its neighbours for the same pods is not slow at
// placing: it waited for the cache's lock, or the Go runtime took its time (a GC
// pause, mark assists, a run queue of bind goroutines). The Cycle line says which:
// the cycle's phases (cache.Prepared, cache.Decisions) and what the runtime did
// between the cycle's start and its end (runtimeSampler), read from runtime/metrics.

// CycleLogLevel is the verbosity of the one line each cycle logs ("Cycle", with its
// time in microseconds, the pods and gangs it sent to bind, the gangs left pending,
// the binds in flight when it started, its budget of pods and the gangs it left for
// the next cycle, then where its time went: cycleReport): test/bench reads it for
// cycle-time percentiles, pods per cycle, and whether the bind pipeline runs dry
// between cycles.
const CycleLogLevel = 4

// cycleReport is what one Cycle line says.
type cycleReport struct {
	// start and took are the cycle's start and wall time.
	start    time.Time
	took     time.Duration
	inFlight int64
	budget   int
	prep     cache.Prepared
	d        *cache.Decisions
	rt       runtimeStats
}

// logCycle writes a cycle's line. Besides what it placed: lockWait (Prepare's and
// Commit's waits for the cache's lock), ready (the snapshot readied), schedule (the
// core), commit (Commit under the lock), all in microseconds; and what the Go
// runtime did meanwhile: GC cycles ended, GC pauses and the longest, mark-assist and
// all GC CPU, the longest wait of a runnable goroutine, the live heap and the
// goroutines.
func logCycle(c cycleReport) {
	pods := c.pods()
	us := func(d time.Duration) int64 { return d.Microseconds() }
	klog.V(CycleLogLevel).InfoS("Cycle", "micros", us(c.took), "pods", pods, "gangs", len(c.d.Batches),
		"pending", len(c.d.Pending), "inFlight", c.inFlight, "budget", c.budget, "deferred", c.prep.Plan.Deferred,
		"lockWaitMicros", us(c.prep.LockWait+c.d.LockWait), "readyMicros", us(c.prep.Ready),
		"scheduleMicros", us(c.prep.Schedule), "commitMicros", us(c.d.Held),
		"gcs", c.rt.GCs, "gcPauses", c.rt.Pauses, "gcPauseMaxMicros", us(c.rt.PauseMax),
		"assistMicros", us(c.rt.AssistCPU), "gcCPUMicros", us(c.rt.GCCPU),
		"schedWaitMaxMicros", us(c.rt.SchedWaitMax), "heapLiveMB", c.rt.HeapLive>>20, "goroutines", c.rt.Goroutines)
}

// pods is how many pods the cycle sent to bind.
func (c cycleReport) pods() int {
	pods := 0
	for _, b := range c.d.Batches {
		pods += len(b.Reqs)
	}
	return pods
}

// cycleTrace writes a cycle's essentials as one tab-separated line: its start (Unix
// microseconds), its time (microseconds), the pods and gangs it sent to bind, the
// gangs it left pending, the binds in flight when it started, its budget of pods and
// the gangs it deferred to the next cycle. It is what the Cycle log line says, less
// the runtime's metrics, at a fraction of its cost: the log line, formatted by klog
// and written unbuffered, was 4.5 % of gantry-scheduler's CPU at 100 pods/s and its
// runtime sampler another 1.4 % (session 17, docs/benchmarks.md), so the benchmarks,
// which read every cycle, run the scheduler at its production log level with
// --cycle-trace instead. Only the cycle loop writes; it flushes about once a second
// (every Resync at the latest) and when it ends.
type cycleTrace struct {
	w       *bufio.Writer
	line    []byte
	flushed time.Time
}

// newCycleTrace returns a trace to w, or nil (which records nothing) for a nil w.
func newCycleTrace(w io.Writer) *cycleTrace {
	if w == nil {
		return nil
	}
	return &cycleTrace{w: bufio.NewWriterSize(w, 64<<10)}
}

// traceFlushEvery is how often, at most, the trace is flushed between cycles.
const traceFlushEvery = time.Second

func (t *cycleTrace) record(c cycleReport) {
	if t == nil {
		return
	}
	b := t.line[:0]
	for i, v := range []int64{c.start.UnixMicro(), c.took.Microseconds(), int64(c.pods()), int64(len(c.d.Batches)),
		int64(len(c.d.Pending)), c.inFlight, int64(c.budget), int64(c.prep.Plan.Deferred)} {
		if i > 0 {
			b = append(b, '\t')
		}
		b = strconv.AppendInt(b, v, 10)
	}
	b = append(b, '\n')
	t.line = b
	// A write error (a full disk) loses trace lines, never a cycle.
	_, _ = t.w.Write(b)
	if now := c.start.Add(c.took); now.Sub(t.flushed) >= traceFlushEvery {
		t.flushed = now
		_ = t.w.Flush()
	}
}

func (t *cycleTrace) flush() {
	if t != nil {
		_ = t.w.Flush()
	}
}

// Names of the runtime metrics a cycle reads (runtime/metrics docs).
const (
	rmGCCycles   = "/gc/cycles/total:gc-cycles"
	rmGCPauses   = "/sched/pauses/total/gc:seconds"
	rmAssistCPU  = "/cpu/classes/gc/mark/assist:cpu-seconds"
	rmGCCPU      = "/cpu/classes/gc/total:cpu-seconds"
	rmSchedWaits = "/sched/latencies:seconds"
	rmHeapLive   = "/gc/heap/live:bytes"
	rmGoroutines = "/sched/goroutines:goroutines"
)

var runtimeMetricNames = []string{rmGCCycles, rmGCPauses, rmAssistCPU, rmGCCPU, rmSchedWaits, rmHeapLive, rmGoroutines}

// runtimeSampler reads the runtime's metrics at a cycle's start and end. Each read
// has its own samples, so that the histograms of the first are not overwritten by
// the second (metrics.Read may reuse a histogram's storage).
type runtimeSampler struct {
	before, after []metrics.Sample
}

func newRuntimeSampler() *runtimeSampler {
	mk := func() []metrics.Sample {
		s := make([]metrics.Sample, len(runtimeMetricNames))
		for i, n := range runtimeMetricNames {
			s[i].Name = n
		}
		return s
	}
	return &runtimeSampler{before: mk(), after: mk()}
}

func (s *runtimeSampler) start() { metrics.Read(s.before) }

// runtimeStats is what the runtime did during one cycle.
type runtimeStats struct {
	// GCs is the GC cycles completed; Pauses the stop-the-world pauses of the GC and
	// PauseMax the longest (the upper bound of its histogram bucket).
	GCs, Pauses uint64
	PauseMax    time.Duration
	// AssistCPU is the CPU goroutines spent in GC mark assists (the runtime
	// accounts it when a GC cycle ends), GCCPU all the GC's CPU.
	AssistCPU, GCCPU time.Duration
	// SchedWaits is how many times a goroutine became runnable and waited to run;
	// SchedWaitMax the longest such wait (upper bound of its bucket): a cycle
	// goroutine queued behind bind goroutines shows here.
	SchedWaits   uint64
	SchedWaitMax time.Duration
	// HeapLive is the live heap at the last GC; Goroutines those that exist now.
	HeapLive, Goroutines uint64
}

// stop reads the metrics again and returns what changed since start.
func (s *runtimeSampler) stop() runtimeStats {
	metrics.Read(s.after)
	var st runtimeStats
	for i, a := range s.after {
		b := s.before[i]
		switch a.Name {
		case rmGCCycles:
			st.GCs = uintDelta(b.Value, a.Value)
		case rmGCPauses:
			st.Pauses, st.PauseMax = histDelta(b.Value, a.Value)
		case rmAssistCPU:
			st.AssistCPU = secondsDelta(b.Value, a.Value)
		case rmGCCPU:
			st.GCCPU = secondsDelta(b.Value, a.Value)
		case rmSchedWaits:
			st.SchedWaits, st.SchedWaitMax = histDelta(b.Value, a.Value)
		case rmHeapLive:
			st.HeapLive = uintValue(a.Value)
		case rmGoroutines:
			st.Goroutines = uintValue(a.Value)
		}
	}
	return st
}

func uintValue(v metrics.Value) uint64 {
	if v.Kind() != metrics.KindUint64 {
		return 0 // not supported by this Go version
	}
	return v.Uint64()
}

func uintDelta(b, a metrics.Value) uint64 {
	x, y := uintValue(b), uintValue(a)
	if y < x {
		return 0
	}
	return y - x
}

func secondsDelta(b, a metrics.Value) time.Duration {
	if b.Kind() != metrics.KindFloat64 || a.Kind() != metrics.KindFloat64 {
		return 0
	}
	return max(0, time.Duration((a.Float64()-b.Float64())*float64(time.Second)))
}

// histDelta returns how many observations a histogram gained between b and a, and
// the upper bound of the highest bucket that gained one (its lower bound when the
// bucket is open above).
func histDelta(b, a metrics.Value) (uint64, time.Duration) {
	if b.Kind() != metrics.KindFloat64Histogram || a.Kind() != metrics.KindFloat64Histogram {
		return 0, 0
	}
	hb, ha := b.Float64Histogram(), a.Float64Histogram()
	if len(hb.Counts) != len(ha.Counts) {
		return 0, 0
	}
	var n uint64
	top := -1
	for i := range ha.Counts {
		if ha.Counts[i] > hb.Counts[i] {
			n += ha.Counts[i] - hb.Counts[i]
			top = i
		}
	}
	if top < 0 {
		return 0, 0
	}
	bound := ha.Buckets[top+1]
	if math.IsInf(bound, 1) {
		bound = ha.Buckets[top]
	}
	return n, time.Duration(bound * float64(time.Second))
}
