package scheduler_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// budgetScenario is a backlog of gangs of 1 to 8 pods in two queues, more than the
// cluster holds, so that the bound, the queues' order and the cluster filling up all
// play a part.
func budgetScenario() sc.Scenario {
	s := sc.Scenario{Queues: []sc.Queue{{Name: "a", Quota: 40}, {Name: "b", Quota: 24}}}
	for i := 0; i < 12; i++ {
		s.Nodes = append(s.Nodes, sc.Node{Name: fmt.Sprintf("n%02d", i), GPUs: 8})
	}
	for i := 0; i < 40; i++ {
		q := []string{"a", "b"}[i%2]
		s.Gangs = append(s.Gangs, sc.Gang{Name: fmt.Sprintf("g%02d", i), Queue: q, Pods: 1 + i%8, GPUs: 1})
	}
	return s
}

// A cycle with a budget of pods places gangs in the same order as one without, and
// stops at the gang that reaches the budget: the gangs after it are neither bound nor
// reported pending, only counted as deferred, and bound whole by the cycles that
// follow. Carried out cycle after cycle, bounded cycles bind the same gangs as one
// unbounded cycle, and leave the same gangs pending.
func TestBudgetDefersWholeGangsToLaterCycles(t *testing.T) {
	wantBound, wantPending, snap := unboundedOutcome(t)
	s := newScheduler(t)
	const budget = 10
	var bound []string
	cycles := 0
	for {
		cycles++
		if cycles > 50 {
			t.Fatal("bounded cycles never finished the backlog")
		}
		plan := s.ScheduleWithin(snap, nil, budget)
		pods := 0
		for i, b := range plan.Binds {
			g := snap.Gangs[b.Gang]
			if len(b.Placements) != g.MinMember {
				t.Errorf("cycle %d: gang %s bound %d of its %d pods: a bound must never split a gang", cycles, b.Gang, len(b.Placements), g.MinMember)
			}
			if i < len(plan.Binds)-1 {
				pods += len(b.Placements)
			}
			bound = append(bound, string(b.Gang))
		}
		if pods >= budget {
			t.Errorf("cycle %d: %d pods bound before its last gang, past the budget of %d", cycles, pods, budget)
		}
		if plan.Deferred == 0 {
			_, pending := gangsOf(plan)
			if !slices.Equal(pending, wantPending) {
				t.Errorf("last bounded cycle left %v pending, the unbounded cycle %v", pending, wantPending)
			}
			break
		}
		if len(plan.Pending) > 0 && len(plan.Binds) > 0 {
			// Pending gangs are reported only once they were tried: before the
			// budget ran out, and then in queue order like any other.
			for _, p := range plan.Pending {
				if p.Kind != scheduler.PendingNoFit && p.Kind != scheduler.PendingQueueLimit && p.Kind != scheduler.PendingQueueQuota {
					t.Errorf("cycle %d: %s pending for %s", cycles, p.Gang, p.Kind)
				}
			}
		}
		sc.Apply(snap, plan)
	}
	if cycles < 3 {
		t.Errorf("a budget of %d pods drained %d gangs in %d cycles: the budget did not bound them", budget, len(bound), cycles)
	}
	slices.Sort(bound)
	if !slices.Equal(bound, wantBound) {
		t.Errorf("bounded cycles bound %v,\nthe unbounded cycle %v", bound, wantBound)
	}
}

