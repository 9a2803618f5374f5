package bench

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
)

// BurstRun is one burst on a fresh cluster.
type BurstRun struct {
	Mode   string `json:"mode"`
	Burst  int    `json:"burst"`
	Run    int    `json:"run"`
	Status string `json:"status"`
	LogDir string `json:"logDir"`
	// Bound counts the services whose worker was bound.
	Bound int `json:"bound"`
	// NeededGiB is the GPU memory the burst needs (a whole GPU, or the larger of the
	// share and gpu_memory_utilization × 80 GiB, per service); FreedGiB the GPU memory
	// of the training workers evicted. Ratio is FreedGiB/NeededGiB; Floor the least
	// ratio any victim choice reaches when training gangs go whole (or one worker at a
	// time above their minimum).
	NeededGiB float64 `json:"neededGiB"`
	FreedGiB  float64 `json:"freedGiB"`
	Ratio     float64 `json:"ratio"`
	Floor     float64 `json:"floor"`
	// LatencyP50 and LatencyMax are seconds from a service's worker pod's creation to
	// its bind; the same less the grace period for workers that waited for victims
	// are LatencyLessGraceP50/Max.
	LatencyP50          float64 `json:"latencyP50"`
	LatencyMax          float64 `json:"latencyMax"`
	LatencyLessGraceP50 float64 `json:"latencyLessGraceP50"`
	LatencyLessGraceMax float64 `json:"latencyLessGraceMax"`
	// LatencyLessVictimMax is the largest latency less the time the victims whose
	// GPUs the service took actually needed to go (kwok's terminating-to-deleted, the
	// grace period and kwok's own delay under load): the scheduler's part alone,
	// deciding, evicting and binding once the room is free.
	LatencyLessVictimMax float64 `json:"latencyLessVictimMax"`
	// Metrics are the scheduler's preemption counters at the end of the run, summed
	// over kinds (gantry_scheduler_preempted_*): they count what the run's pod
	// traces count, whole GPUs and shares alike (issue 19).
	Metrics BurstMetrics `json:"metrics"`
	// GangsEvicted counts training clusters that lost pods; Rebound those bound again,
	// at their minimum, before the last service was bound; Wasted those whose GPUs no
	// service's worker took; LateEvictions the pods evicted after every service was
	// bound; Partial the training clusters seen partly bound, with no member leaving,
	// for 2 s or more.
	GangsEvicted  int `json:"gangsEvicted"`
	Rebound       int `json:"rebound"`
	Wasted        int `json:"wasted"`
	LateEvictions int `json:"lateEvictions"`
	Partial       int `json:"partial"`
}

func (r BurstRun) oneLine() string {
	return fmt.Sprintf("%s, %d/%d bound, freed/needed %.2f (floor %.2f), latency p50 %.2fs max %.2fs, %d gangs evicted, %d re-bound, %d wasted, %d late evictions, %d partial",
		r.Status, r.Bound, r.Burst, r.Ratio, r.Floor, r.LatencyP50, r.LatencyMax, r.GangsEvicted, r.Rebound, r.Wasted, r.LateEvictions, r.Partial)
}

type gpuSlot struct {
	node  string
	index int // -1 when the pod's GPU index is not known: the whole node counts
}

// gpuSlots reads a pod's GPUs from gantry.dev/gpus ("3" or "3:21474836480,4").
func gpuSlots(t podTrace) []gpuSlot {
	if t.gpus == "" {
		return []gpuSlot{{t.node, -1}}
	}
	var out []gpuSlot
	for _, part := range strings.Split(t.gpus, ",") {
		idx, _, _ := strings.Cut(part, ":")
		if i, err := strconv.Atoi(idx); err == nil {
			out = append(out, gpuSlot{t.node, i})
		}
	}
	return out
}

