package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/test/invariant"
)

// harness holds what rounds share: the scheduler replicas and the random source.
type harness struct {
	rng      *rand.Rand
	replicas []*Scheduler
	checker  *invariant.Checker
	// electing is true while the replicas run with leader election (a handover
	// round); the next round gets a single replica without it again.
	electing bool
	// logf logs to the current round.
	logf func(format string, args ...any)
	// harnessErrs are the current round's failures that are not invariant
	// violations: a fault that could not be injected, a wait of the harness that ran
	// out, a cleanup that did not finish (under load, these say little about Gantry).
	harnessErrs []string
	// claimErrs are the settled round's claim inconsistencies (fault.settled).
	claimErrs []string
}

// fail fails the round for a reason of the harness (not an invariant), keeping it
// apart for the round's result line.
func (h *harness) fail(t *testing.T, fatal bool, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	h.harnessErrs = append(h.harnessErrs, msg)
	if fatal {
		t.Fatal(msg)
	}
	t.Error(msg)
}

// stopSchedulers SIGKILLs every replica.
func (h *harness) stopSchedulers() error {
	for _, r := range h.replicas {
		if err := kill(r.PID); err != nil {
			return err
		}
	}
	h.replicas = nil
	return nil
}

// restartScheduler SIGKILLs every replica and, after down, starts one replica without
// leader election.
func (h *harness) restartScheduler(ctx context.Context, down time.Duration) error {
	if err := h.stopSchedulers(); err != nil {
		return err
	}
	time.Sleep(down)
	return h.ensureScheduler(ctx)
}

// ensureScheduler leaves exactly one replica without leader election running.
func (h *harness) ensureScheduler(ctx context.Context) error {
	if len(h.replicas) == 1 && !h.electing && env.Exited(h.replicas[0].Name) == nil {
		return nil
	}
	if err := h.stopSchedulers(); err != nil {
		return err
	}
	s, err := StartScheduler(ctx, env, schedulerBin, false, nil)
	if err != nil {
		return err
	}
	h.replicas, h.electing = []*Scheduler{s}, false
	return nil
}

type tally struct{ rounds, failed, violated int }

// verdict names a round's result: PASS; VIOLATION when an invariant other than
// NotSettled broke (the product's promise); NOT-SETTLED when the cluster did not come
// to rest or the work was not all bound; a claim left inconsistent
// (fault.settled) is a VIOLATION too; HARNESS when only the harness failed.
func verdict(vs []invariant.Violation, claimErrs, harnessErrs []string) (string, []string) {
	var kinds []string
	result := "PASS"
	if len(claimErrs) > 0 {
		kinds, result = append(kinds, "ClaimsInconsistent"), "VIOLATION"
	}
	for _, v := range vs {
		kinds = append(kinds, string(v.Kind))
		if v.Kind != invariant.NotSettled {
			result = "VIOLATION"
		} else if result == "PASS" {
			result = "NOT-SETTLED"
		}
	}
	if result == "PASS" && len(harnessErrs) > 0 {
		result = "HARNESS"
	}
	return result, kinds
}

