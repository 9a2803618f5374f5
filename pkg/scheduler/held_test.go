package scheduler_test

import (
	"fmt"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// TestSkippedPreemptorKeepsItsRoom is the live burst of issue 19 as the cache drives
// the core: services arrive over several cycles, and a preemptor left waiting for its
// victims is skipped by the caller while nothing it depends on changes (marking
// victims terminating frees nothing). Its room must still be kept, so that the
// services arriving next take the rest of its victims' GPUs instead of evicting
// again. Before, the second cycle saw the first victims' GPUs as taken and evicted a
// third 4-GPU gang for 8 one-GPU services (1.50 freed ÷ needed, live and here).
func TestSkippedPreemptorKeepsItsRoom(t *testing.T) {
	s := sc.Scenario{Queues: []sc.Queue{{Name: "team", Quota: -1}}, Linger: map[string]int{}}
	for n := 0; n < 2; n++ {
		node := fmt.Sprintf("n%d", n)
		s.Nodes = append(s.Nodes, sc.Node{Name: node, GPUs: 8})
		s.Linger[node] = 3
		for k := 0; k < 2; k++ {
			s.Gangs = append(s.Gangs, sc.Gang{Name: fmt.Sprintf("train-%d", 2*n+k), Queue: "team", Priority: 50,
				Pods: 4, GPUs: 1, On: node, StartedAgo: int64(3600 + 60*(2*n+k))})
		}
	}
	const burst = 8
	for i := 0; i < burst; i++ {
		s.Gangs = append(s.Gangs, sc.Gang{Name: fmt.Sprintf("serve-%d", i), Queue: "team", Priority: 125, NonPreemptible: true, GPUs: 1})
	}
	snap, err := sc.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New("", scheduler.Config{Preemption: true})
	if err != nil {
		t.Fatal(err)
	}
	// Cycle 1 sees serve-0 alone (the others are not created yet); each later cycle
	// sees the next arrivals and skips the gangs left pending before, as the cache
	// does while its capacity has not changed.
	arrived := map[int]int{1: 1, 2: 2, 3: burst}
	pendingBefore := map[model.GangID]bool{}
	evicted := map[model.GangID]bool{}
	leaving := map[model.PodID]int{}
	for cycle := 1; cycle <= 8; cycle++ {
		upTo := burst
		if n, ok := arrived[cycle]; ok {
			upTo = n
		}
		skip := func(g model.GangID) bool {
			var i int
			if _, err := fmt.Sscanf(string(g), "serve-%d", &i); err == nil && i >= upTo {
				return true // not created yet
			}
			return pendingBefore[g] && len(leaving) > 0
		}
		snap.Now = sc.Now + int64(cycle-1)
		plan := sched.ScheduleSkipping(snap, skip)
		for _, e := range plan.Evictions {
			evicted[e.Gang] = true
		}
		pendingBefore = map[model.GangID]bool{}
		for _, p := range plan.Pending {
			pendingBefore[p.Gang] = true
		}
		t.Logf("cycle %d: binds %v evicts %v nominates %v pending %v", cycle, sc.Binds(plan), sc.Evicted(plan), sc.Nominated(plan), sc.PendingKinds(plan))
		leaving = sc.ApplyLingering(snap, plan, s.Linger, leaving)
	}
	for i := 0; i < burst; i++ {
		if p := snap.Pods[sc.PodID(fmt.Sprintf("serve-%d", i), 0)]; !p.Bound() {
			t.Errorf("serve-%d is not bound after 8 cycles", i)
		}
	}
	if len(evicted) != 2 {
		t.Errorf("%d training gangs evicted for %d one-GPU services, want 2 (8 GPUs): %v", len(evicted), burst, evicted)
	}
}
