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
	const burst = 8
	snap, sched, linger := trainingCluster(t, 2, 4, 3, sc.Gang{GPUs: 1}, burst)
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
		leaving = sc.ApplyLingering(snap, plan, linger, leaving)
	}
	for i := 0; i < burst; i++ {
		if p := snap.Pods[sc.PodID(serveName(i), 0)]; !p.Bound() {
			t.Errorf("%s is not bound after 8 cycles", serveName(i))
		}
	}
	if len(evicted) != 2 {
		t.Errorf("%d training gangs evicted for %d one-GPU services, want 2 (8 GPUs): %v", len(evicted), burst, evicted)
	}
}

// TestBurstArrivingOverCycles is the live burst as the cache drives the core: 8 nodes
// × 8 GPUs full of 16 rigid 4-GPU training gangs, and 32 services arriving 3 per
// cycle (KubeRay creates them one by one), victims lingering 3 cycles, gangs left
// pending skipped while nothing was freed. Every service must bind; the gangs evicted
// must be the floor (a GPU per service, 4 per gang); no preemptor may evict after it
// was nominated in an earlier cycle (it would wait a second grace period); and no
// gang's GPUs may go unused. Before, a preemptor re-placed in a later cycle took
// room promised to another, which evicted again.
func TestBurstArrivingOverCycles(t *testing.T) {
	for _, serve := range []sc.Gang{{GPUs: 1}, {Share: 20 * sc.GiB, StartFree: 0.75}} {
		name := "whole"
		if serve.Share > 0 {
			name = "20Gi at 0.75"
		}
		t.Run(name, func(t *testing.T) { burstOverCycles(t, serve, 32, 3) })
	}
}

func burstOverCycles(t *testing.T, serve sc.Gang, burst, perCycle int) {
	snap, sched, linger := trainingCluster(t, 8, 4, 3, serve, burst)
	pendingBefore := map[model.GangID]bool{}
	nominatedIn := map[model.GangID]int{}
	evictedGPUs := map[model.GangID][]string{}
	leaving := map[model.PodID]int{}
	cycle, freed := 1, false
	for ; cycle <= 60; cycle++ {
		arrived := min(burst, perCycle*cycle)
		skip := func(g model.GangID) bool {
			var i int
			if _, err := fmt.Sscanf(string(g), "serve-%d", &i); err == nil && i >= arrived {
				return true // not created yet
			}
			return pendingBefore[g] && !freed
		}
		snap.Now = sc.Now + int64(cycle-1)
		plan := sched.ScheduleSkipping(snap, skip)
		for _, e := range plan.Evictions {
			if first, ok := nominatedIn[e.Preemptor]; ok && first < cycle {
				t.Errorf("cycle %d: %s evicts %s after it was nominated in cycle %d", cycle, e.Preemptor, e.Pod, first)
			}
			p := snap.Pods[e.Pod]
			for _, b := range p.GPUs {
				evictedGPUs[e.Gang] = append(evictedGPUs[e.Gang], fmt.Sprintf("%s/%d", p.Node, b.Index))
			}
		}
		for _, n := range plan.Nominations {
			if _, ok := nominatedIn[n.Gang]; !ok {
				nominatedIn[n.Gang] = cycle
			}
		}
		pendingBefore = map[model.GangID]bool{}
		for _, p := range plan.Pending {
			pendingBefore[p.Gang] = true
		}
		before := len(leaving)
		leaving = sc.ApplyLingering(snap, plan, linger, leaving)
		freed = len(leaving) < before
		if arrived == burst && allBound(snap, burst, serveName) && len(leaving) == 0 {
			break
		}
	}
	used := map[string]bool{}
	for i := 0; i < burst; i++ {
		p := snap.Pods[sc.PodID(serveName(i), 0)]
		if !p.Bound() {
			t.Errorf("%s not bound after %d cycles", serveName(i), cycle)
			continue
		}
		for _, b := range p.GPUs {
			used[fmt.Sprintf("%s/%d", p.Node, b.Index)] = true
		}
	}
	wasted := 0
	for _, gpus := range evictedGPUs {
		took := false
		for _, k := range gpus {
			took = took || used[k]
		}
		if !took {
			wasted++
		}
	}
	if floor := (burst + 3) / 4; len(evictedGPUs) != floor || wasted > 0 {
		t.Errorf("%d gangs evicted (floor %d), %d of them for nothing", len(evictedGPUs), floor, wasted)
	}
}

// TestNominatedPreemptorKeepsItsNode: a preemptor waiting on its nominated node
// is placed there, not on another node where a GPU is free for the next preemptor
// (a tighter fit that bestfit and fgd prefer). Before, the first took the second's
// GPU, and the second, its victims gone, found no room and evicted again: a ninth
// gang for a burst that needed eight, and a second grace period to wait, live.
func TestNominatedPreemptorKeepsItsNode(t *testing.T) {
	for _, policy := range []string{"", "bestfit"} {
		snap, err := sc.Build(sc.Scenario{
			Nodes:  []sc.Node{{Name: "n1", GPUs: 8}, {Name: "n2", GPUs: 8}},
			Queues: []sc.Queue{{Name: "team", Quota: -1}},
			Gangs: []sc.Gang{
				{Name: "train-a", Queue: "team", Priority: 50, Pods: 4, GPUs: 1, On: "n1"},
				{Name: "train-b", Queue: "team", Priority: 50, Pods: 4, GPUs: 1, On: "n1"},
				{Name: "train-c", Queue: "team", Priority: 50, Pods: 4, GPUs: 1, On: "n2"},
				{Name: "train-d", Queue: "team", Priority: 50, Pods: 3, GPUs: 1, On: "n2"},
				{Name: "serve-a", Queue: "team", Priority: 125, NonPreemptible: true, GPUs: 1},
				{Name: "serve-b", Queue: "team", Priority: 125, NonPreemptible: true, GPUs: 1},
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		// serve-a evicted train-a on n1, whose pods are still terminating; serve-b's
		// victims on n2 are gone, leaving the one GPU it was nominated to.
		for i := 0; i < 4; i++ {
			snap.Pods[sc.PodID("train-a", i)].Terminating = true
		}
		snap.Pods[sc.PodID("serve-a", 0)].NominatedNode = "n1"
		snap.Pods[sc.PodID("serve-b", 0)].NominatedNode = "n2"
		snap.Gangs["serve-b"].CreatedAt = snap.Gangs["serve-a"].CreatedAt + 1
		sched, err := scheduler.New(policy, scheduler.Config{Preemption: true})
		if err != nil {
			t.Fatal(err)
		}
		plan := sched.Schedule(snap)
		if ev := sc.Evicted(plan); len(ev) > 0 {
			t.Errorf("policy %q: evicts %v; both preemptors have their room", policy, ev)
		}
		if b := sc.Binds(plan); len(b) != 1 || b[0] != "serve-b" {
			t.Errorf("policy %q: binds %v, want serve-b on its free GPU", policy, b)
		}
		if k := sc.PendingKinds(plan)["serve-a"]; k != scheduler.PendingWaitingForVictim {
			t.Errorf("policy %q: serve-a is %q, want waiting for its victims", policy, k)
		}
	}
}