// A gang larger than the budget is still tried whole, alone: a bound never keeps a
// gang from binding.
func TestGangLargerThanBudgetStillBinds(t *testing.T) {
	snap, err := sc.Build(sc.Scenario{
		Nodes: []sc.Node{{Name: "a", GPUs: 8}, {Name: "b", GPUs: 8}},
		Gangs: []sc.Gang{{Name: "big", Pods: 12, GPUs: 1}, {Name: "small", Pods: 1, GPUs: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New("", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	plan := s.ScheduleWithin(snap, nil, 4)
	if got := sc.Binds(plan); !slices.Equal(got, []string{"big"}) || plan.Deferred != 1 { // small's one pod
		t.Fatalf("binds %v, deferred %d; want big alone and small deferred", got, plan.Deferred)
	}
	if len(plan.Binds[0].Placements) != 12 {
		t.Errorf("big bound %d of 12 pods", len(plan.Binds[0].Placements))
	}
	if len(plan.Pending) != 0 {
		t.Errorf("a deferred gang was reported pending: %v", sc.PendingKinds(plan))
	}
	sc.Apply(snap, plan)
	plan = s.ScheduleWithin(snap, nil, 4)
	if got := sc.Binds(plan); !slices.Equal(got, []string{"small"}) || plan.Deferred != 0 {
		t.Errorf("second cycle binds %v, deferred %d; want small and nothing left", got, plan.Deferred)
	}
}

// unboundedOutcome is what one unbounded cycle over budgetScenario binds and leaves
// pending, and a fresh copy of the scenario for the bounded cycles to work on.
func unboundedOutcome(t *testing.T) (bound, pending []string, fresh *model.Snapshot) {
	t.Helper()
	whole, err := sc.Build(budgetScenario())
	if err != nil {
		t.Fatal(err)
	}
	once := newScheduler(t).Schedule(whole)
	if once.Deferred != 0 {
		t.Fatalf("an unbounded cycle deferred %d pods", once.Deferred)
	}
	bound, pending = gangsOf(once)
	if fresh, err = sc.Build(budgetScenario()); err != nil {
		t.Fatal(err)
	}
	return bound, pending, fresh
}

func newScheduler(t *testing.T) *scheduler.Scheduler {
	t.Helper()
	s, err := scheduler.New("", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// gangsOf lists, sorted, the gangs a plan binds (whole, not elastic) and leaves pending.
func gangsOf(plan *scheduler.Plan) (bound, pending []string) {
	for _, b := range plan.Binds {
		if !b.Elastic {
			bound = append(bound, string(b.Gang))
		}
	}
	for _, p := range plan.Pending {
		pending = append(pending, string(p.Gang))
	}
	slices.Sort(bound)
	slices.Sort(pending)
	return bound, pending
}

// A cycle that Stop ends (dispatch stops one that ran past its time) binds a prefix
// of what the cycle without it binds, in the same order and on the same GPUs; it
// tries at least one gang. Cycle after cycle, skipping the gangs that failed before
// (as dispatch does while nothing changed for them), stopped cycles bind the same
// gangs as one unbounded cycle and leave the same ones pending.
func TestStopEndsACycleOnAPrefixOfItsPlan(t *testing.T) {
	wantBound, wantPending, snap := unboundedOutcome(t)
	// Two schedulers that see the same snapshots, so that what the placer learns
	// from them is the same.
	s, free := newScheduler(t), newScheduler(t)
	failed := map[model.GangID]bool{}
	skip := func(g model.GangID) bool { return failed[g] }
	var bound, pending []string
	cycles := 1
	for ; ; cycles++ {
		if cycles > 80 {
			t.Fatal("stopped cycles never finished the backlog")
		}
		asked := 0
		stopAfter := 1 + cycles%3 // gangs tried before Stop says true
		order := scheduler.OrderOf(snap)
		unstopped := free.ScheduleOrdered(snap, order, skip, scheduler.Bound{})
		plan := s.ScheduleOrdered(snap, order, skip, scheduler.Bound{Stop: func() bool {
			asked++
			return asked >= stopAfter
		}})
		if len(plan.Binds) > len(unstopped.Binds) {
			t.Fatalf("cycle %d: %d binds, more than the %d of the same cycle not stopped", cycles, len(plan.Binds), len(unstopped.Binds))
		}
		for i, b := range plan.Binds {
			if u := unstopped.Binds[i]; b.Gang != u.Gang || fmt.Sprint(b.Placements) != fmt.Sprint(u.Placements) {
				t.Fatalf("cycle %d: bind %d is %s %v, the cycle not stopped binds %s %v there", cycles, i, b.Gang, b.Placements, u.Gang, u.Placements)
			}
			bound = append(bound, string(b.Gang))
		}
		if tried := len(plan.Binds) + len(plan.Pending); plan.Deferred > 0 && (tried == 0 || tried > stopAfter) {
			t.Fatalf("cycle %d tried %d gangs before it stopped; Stop said so after %d", cycles, tried, stopAfter)
		}
		for _, p := range plan.Pending {
			failed[p.Gang] = true
			pending = append(pending, string(p.Gang))
		}
		if plan.Deferred == 0 {
			break
		}
		sc.Apply(snap, plan)
	}
	if cycles < len(wantBound)/3 {
		t.Errorf("%d gangs bound in %d cycles, each stopped after at most 3 gangs tried", len(wantBound), cycles)
	}
	slices.Sort(bound)
	slices.Sort(pending)
	if !slices.Equal(bound, wantBound) {
		t.Errorf("stopped cycles bound %v,\nthe unbounded cycle %v", bound, wantBound)
	}
	if !slices.Equal(pending, wantPending) {
		t.Errorf("stopped cycles left %v pending, the unbounded cycle %v", pending, wantPending)
	}
}
