package dispatch

import (
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/kube/metrics"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// TestObserveEvictions checks what the preemption series count (issue 19): whole-GPU
// victims add the memory their decision freed (it stayed at 0 for them before), shared
// victims are counted, a decision whose evictions were partly refused counts what was
// evicted, and a gang's own members below its minimum count the memory they held.
func TestObserveEvictions(t *testing.T) {
	const GiB = int64(1) << 30
	reg := prometheus.NewRegistry()
	r := &Runner{metrics: metrics.New(reg, nil)}
	victim := func(name, preemptor, kind string, mem int64, gpus ...model.GPUBinding) cache.Victim {
		return cache.Victim{
			Eviction:  scheduler.Eviction{Pod: model.PodID("ns/" + name), Preemptor: model.GangID(preemptor), Kind: kind},
			Pod:       &model.Pod{ID: model.PodID("ns/" + name), GPUs: gpus},
			GPUMemory: mem,
		}
	}
	whole := model.GPUBinding{Index: 0, Whole: true}
	share := model.GPUBinding{Index: 1, MemoryBytes: 20 * GiB}
	decisions := []scheduler.Preemption{
		{Preemptor: "llm", Kind: "preempt", WholeGPUs: 2, FreedBytes: 160 * GiB},
		{Preemptor: "nb", Kind: "reclaim", SharedVictims: 1, FreedBytes: 20 * GiB},
	}
	// llm: two whole-GPU victims, all evicted; the decision's figures count.
	r.observeEvictions([]cache.Victim{victim("a", "llm", "preempt", 80*GiB, whole), victim("b", "llm", "preempt", 80*GiB, whole)}, true, decisions)
	// nb: one shared victim evicted of two (the other refused): what it held counts.
	r.observeEvictions([]cache.Victim{victim("c", "nb", "reclaim", 20*GiB, share)}, false, decisions)
	// A gang below its minimum: no decision, its held memory counts.
	r.observeEvictions([]cache.Victim{victim("d", "g", cache.KindBelowMinimum, 80*GiB, whole)}, true, decisions)

	for _, c := range []struct {
		metric, kind string
		want         float64
	}{
		{"gantry_scheduler_preemption_victims_total", "preempt", 2},
		{"gantry_scheduler_preemption_victims_total", "reclaim", 1},
		{"gantry_scheduler_preemption_victims_total", cache.KindBelowMinimum, 1},
		{"gantry_scheduler_preempted_gpu_memory_bytes_total", "preempt", float64(160 * GiB)},
		{"gantry_scheduler_preempted_gpu_memory_bytes_total", "reclaim", float64(20 * GiB)},
		{"gantry_scheduler_preempted_gpu_memory_bytes_total", cache.KindBelowMinimum, float64(80 * GiB)},
		{"gantry_scheduler_preemptions_total", "preempt", 1},
		{"gantry_scheduler_preemptions_total", "reclaim", 1},
		{"gantry_scheduler_preempted_whole_gpus_total", "preempt", 2},
		{"gantry_scheduler_preempted_whole_gpus_total", "reclaim", 0},
		{"gantry_scheduler_preempted_shared_victims_total", "reclaim", 1},
	} {
		if got := counterValue(t, reg, c.metric, c.kind); got != c.want {
			t.Errorf("%s{kind=%q} = %v, want %v", c.metric, c.kind, got, c.want)
		}
	}
}

func counterValue(t *testing.T, reg *prometheus.Registry, name, kind string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "kind" && l.GetValue() == kind {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// The learned workload mix is published on the first cycle that learned from pods,
// then at most once a Resync however many cycles learn meanwhile, and the cycle
// after a Resync publishes what they learned.
func TestWorkloadMixIsPublishedAtMostOnceAResync(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := scheduler.New("", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	r := &Runner{metrics: metrics.New(reg, nil), sched: s, opts: Options{Resync: time.Hour}}
	learn := func(pending int) {
		t.Helper()
		snap, err := sc.Build(sc.Scenario{
			Nodes: []sc.Node{{Name: "a", GPUs: 8, Model: "H100"}},
			Gangs: []sc.Gang{{Name: fmt.Sprintf("g%d", pending), Pods: pending, Min: pending, GPUs: 1, CPU: 1000}},
		})
		if err != nil {
			t.Fatal(err)
		}
		s.Schedule(snap)
		r.publishMix()
	}
	learn(2)
	if got := gaugeValue(t, reg, "gantry_scheduler_workload_mix_pods"); got != 2 {
		t.Fatalf("after the first cycle the mix was published from %v pods, want 2", got)
	}
	learn(3)
	if got := gaugeValue(t, reg, "gantry_scheduler_workload_mix_pods"); got != 2 {
		t.Fatalf("a second cycle within the Resync published the mix of %v pods, want it left at 2", got)
	}
	r.mixAt = time.Now().Add(-time.Hour)
	r.publishMix()
	if got := gaugeValue(t, reg, "gantry_scheduler_workload_mix_pods"); got != 5 {
		t.Fatalf("the cycle after a Resync published the mix of %v pods, want 5", got)
	}
}

// gaugeValue is an unlabelled gauge's value, or -1 when it is not gathered.
func gaugeValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue()
		}
	}
	return -1
}
