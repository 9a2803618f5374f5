package bench

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestHarness runs scenarios a, c and e at a twentieth of their size against real
// control planes, both schedulers where the scenario has both: every pod bound, no
// node over-committed, no device given twice, no gang left partly bound. It checks the
// harness and the schedulers' results, not their speed (that is `make bench`).
func TestHarness(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts several control planes; not started with -short")
	}
	scenarios, err := Select("a,c,e")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	rep, err := Run(ctx, scenarios, Options{Scale: 0.05, Progress: testWriter{t}, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	WriteTable(&out, rep.Results, rep.Summary)
	t.Log("\n" + out.String())
	for _, r := range rep.Results {
		if r.Status != StatusOK || r.Bound != r.Pods {
			t.Errorf("%s %s: %s, bound %d of %d", r.Scenario, r.Scheduler, r.Status, r.Bound, r.Pods)
		}
		if r.Gang != nil && r.Gang.PartialAtTheEnd != 0 {
			t.Errorf("%s %s: %d gangs partly bound at the end", r.Scenario, r.Scheduler, r.Gang.PartialAtTheEnd)
		}
	}
}

type testWriter struct{ t *testing.T }

func (w testWriter) Write(b []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}

func boundPod(name, gang string) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: corev1.PodSpec{NodeName: "n"}}
	if gang != "" {
		p.Annotations = map[string]string{AnnotationPodGroup: gang}
	}
	return p
}

// The recorder times each pod's first bind only, and follows gangs through partial
// states.
func TestBindRecorderGangs(t *testing.T) {
	start := time.Unix(1000, 0)
	at := func(ms int) time.Time { return start.Add(time.Duration(ms) * time.Millisecond) }
	rec := newBindRecorder(6, 3)
	rec.observe(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "pending"}}, at(0))
	rec.observe(boundPod("a0", "a"), at(100))
	rec.observe(boundPod("b0", "b"), at(150))
	rec.observe(boundPod("a0", "a"), at(900)) // a later update of a bound pod
	rec.observe(boundPod("a1", "a"), at(200))
	rec.observe(boundPod("a2", "a"), at(300))
	rec.observe(boundPod("b1", "b"), at(1150))
	st := rec.stats(start)
	if st.Bound != 5 || st.MaxPartialGangs != 2 || st.PartialGangsEnd != 1 || st.GangsComplete != 1 {
		t.Fatalf("bound %d, max partial %d, partial at end %d, complete %d; want 5, 2, 1, 1", st.Bound, st.MaxPartialGangs, st.PartialGangsEnd, st.GangsComplete)
	}
	if st.GangMaxSpread != time.Second || st.FirstBind != 100*time.Millisecond || st.LastBind != 1150*time.Millisecond {
		t.Fatalf("max spread %s, first %s, last %s", st.GangMaxSpread, st.FirstBind, st.LastBind)
	}
	select {
	case <-rec.done:
		t.Fatal("done before every pod was bound")
	default:
	}
	rec.observe(boundPod("b2", "b"), at(1200))
	<-rec.done
	st = rec.stats(start)
	if st.PartialGangsEnd != 0 || st.GangsComplete != 2 {
		t.Fatalf("partial at end %d, complete %d; want 0, 2", st.PartialGangsEnd, st.GangsComplete)
	}
	if got := st.podsPerSecond(); fmt.Sprintf("%.1f", got) != "5.5" {
		t.Fatalf("pods/s %.2f, want 6 pods over 1.1s = 5.5", got)
	}
}

func TestScaledKeepsWholeGangs(t *testing.T) {
	s, _ := Select("c")
	got := s[0].Scaled(0.05)
	if got.Nodes != 50 || got.Pods%8 != 0 || got.Pods != 248 {
		t.Fatalf("scaled c: %d nodes, %d pods; want 50 and 248 (31 gangs of 8)", got.Nodes, got.Pods)
	}
	if _, err := Select("a,f"); err == nil {
		t.Fatal("unknown scenario f accepted")
	}
}

// Goals are judged on gantry's row, with the ratio to kube-scheduler's.
func TestCheckGoals(t *testing.T) {
	s, _ := Select("b")
	results := []Result{
		{Run: 1, Scheduler: "kube-scheduler", Status: StatusOK, PodsPerSecond: 200, WallPodsPerSecond: 100},
		{Run: 1, Scheduler: "gantry-scheduler", Status: StatusOK, PodsPerSecond: 900, WallPodsPerSecond: 300, HWMMiB: 400},
		{Run: 2, Scheduler: "kube-scheduler", Status: StatusOK, PodsPerSecond: 100, WallPodsPerSecond: 50},
		{Run: 2, Scheduler: "gantry-scheduler", Status: StatusOK, PodsPerSecond: 300, WallPodsPerSecond: 100, HWMMiB: 600},
		{Run: 3, Scheduler: "kube-scheduler", Status: StatusOK, PodsPerSecond: 150, WallPodsPerSecond: 80},
		{Run: 3, Scheduler: "gantry-scheduler", Status: StatusOK, PodsPerSecond: 800, WallPodsPerSecond: 240, HWMMiB: 450},
	}
	sum := summarize(s[0], 1, results)
	if results[1].Ratio != 4.5 || results[3].Ratio != 3 || results[3].WallRatio != 2 {
		t.Fatalf("per-run ratios %v, %v (wall %v); want 4.5 and 3 (wall 2)", results[1].Ratio, results[3].Ratio, results[3].WallRatio)
	}
	// Medians: 150 and 800 pods/s.
	if sum.Runs != 3 || sum.Ratio != 5.33 || sum.GantryMaxHWMMiB != 600 {
		t.Fatalf("summary %+v: want 3 runs, ratio 5.33, worst memory 600", sum)
	}
	if len(sum.Goals) != 2 || !sum.Goals[0].Met || sum.Goals[1].Met {
		t.Fatalf("goals %+v: want the ratio met and the memory missed", sum.Goals)
	}
}