// analyze turns the pod traces of one run into its figures.
func (r *BurstRun) analyze(o BurstOptions, traces []podTrace, start, allBound time.Time, partial int) {
	const gpuGiB = 80.0
	perService := gpuGiB
	if r.Mode == "share" {
		share := resource.MustParse(o.Share)
		perService = math.Max(float64(share.Value())/(1<<30), o.Utilization*gpuGiB)
	}
	r.NeededGiB = float64(r.Burst) * perService
	perGPU := max(1, int(gpuGiB/perService))
	unit := o.Workers
	if o.MinWorkers < o.Workers {
		unit = 1
	}
	gpusNeeded := (r.Burst + perGPU - 1) / perGPU
	r.Floor = float64((gpusNeeded+unit-1)/unit*unit) * gpuGiB / r.NeededGiB

	var latencies, lessGrace, lessVictim []float64
	used := map[gpuSlot]bool{}
	usedNode := map[string]bool{}
	lastBind := start
	victimWait := victimWaits(traces, start)
	for _, t := range traces {
		if t.service == "" || !t.worker || t.seen.Before(start) || t.bound.IsZero() {
			continue
		}
		r.Bound++
		l := t.bound.Sub(t.seen).Seconds()
		latencies = append(latencies, l)
		lessGrace = append(lessGrace, l)
		wait := 0.0
		for _, s := range gpuSlots(t) {
			wait = math.Max(wait, victimWait[s])
		}
		lessVictim = append(lessVictim, math.Max(0, l-wait))
		if t.bound.After(lastBind) {
			lastBind = t.bound
		}
		for _, s := range gpuSlots(t) {
			used[s], usedNode[s.node] = true, true
		}
	}
	evicted := map[string][]gpuSlot{}
	for _, t := range traces {
		if t.cluster == "" || t.bound.IsZero() || t.terminating.IsZero() || t.terminating.Before(start) {
			continue
		}
		if t.worker {
			r.FreedGiB += gpuGiB
		}
		if t.terminating.After(allBound) {
			r.LateEvictions++
		}
		slots := evicted[t.cluster]
		if t.worker {
			slots = append(slots, gpuSlots(t)...)
		}
		evicted[t.cluster] = slots
	}
	// A worker that waited for victims waited at least the grace period for them.
	if len(evicted) > 0 {
		for i := range lessGrace {
			lessGrace[i] = math.Max(0, lessGrace[i]-o.Grace.Seconds())
		}
	}
	r.GangsEvicted = len(evicted)
	for cluster, slots := range evicted {
		took := false
		for _, s := range slots {
			took = took || used[s] || (s.index < 0 && usedNode[s.node])
		}
		if !took {
			r.Wasted++
		}
		bound := 0
		for _, t := range traces {
			if t.cluster == cluster && t.seen.After(start) && !t.bound.IsZero() && !t.bound.After(lastBind) && t.terminating.IsZero() {
				bound++
			}
		}
		if bound >= 1+o.MinWorkers {
			r.Rebound++
		}
	}
	r.Ratio = r.FreedGiB / r.NeededGiB
	r.LatencyP50, r.LatencyMax = median(latencies), maxOf(latencies)
	r.LatencyLessGraceP50, r.LatencyLessGraceMax = median(lessGrace), maxOf(lessGrace)
	r.LatencyLessVictimMax = maxOf(lessVictim)
	r.Partial = partial
}

// victimWaits maps each GPU that a training worker evicted in the burst held to how
// long that worker took to go, terminating to deleted, in seconds.
func victimWaits(traces []podTrace, start time.Time) map[gpuSlot]float64 {
	out := map[gpuSlot]float64{}
	for _, t := range traces {
		if t.cluster == "" || !t.worker || t.terminating.IsZero() || t.terminating.Before(start) || t.deleted.IsZero() {
			continue
		}
		for _, s := range gpuSlots(t) {
			out[s] = math.Max(out[s], t.deleted.Sub(t.terminating).Seconds())
		}
	}
	return out
}

func maxOf(v []float64) float64 {
	m := 0.0
	for _, x := range v {
		m = math.Max(m, x)
	}
	return m
}

// BurstSummary is the median of the runs of one mode and burst size.
type BurstSummary struct {
	BurstRun
	Runs, OK int
}