// TestChaos runs ROUNDS randomized rounds (default 3), each with one fault, checking
// the invariants throughout and at rest.
func TestChaos(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	rounds := envInt(t, "ROUNDS", 3)
	seed := uint64(time.Now().UnixNano())
	if shortRun() {
		// `make test`'s short run replays one fixed seed, so that CI is repeatable;
		// `make chaos` draws a new one each time.
		seed = shortSeed
	}
	if s := os.Getenv("CHAOS_SEED"); s != "" {
		v, err := strconv.ParseUint(s, 10, 64)
		if err != nil {
			t.Fatalf("CHAOS_SEED=%q: %v", s, err)
		}
		seed = v
	}
	t.Logf("chaos: %d rounds, CHAOS_SEED=%d", rounds, seed)
	chosen := selectFaults(t, os.Getenv("CHAOS_FAULTS"))

	ctx := context.Background()
	checker, err := invariant.Start(ctx, invariant.Config{RestConfig: env.Config, Logf: t.Logf, Rules: invariant.Rules{
		SchedulerNames: []string{"gantry-scheduler", "kai-scheduler"},
		// One bind round, plus the 15 s Lease a standby waits out in a handover and a
		// restart's informer sync.
		GangGrace: 30 * time.Second,
		BoundTime: 90 * time.Second,
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer checker.Stop()
	h := &harness{rng: rand.New(rand.NewPCG(seed, 0x6a6e7472)), checker: checker}
	if err := h.ensureScheduler(ctx); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = h.stopSchedulers() }()

	results := map[string]*tally{}
	for i := 0; i < rounds; i++ {
		f := chosen[h.rng.IntN(len(chosen))]
		if results[f.name] == nil {
			results[f.name] = &tally{}
		}
		results[f.name].rounds++
		before := len(checker.Violations())
		start := time.Now()
		h.harnessErrs, h.claimErrs = nil, nil
		t.Run(fmt.Sprintf("%03d-%s", i, f.name), func(t *testing.T) {
			h.round(t, i, f)
			for _, v := range checker.Violations()[before:] {
				t.Errorf("invariant broken: %s", v)
			}
		})
		result, kinds := verdict(checker.Violations()[before:], h.claimErrs, h.harnessErrs)
		if result != "PASS" {
			results[f.name].failed++
		}
		if result == "VIOLATION" {
			results[f.name].violated++
		}
		// One line per round, for a long run's log (grep "chaos round").
		t.Logf("chaos round %03d %-40s %-11s %5.0fs violations=%v harness=%q load=%s", i, f.name, result,
			time.Since(start).Seconds(), kinds, h.harnessErrs, loadAvg())
	}
	var names []string
	for n := range results {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		t.Logf("chaos summary: %-40s rounds %3d failed %3d (invariant violated in %d)", n, results[n].rounds, results[n].failed, results[n].violated)
	}
}

// round runs one fault in a fresh namespace and checks the settled cluster.
func (h *harness) round(t *testing.T, i int, f fault) {
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	ns := fmt.Sprintf("chaos-%03d", i)
	h.logf = t.Logf
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := cleanNamespace(ctx, ns); err != nil {
			h.fail(t, false, "cleanup: %v", err)
		}
		if err := h.ensureScheduler(ctx); err != nil {
			h.fail(t, true, "scheduler after the round: %v", err)
		}
	}()
	wantBound, err := f.run(ctx, h, ns)
	if err != nil {
		h.fail(t, false, "fault %s: %v", f.name, err)
	}
	if err := waitAPIServer(ctx, env, 60*time.Second); err != nil {
		h.fail(t, true, "API server not back: %v", err)
	}
	if err := h.checker.WaitSettled(ctx, 120*time.Second); err != nil {
		h.checker.Record(invariant.Violation{Kind: invariant.NotSettled, Subject: "round " + ns, At: time.Now(),
			Message: fmt.Sprintf("after %s the cluster did not settle in 120s: %v", f.name, err)})
	}
	if wantBound > 0 {
		if ps, err := waitPods(ctx, ns, 120*time.Second, allBound(wantBound)); err != nil {
			h.checker.Record(invariant.Violation{Kind: invariant.NotSettled, Subject: "round " + ns, At: time.Now(),
				Message: fmt.Sprintf("after %s, %d pods not all bound once capacity returned:%s", f.name, wantBound, describe(ps))})
		}
	}
	if f.settled != nil {
		if err := f.settled(ctx, ns); err != nil {
			// A claim allocated for nobody or off its pod's node: Gantry's word, not
			// the harness's.
			h.claimErrs = append(h.claimErrs, err.Error())
			t.Errorf("after %s, settled: %v", f.name, err)
		}
	}
}

// loadAvg is the 1-minute load average, to read a round's timings against.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func envInt(t *testing.T, name string, def int) int {
	s := os.Getenv(name)
	if s == "" {
		return def
	}
	v, err := strconv.Atoi(s)
	if err != nil || v < 1 {
		t.Fatalf("%s=%q: want a whole number ≥ 1", name, s)
	}
	return v
}

// shortSeed is the seed of the short run in `make test`.
const shortSeed = 4242

// shortRun: no ROUNDS given, as in `make test`. The short run draws only the faults
// that need no KubeRay operator and no DRA node agent, so that it needs neither
// built and replays the same rounds for a given seed.
func shortRun() bool { return os.Getenv("ROUNDS") == "" }

func selectFaults(t *testing.T, spec string) []fault {
	if spec == "" && shortRun() {
		var out []fault
		for _, f := range faults {
			if !f.kuberay && !f.dra {
				out = append(out, f)
			}
		}
		return out
	}
	if spec == "" {
		return faults
	}
	var out []fault
	for _, name := range strings.Split(spec, ",") {
		found := false
		for _, f := range faults {
			if f.name == strings.TrimSpace(name) {
				out = append(out, f)
				found = true
			}
		}
		if !found {
			var all []string
			for _, f := range faults {
				all = append(all, f.name)
			}
			t.Fatalf("CHAOS_FAULTS: unknown fault %q; known: %s", name, strings.Join(all, ", "))
		}
	}
	return out
}
