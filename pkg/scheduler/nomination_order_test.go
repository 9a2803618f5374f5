package scheduler_test

import (
	"testing"

	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// Among preemptors waiting on one node, the one nominated first takes the room freed
// first, whatever their names; and a preemptor stops waiting for victims stuck past
// their grace period (issues 19 and 12).
func TestNominationOrderAndStuckVictims(t *testing.T) {
	for _, s := range []sc.Scenario{
		{
			// Created in the same second, as a live burst's services are: before, the
			// tie went by name, and a-late took the GPU freed for b-early, whose
			// wait then ran into the next victim's grace period (live burst of 32,
			// issue 19).
			Name:  "the preemptor nominated first takes the GPU freed first",
			Nodes: []sc.Node{{Name: "n", GPUs: 2}},
			Gangs: []sc.Gang{
				{Name: "victim", Priority: 50, GPUs: 1, On: "n", Spec: sc.Spec{Terminating: true}},
				{Name: "a-late", Priority: 125, NonPreemptible: true, GPUs: 1, NominatedTo: "n", NominationOrder: 2, CreatedAt: 7},
				{Name: "b-early", Priority: 125, NonPreemptible: true, GPUs: 1, NominatedTo: "n", NominationOrder: 1, CreatedAt: 7},
			},
			Expect: sc.Expect{Binds: []string{"b-early"},
				Pending: map[string]scheduler.PendingKind{"a-late": scheduler.PendingWaitingForVictim}},
		},
		{
			Name:  "a nomination from before a restart (order unknown) goes before later ones",
			Nodes: []sc.Node{{Name: "n", GPUs: 2}},
			Gangs: []sc.Gang{
				{Name: "victim", Priority: 50, GPUs: 1, On: "n", Spec: sc.Spec{Terminating: true}},
				{Name: "a-new", Priority: 125, NonPreemptible: true, GPUs: 1, NominatedTo: "n", NominationOrder: 1, CreatedAt: 7},
				{Name: "b-restart", Priority: 125, NonPreemptible: true, GPUs: 1, NominatedTo: "n", CreatedAt: 7},
			},
			Expect: sc.Expect{Binds: []string{"b-restart"},
				Pending: map[string]scheduler.PendingKind{"a-new": scheduler.PendingWaitingForVictim}},
		},
		{
			Name:  "a preemptor waits for a victim a while past its grace period",
			Nodes: []sc.Node{{Name: "n", GPUs: 1}, {Name: "m", GPUs: 1}},
			Gangs: []sc.Gang{
				{Name: "victim", Priority: 50, GPUs: 1, On: "n", Spec: sc.Spec{Terminating: true, GraceEndedAgo: scheduler.DefaultVictimTimeoutSeconds}},
				{Name: "low", Priority: 50, GPUs: 1, On: "m"},
				{Name: "serve", Priority: 125, NonPreemptible: true, GPUs: 1, NominatedTo: "n"},
			},
			Expect: sc.Expect{Pending: map[string]scheduler.PendingKind{"serve": scheduler.PendingWaitingForVictim}},
		},
		{
			// A finalizer nobody removes: before, serve waited as long as the victim
			// stayed, and no bound applied.
			Name:  "a preemptor stops waiting for a victim stuck past its grace period and preempts elsewhere",
			Nodes: []sc.Node{{Name: "n", GPUs: 1}, {Name: "m", GPUs: 1}},
			Gangs: []sc.Gang{
				{Name: "victim", Priority: 50, GPUs: 1, On: "n", Spec: sc.Spec{Terminating: true, GraceEndedAgo: scheduler.DefaultVictimTimeoutSeconds + 1}},
				{Name: "low", Priority: 50, GPUs: 1, On: "m"},
				{Name: "serve", Priority: 125, NonPreemptible: true, GPUs: 1, NominatedTo: "n"},
			},
			// Withdrawn and nominated again in one cycle: only the new nomination shows.
			Expect: sc.Expect{Evicted: []string{"low-0"}, Nominated: []string{"serve"}},
			Cycles: 4,
			Final:  &sc.Final{Running: []string{"serve", "victim"}}, // the stuck victim stays, holding n
		},
		{
			Name:  "with nowhere else to go, a preemptor waiting on a stuck victim loses its nomination",
			Nodes: []sc.Node{{Name: "n", GPUs: 1}},
			Gangs: []sc.Gang{
				{Name: "victim", Priority: 50, GPUs: 1, On: "n", Spec: sc.Spec{Terminating: true, GraceEndedAgo: 3600}},
				{Name: "serve", Priority: 125, NonPreemptible: true, GPUs: 1, NominatedTo: "n"},
			},
			Expect: sc.Expect{Withdrawn: []string{"serve"}, Pending: map[string]scheduler.PendingKind{"serve": scheduler.PendingNoFit}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}

// A gang that does not fit, where pods already terminating leave room that nobody is
// waiting for, waits for that room instead of evicting anew (issue 19: a live burst
// of 8 one-GPU services evicted a third 4-GPU gang for the eighth service while a
// GPU freed for the second was still terminating, 1.50 freed ÷ needed).
func TestRoomOnItsWayIsWaitedFor(t *testing.T) {
	for _, s := range []sc.Scenario{
		{
			Name:  "a newcomer waits for a terminating pod's room rather than evict",
			Nodes: []sc.Node{{Name: "n1", GPUs: 2}, {Name: "n2", GPUs: 1}},
			Gangs: []sc.Gang{
				{Name: "leaving", Priority: 50, GPUs: 1, On: "n1", Spec: sc.Spec{Terminating: true}},
				{Name: "train", Priority: 50, GPUs: 1, On: "n1"},
				{Name: "train-2", Priority: 50, GPUs: 1, On: "n2"},
				{Name: "serve", Priority: 125, NonPreemptible: true, GPUs: 1},
			},
			Expect: sc.Expect{Nominated: []string{"serve"}, Pending: map[string]scheduler.PendingKind{"serve": scheduler.PendingWaitingForVictim}},
		},
		{
			Name:  "room promised to a nominated gang is not waited for twice",
			Nodes: []sc.Node{{Name: "n1", GPUs: 1}, {Name: "n2", GPUs: 1}},
			Gangs: []sc.Gang{
				{Name: "leaving", Priority: 50, GPUs: 1, On: "n1", Spec: sc.Spec{Terminating: true}},
				{Name: "train-2", Priority: 50, GPUs: 1, On: "n2"},
				{Name: "first", Priority: 125, NonPreemptible: true, GPUs: 1, NominatedTo: "n1", NominationOrder: 1},
				{Name: "serve", Priority: 125, NonPreemptible: true, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"train-2-0"}, Nominated: []string{"serve"},
				Pending: map[string]scheduler.PendingKind{"first": scheduler.PendingWaitingForVictim}},
		},
		{
			Name:  "a pod stuck terminating is not waited for",
			Nodes: []sc.Node{{Name: "n1", GPUs: 1}, {Name: "n2", GPUs: 1}},
			Gangs: []sc.Gang{
				{Name: "stuck", Priority: 50, GPUs: 1, On: "n1", Spec: sc.Spec{Terminating: true, GraceEndedAgo: 3600}},
				{Name: "train-2", Priority: 50, GPUs: 1, On: "n2"},
				{Name: "serve", Priority: 125, NonPreemptible: true, GPUs: 1},
			},
			Expect: sc.Expect{Evicted: []string{"train-2-0"}, Nominated: []string{"serve"}},
		},
	} {
		t.Run(s.Name, func(t *testing.T) { sc.Run(t, s) })
	}
}
