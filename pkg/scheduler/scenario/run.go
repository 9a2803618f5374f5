package scenario

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// Run builds the scenario, runs its cycles and fails t where the decisions differ
// from the expectations, where a victim ever evicts the gang it made room for
// (ping-pong), or where the settling cycles still change something.
func Run(t *testing.T, sc Scenario) {
	t.Helper()
	if sc.Source != "" {
		t.Logf("ported from %s", sc.Source)
	}
	if sc.Differs != "" {
		t.Logf("Gantry differs on purpose: %s", sc.Differs)
	}
	snap, err := Build(sc)
	if err != nil {
		t.Fatal(err)
	}
	s, err := scheduler.New("", scheduler.Config{Preemption: !sc.NoPreemption, MinRuntimeSeconds: sc.MinRuntimeSeconds})
	if err != nil {
		t.Fatal(err)
	}
	cycles := max(sc.Cycles, 1)
	settle := sc.Settle
	if settle == 0 && cycles > 1 {
		settle = 2
	}
	madeRoomFor := map[[2]model.GangID]int{}
	leaving := map[model.PodID]int{}
	var last *scheduler.Plan
	for cycle := 1; cycle <= cycles; cycle++ {
		if err := arriveAndLeave(snap, sc, cycle); err != nil {
			t.Fatal(err)
		}
		snap.Now = Now + int64(cycle-1)
		if cycle == 1 {
			checkFitsOn(t, snap, sc.Expect.FitsOn)
		}
		plan := s.Schedule(snap)
		last = plan
		if cycle == 1 {
			CheckPlan(t, "cycle 1", plan, sc.Expect)
		}
		if want, ok := sc.Later[cycle]; ok && cycle > 1 {
			CheckPlan(t, fmt.Sprintf("cycle %d", cycle), plan, want)
		}
		for _, e := range plan.Evictions {
			if first, ok := madeRoomFor[[2]model.GangID{e.Preemptor, e.Gang}]; ok {
				t.Errorf("cycle %d: ping-pong: %s evicts %s, which evicted it in cycle %d (%s)", cycle, e.Preemptor, e.Gang, first, e.Reason)
			}
			if _, seen := madeRoomFor[[2]model.GangID{e.Gang, e.Preemptor}]; !seen {
				madeRoomFor[[2]model.GangID{e.Gang, e.Preemptor}] = cycle
			}
		}
		if cycles > 1 && cycle > cycles-settle && (len(plan.Binds) > 0 || len(plan.Evictions) > 0) {
			t.Errorf("cycle %d of %d should change nothing, but binds %v and evicts %v", cycle, cycles, Binds(plan), Evicted(plan))
		}
		if testing.Verbose() {
			t.Logf("cycle %d: binds %v, evicts %v, nominates %v, withdraws %v, pending %v", cycle, Binds(plan), Evicted(plan), Nominated(plan), Withdrawn(plan), PendingKinds(plan))
			for _, e := range plan.Evictions {
				t.Logf("  evict %s: %s", e.Pod, e.Reason)
			}
		}
		leaving = ApplyLingering(snap, plan, sc.Linger, leaving)
	}
	if sc.Final != nil {
		checkFinal(t, snap, last, *sc.Final)
	}
}

// CheckPlan compares one Plan with what was expected.
func CheckPlan(t *testing.T, when string, plan *scheduler.Plan, want Expect) {
	t.Helper()
	compare := func(what string, got, want []string) {
		t.Helper()
		want = slices.Clone(want)
		sort.Strings(want)
		if strings.Join(got, " ") != strings.Join(want, " ") {
			t.Errorf("%s: %s = %v, want %v", when, what, got, want)
		}
	}
	compare("binds", Binds(plan), want.Binds)
	compare("evicted", Evicted(plan), want.Evicted)
	compare("nominated", Nominated(plan), want.Nominated)
	compare("withdrawn", Withdrawn(plan), want.Withdrawn)
	for gang, nodes := range want.Placed {
		if got := placedOn(plan, gang); strings.Join(got, " ") != strings.Join(nodes, " ") {
			t.Errorf("%s: %s placed on %v, want %v", when, gang, got, nodes)
		}
	}
	if got := PendingKinds(plan); fmt.Sprint(got) != fmt.Sprint(orEmpty(want.Pending)) {
		t.Errorf("%s: pending = %v, want %v", when, got, orEmpty(want.Pending))
	}
	if t.Failed() {
		for _, p := range plan.Pending {
			t.Logf("  pending %s (%s): %s", p.Gang, p.Kind, p.Reason)
		}
		for _, e := range plan.Evictions {
			t.Logf("  evict %s: %s", e.Pod, e.Reason)
		}
	}
}