func summarizeBurst(mode string, n int, runs []BurstRun) BurstSummary {
	s := BurstSummary{BurstRun: BurstRun{Mode: mode, Burst: n, Status: StatusOK}, Runs: len(runs)}
	// The medians are of the runs that went through: a run whose control plane did
	// not start measured nothing, and its zeros would pull every median down.
	var ok []BurstRun
	for _, r := range runs {
		if r.Status == StatusOK || r.Status == StatusTimeout {
			ok = append(ok, r)
		}
	}
	pick := func(f func(BurstRun) float64) float64 {
		var v []float64
		for _, r := range ok {
			v = append(v, f(r))
		}
		return median(v)
	}
	for _, r := range runs {
		if r.Status == StatusOK {
			s.OK++
		}
	}
	if s.OK < len(runs) {
		s.Status = fmt.Sprintf("%d of %d runs ok", s.OK, len(runs))
	}
	s.Ratio = pick(func(r BurstRun) float64 { return r.Ratio })
	s.Floor = pick(func(r BurstRun) float64 { return r.Floor })
	s.LatencyP50 = pick(func(r BurstRun) float64 { return r.LatencyP50 })
	s.LatencyMax = pick(func(r BurstRun) float64 { return r.LatencyMax })
	s.LatencyLessGraceP50 = pick(func(r BurstRun) float64 { return r.LatencyLessGraceP50 })
	s.LatencyLessGraceMax = pick(func(r BurstRun) float64 { return r.LatencyLessGraceMax })
	s.LatencyLessVictimMax = pick(func(r BurstRun) float64 { return r.LatencyLessVictimMax })
	s.Metrics = BurstMetrics{
		Preemptions:   pick(func(r BurstRun) float64 { return r.Metrics.Preemptions }),
		Victims:       pick(func(r BurstRun) float64 { return r.Metrics.Victims }),
		WholeGPUs:     pick(func(r BurstRun) float64 { return r.Metrics.WholeGPUs }),
		SharedVictims: pick(func(r BurstRun) float64 { return r.Metrics.SharedVictims }),
		FreedGiB:      pick(func(r BurstRun) float64 { return r.Metrics.FreedGiB }),
	}
	s.Bound = int(pick(func(r BurstRun) float64 { return float64(r.Bound) }))
	s.GangsEvicted = int(pick(func(r BurstRun) float64 { return float64(r.GangsEvicted) }))
	s.Rebound = int(pick(func(r BurstRun) float64 { return float64(r.Rebound) }))
	s.Wasted = int(pick(func(r BurstRun) float64 { return float64(r.Wasted) }))
	s.LateEvictions = int(pick(func(r BurstRun) float64 { return float64(r.LateEvictions) }))
	s.Partial = int(pick(func(r BurstRun) float64 { return float64(r.Partial) }))
	return s
}

// BurstReport is a whole burst benchmark.
type BurstReport struct {
	Command  string         `json:"command"`
	Started  time.Time      `json:"started"`
	Duration float64        `json:"durationSeconds"`
	Machine  Machine        `json:"machine"`
	Gantry   Binary         `json:"gantryScheduler"`
	Options  BurstOptions   `json:"options"`
	Runs     []BurstRun     `json:"runs"`
	Summary  []BurstSummary `json:"summary"`
}

// WriteBurstTable prints every run, then the medians.
func WriteBurstTable(w io.Writer, rep *BurstReport) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "mode\tburst\trun\tbound\tfreed/needed\tfloor\tp50 s\tmax s\tp50-grace\tmax-grace\tmax-victim\tevicted\tre-bound\twasted\tlate\tpartial\tm:whole\tm:shared\tm:GiB\tstatus\t")
	row := func(r BurstRun, run string) {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%.2f\t%d\t%d\t%d\t%d\t%d\t%.0f\t%.0f\t%.0f\t%s\t\n", r.Mode, r.Burst, run, r.Bound,
			r.Ratio, r.Floor, r.LatencyP50, r.LatencyMax, r.LatencyLessGraceP50, r.LatencyLessGraceMax, r.LatencyLessVictimMax,
			r.GangsEvicted, r.Rebound, r.Wasted, r.LateEvictions, r.Partial,
			r.Metrics.WholeGPUs, r.Metrics.SharedVictims, r.Metrics.FreedGiB, r.Status)
	}
	for _, r := range rep.Runs {
		row(r, strconv.Itoa(r.Run))
	}
	for _, s := range rep.Summary {
		row(s.BurstRun, "median")
	}
	tw.Flush()
}

// writePodTraces writes one line per pod of a run, times in seconds since the burst
// started (negative: before it; empty: never), to explain a run's figures:
// which service waited on what, and which training pods went when.
func writePodTraces(path string, traces []podTrace, start time.Time) error {
	var b strings.Builder
	b.WriteString("pod\tservice\tcluster\tworker\tseen\tnominated\tnominatedNode\tbound\tnode\tgpus\tterminating\tdeleted\n")
	at := func(t time.Time) string {
		if t.IsZero() {
			return ""
		}
		return strconv.FormatFloat(t.Sub(start).Seconds(), 'f', 3, 64)
	}
	for _, t := range traces {
		fmt.Fprintf(&b, "%s\t%s\t%s\t%t\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", t.name, t.service, t.cluster, t.worker,
			at(t.seen), at(t.nominated), t.nominatedNode, at(t.bound), t.node, t.gpus, at(t.terminating), at(t.deleted))
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

// WriteBurstJSON writes the report to path.
func WriteBurstJSON(path string, rep *BurstReport) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
