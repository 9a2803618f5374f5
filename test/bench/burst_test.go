package bench

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestWithGracefulDelete(t *testing.T) {
	stock := `apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-ready
spec: {}
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: Stage
metadata:
  name: pod-delete
spec:
  delay: {}
`
	got, err := withGracefulDelete(stock, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(got, "name: pod-delete") != 1 || !strings.Contains(got, "durationMilliseconds: 5000") {
		t.Errorf("the pod-delete Stage was not replaced by one waiting 5000 ms:\n%s", got)
	}
	if !strings.Contains(got, "name: pod-ready") {
		t.Errorf("the other Stages were dropped:\n%s", got)
	}
	if _, err := withGracefulDelete("kind: Stage\nmetadata:\n  name: pod-ready\n", time.Second); err == nil {
		t.Error("a stages file without pod-delete was accepted")
	}
}

// TestBurstAnalysis checks the figures of one run on hand-written traces: one
// service that took the GPU of one of two evicted training gangs.
func TestBurstAnalysis(t *testing.T) {
	o := BurstOptions{Workers: 4, MinWorkers: 4, Grace: 5 * time.Second, Share: "20Gi", Utilization: 0.75}
	start := time.Unix(1000, 0)
	at := func(s float64) time.Time { return start.Add(time.Duration(s * float64(time.Second))) }
	var traces []podTrace
	for _, c := range []string{"train-a", "train-b"} {
		node := map[string]string{"train-a": "n1", "train-b": "n2"}[c]
		traces = append(traces, podTrace{name: c + "-head", cluster: c, node: node, seen: at(-60), bound: at(-59), terminating: at(1)})
		for w := 0; w < 4; w++ {
			traces = append(traces, podTrace{name: c + "-w", cluster: c, worker: true, node: node, gpus: string(rune('0' + w)),
				seen: at(-60), bound: at(-59), terminating: at(1), deleted: at(6.5)})
		}
	}
	traces = append(traces, podTrace{name: "llm-00-w", service: "llm-00", worker: true, node: "n1", gpus: "2", seen: at(0.5), bound: at(7)})
	var r BurstRun
	r.Mode, r.Burst = "whole", 1
	r.analyze(o, traces, start, at(7), 0)
	if r.Bound != 1 || r.GangsEvicted != 2 || r.Wasted != 1 || r.Rebound != 0 || r.LateEvictions != 0 {
		t.Errorf("bound %d, evicted %d, wasted %d, re-bound %d, late %d; want 1, 2, 1, 0, 0", r.Bound, r.GangsEvicted, r.Wasted, r.Rebound, r.LateEvictions)
	}
	if r.Ratio != 8 || r.Floor != 4 {
		t.Errorf("freed/needed %.2f (floor %.2f), want 8 (4): 8 GPUs for one, whole gangs of 4", r.Ratio, r.Floor)
	}
	if r.LatencyMax != 6.5 || r.LatencyLessGraceMax != 1.5 {
		t.Errorf("latency %.2f s (%.2f s less grace), want 6.5 (1.5)", r.LatencyMax, r.LatencyLessGraceMax)
	}
	// Its victim on n1 GPU 2 took 5.5 s to go (terminating at 1, deleted at 6.5).
	if r.LatencyLessVictimMax != 1 {
		t.Errorf("latency less the victim's own wait %.2f s, want 1", r.LatencyLessVictimMax)
	}
	r = BurstRun{Mode: "share", Burst: 8}
	r.analyze(o, nil, start, start, 0)
	if r.NeededGiB != 8*60 {
		t.Errorf("8 services of 20Gi at 0.75 need %.0f GiB, want 480 (60 each)", r.NeededGiB)
	}
}

// TestWithGracefulDeleteOnTheStockStages runs on bin/kwok-stages.yaml where it exists.
func TestWithGracefulDeleteOnTheStockStages(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "bin", "kwok-stages.yaml"))
	if err != nil {
		t.Skip("bin/kwok-stages.yaml not built: ", err)
	}
	got, err := withGracefulDelete(string(b), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(got, "kind: Stage"); n != strings.Count(string(b), "kind: Stage") {
		t.Errorf("%d Stages after the swap, want as many as before", n)
	}
	if !strings.Contains(got, "durationMilliseconds: 5000") {
		t.Errorf("no delay in:\n%s", got)
	}
}

func TestParseBurstMetrics(t *testing.T) {
	text := `# HELP gantry_scheduler_preempted_whole_gpus_total Whole GPUs held by evicted pods, by kind.
# TYPE gantry_scheduler_preempted_whole_gpus_total counter
gantry_scheduler_preempted_whole_gpus_total{kind="preempt"} 8
gantry_scheduler_preempted_whole_gpus_total{kind="reclaim"} 4
gantry_scheduler_preempted_shared_victims_total{kind="preempt"} 0
gantry_scheduler_preempted_gpu_memory_bytes_total{kind="preempt"} 6.8719476736e+11
gantry_scheduler_preemptions_total{kind="preempt"} 2
gantry_scheduler_preemption_victims_total{kind="preempt"} 10
gantry_scheduler_cycles_total 40
`
	m, err := parseBurstMetrics(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	want := BurstMetrics{Preemptions: 2, Victims: 10, WholeGPUs: 12, SharedVictims: 0, FreedGiB: 640}
	if m != want {
		t.Errorf("parsed %+v, want %+v", m, want)
	}
}