func checkFinal(t *testing.T, snap *model.Snapshot, last *scheduler.Plan, want Final) {
	t.Helper()
	var running []string
	pending := map[string]scheduler.PendingKind{}
	reported := PendingKinds(last)
	for id, g := range snap.Gangs {
		bound, waiting := 0, false
		for _, pid := range g.Members {
			if p := snap.Pods[pid]; p != nil && p.Bound() {
				bound++
			} else if p != nil {
				waiting = true
			}
		}
		if bound >= g.MinMember {
			running = append(running, string(id))
		}
		if waiting {
			pending[string(id)] = reported[string(id)]
		}
	}
	sort.Strings(running)
	wantRunning := slices.Clone(want.Running)
	sort.Strings(wantRunning)
	if strings.Join(running, " ") != strings.Join(wantRunning, " ") {
		t.Errorf("after the last cycle: running = %v, want %v", running, wantRunning)
	}
	if want.Pending != nil && fmt.Sprint(pending) != fmt.Sprint(want.Pending) {
		t.Errorf("after the last cycle: pending = %v, want %v", pending, want.Pending)
	}
}

// Apply carries a Plan out on the snapshot as the cluster would: bound pods bound,
// victims gone (their pods pending again, as a Job or Ray controller recreates them),
// nominated pods marked with their node.
func Apply(snap *model.Snapshot, plan *scheduler.Plan) {
	for _, e := range plan.Evictions {
		p := snap.Pods[e.Pod]
		if p == nil || !p.Bound() {
			continue
		}
		unbind(snap, p)
	}
	for _, b := range plan.Binds {
		for _, pl := range b.Placements {
			if p := snap.Pods[pl.Pod]; p != nil {
				place(snap, p, pl.Node, pl.GPUs, snap.Now)
			}
		}
	}
	for _, wd := range plan.Withdrawn {
		for _, id := range wd.Pods {
			if p := snap.Pods[id]; p != nil {
				p.NominatedNode, p.NominationOrder = "", 0
			}
		}
	}
	// Nominations are numbered as the cache numbers them: one after another, a pod
	// nominated again to the same node keeping its number.
	var last int64
	for _, p := range snap.Pods {
		last = max(last, p.NominationOrder)
	}
	for _, nom := range plan.Nominations {
		for _, pl := range nom.Placements {
			if p := snap.Pods[pl.Pod]; p != nil && p.NominatedNode != pl.Node {
				last++
				p.NominatedNode, p.NominationOrder = pl.Node, last
			}
		}
	}
}

// Withdrawn lists the gangs whose nomination a plan ended.
func Withdrawn(plan *scheduler.Plan) []string {
	var out []string
	for _, wd := range plan.Withdrawn {
		out = append(out, string(wd.Gang))
	}
	sort.Strings(out)
	return out
}

// ApplyLingering is Apply, with the victims on the nodes of linger left terminating
// for that many cycles; leaving counts down the cycles each has left.
func ApplyLingering(snap *model.Snapshot, plan *scheduler.Plan, linger map[string]int, leaving map[model.PodID]int) map[model.PodID]int {
	for id, left := range leaving {
		if left > 1 {
			leaving[id] = left - 1
			continue
		}
		delete(leaving, id)
		if p := snap.Pods[id]; p != nil && p.Bound() {
			p.Terminating = false
			unbind(snap, p)
		}
	}
	if len(linger) > 0 {
		var now []scheduler.Eviction
		for _, e := range plan.Evictions {
			p := snap.Pods[e.Pod]
			if p != nil && p.Bound() && linger[p.Node] > 0 {
				p.Terminating = true
				leaving[p.ID] = linger[p.Node]
				continue
			}
			now = append(now, e)
		}
		copied := *plan
		copied.Evictions = now
		plan = &copied
	}
	Apply(snap, plan)
	return leaving
}

func unbind(snap *model.Snapshot, p *model.Pod) {
	n := snap.Node(p.Node).Clone()
	n.Unbook(p, p.GPUs)
	snap.AddNode(n)
	p.Node, p.GPUs, p.StartedAt = "", nil, 0
}

func arriveAndLeave(snap *model.Snapshot, sc Scenario, cycle int) error {
	for _, name := range sc.Leave[cycle] {
		g := snap.Gangs[model.GangID(name)]
		if g == nil {
			return fmt.Errorf("scenario: cycle %d: gang %s cannot leave, it does not exist", cycle, name)
		}
		for _, id := range g.Members {
			if p := snap.Pods[id]; p != nil && p.Bound() {
				unbind(snap, p)
			}
			delete(snap.Pods, id)
		}
		delete(snap.Gangs, g.ID)
	}
	for i, g := range sc.Arrive[cycle] {
		if err := AddGang(snap, g, int64(100*cycle+i)); err != nil {
			return err
		}
	}
	return nil
}

// Binds lists a plan's binds: gang names, "+N" for N elastic members.
func Binds(plan *scheduler.Plan) []string {
	var out []string
	for _, b := range plan.Binds {
		if b.Elastic {
			out = append(out, fmt.Sprintf("%s+%d", b.Gang, len(b.Placements)))
		} else {
			out = append(out, string(b.Gang))
		}
	}
	sort.Strings(out)
	return out
}

// Evicted lists a plan's evicted pods without their namespace.
func Evicted(plan *scheduler.Plan) []string {
	var out []string
	for _, e := range plan.Evictions {
		out = append(out, strings.TrimPrefix(string(e.Pod), "ns/"))
	}
	sort.Strings(out)
	return out
}

// Nominated lists a plan's nominated gangs, "+N" for N elastic members.
func Nominated(plan *scheduler.Plan) []string {
	var out []string
	for _, n := range plan.Nominations {
		if n.Elastic {
			out = append(out, fmt.Sprintf("%s+%d", n.Gang, len(n.Placements)))
		} else {
			out = append(out, string(n.Gang))
		}
	}
	sort.Strings(out)
	return out
}

// PendingKinds maps a plan's pending gangs to why they wait.
func PendingKinds(plan *scheduler.Plan) map[string]scheduler.PendingKind {
	out := map[string]scheduler.PendingKind{}
	for _, p := range plan.Pending {
		out[string(p.Gang)] = p.Kind
	}
	return out
}

func orEmpty(m map[string]scheduler.PendingKind) map[string]scheduler.PendingKind {
	if m == nil {
		return map[string]scheduler.PendingKind{}
	}
	return m
}

// placedOn lists the nodes of a gang's placements in plan, in pod order.
func placedOn(plan *scheduler.Plan, gang string) []string {
	var pls []placement.Placement
	for _, b := range plan.Binds {
		if string(b.Gang) == gang {
			pls = append(pls, b.Placements...)
		}
	}
	sort.Slice(pls, func(i, j int) bool { return pls[i].Pod < pls[j].Pod })
	out := make([]string, len(pls))
	for i, pl := range pls {
		out[i] = pl.Node
	}
	return out
}

// checkFitsOn compares, for each gang named, the nodes its first pending pod fits on.
func checkFitsOn(t *testing.T, snap *model.Snapshot, want map[string][]string) {
	t.Helper()
	if len(want) == 0 {
		return
	}
	v := placement.NewView(snap)
	for gang, nodes := range want {
		g := snap.Gangs[model.GangID(gang)]
		if g == nil {
			t.Fatalf("FitsOn names gang %s, which the scenario does not declare", gang)
		}
		var pod *model.Pod
		for _, p := range snap.GangPods(g) {
			if !p.Bound() {
				pod = p
				break
			}
		}
		if pod == nil {
			t.Fatalf("FitsOn names gang %s, which has no pending pod", gang)
		}
		got := placement.FitsOn(v, pod)
		sort.Strings(got)
		w := slices.Clone(nodes)
		sort.Strings(w)
		if strings.Join(got, " ") != strings.Join(w, " ") {
			t.Errorf("before cycle 1: %s fits on %v, want %v", gang, got, w)
		}
	}
}
