package scheduler

import (
	"fmt"
	"math/rand"
	"slices"
	"sort"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// pendingWork lists the gangs that have pending members, in the order of before:
// what every cycle did before the Order, kept as the reference the Order must agree
// with.
func pendingWork(snap *model.Snapshot) []*work {
	n := len(snap.Gangs)
	if snap.PendingGangs != nil {
		n = len(snap.PendingGangs)
	}
	slab := make([]work, 0, n)
	out := make([]*work, 0, n)
	add := func(g *model.Gang) {
		if w, ok := gangWork(snap, g); ok {
			slab = append(slab, w)
			out = append(out, &slab[len(slab)-1])
		}
	}
	if snap.PendingGangs != nil {
		for id := range snap.PendingGangs {
			if g := snap.Gangs[id]; g != nil {
				add(g)
			}
		}
	} else {
		for _, g := range snap.Gangs {
			add(g)
		}
	}
	sort.Slice(out, func(i, j int) bool { return before(out[i], out[j]) })
	return out
}

// randomOrderSnapshot is gangs of 1-3 pods over three queues (one the default),
// with ties in priority and creation time, members bound and pods nominated.
func randomOrderSnapshot(r *rand.Rand, gangs int) *model.Snapshot {
	snap := model.NewSnapshot()
	snap.DefaultQueue = "qa"
	for i := 0; i < gangs; i++ {
		addRandomGang(r, snap, fmt.Sprintf("g%03d", i))
	}
	return snap
}

func addRandomGang(r *rand.Rand, snap *model.Snapshot, name string) {
	g := &model.Gang{ID: model.GangID(name), Queue: []string{"", "qa", "qb"}[r.Intn(3)],
		Priority: int32(10 * r.Intn(3)), CreatedAt: int64(r.Intn(5))}
	n := 1 + r.Intn(3)
	g.MinMember = n
	for j := 0; j < n; j++ {
		p := &model.Pod{ID: model.PodID(fmt.Sprintf("%s-%d", name, j)), Gang: g.ID, Queue: g.Queue, CreatedAt: g.CreatedAt}
		mutatePod(r, p)
		snap.Pods[p.ID] = p
		g.Members = append(g.Members, p.ID)
	}
	snap.Gangs[g.ID] = g
}

// mutatePod binds, unbinds or nominates p at random.
func mutatePod(r *rand.Rand, p *model.Pod) {
	switch r.Intn(4) {
	case 0:
		p.Node, p.NominatedNode, p.NominationOrder = "n", "", 0
	case 1:
		p.Node, p.NominatedNode, p.NominationOrder = "", "n", int64(r.Intn(4))
	default:
		p.Node, p.NominatedNode, p.NominationOrder = "", "", 0
	}
}

// walk lists o's gangs, queue by queue in name order, each in order.
func walk(o *Order) []string {
	var out []string
	names := make([]string, 0, len(o.queues))
	for q := range o.queues {
		names = append(names, q)
	}
	sort.Strings(names)
	for _, q := range names {
		cur := &cursor{q: o.queues[q]}
		for k, ok := cur.next(); ok; k, ok = cur.next() {
			out = append(out, q+"/"+string(k.id))
		}
	}
	return out
}

// sorted lists the same from pendingWork.
func sorted(snap *model.Snapshot) []string {
	byQueue := map[string][]string{}
	for _, w := range pendingWork(snap) {
		byQueue[w.gang.Queue] = append(byQueue[w.gang.Queue], w.gang.Queue+"/"+string(w.gang.ID))
	}
	var names []string
	for q := range byQueue {
		names = append(names, q)
	}
	sort.Strings(names)
	var out []string
	for _, q := range names {
		out = append(out, byQueue[q]...)
	}
	return out
}

// An Order built from a snapshot walks each queue in the order every cycle sorted
// the pending gangs in before it existed (more than one chunk of the cursor).
func TestOrderOfIsBefore(t *testing.T) {
	r := rand.New(rand.NewSource(1))
	for i := 0; i < 20; i++ {
		snap := randomOrderSnapshot(r, 300)
		if got, want := walk(OrderOf(snap)), sorted(snap); !slices.Equal(got, want) {
			t.Fatalf("snapshot %d: order\n%v\nwant\n%v", i, got, want)
		}
	}
}

// An Order told of every gang that changed agrees with one built afresh, whatever
// the changes: pods bound, unbound and nominated, gangs re-prioritised, moved to
// another queue, deleted and created.
func TestOrderRefreshKeepsUp(t *testing.T) {
	r := rand.New(rand.NewSource(2))
	snap := randomOrderSnapshot(r, 200)
	o := OrderOf(snap)
	next := 200
	for step := 0; step < 3000; step++ {
		id := randomGang(r, snap)
		g := *snap.Gangs[id]
		switch r.Intn(6) {
		case 0:
			p := *snap.Pods[g.Members[r.Intn(len(g.Members))]]
			mutatePod(r, &p)
			snap.Pods[p.ID] = &p
		case 1:
			g.Priority = int32(10 * r.Intn(3))
			snap.Gangs[id] = &g
		case 2:
			g.Queue = []string{"", "qa", "qb"}[r.Intn(3)]
			snap.Gangs[id] = &g
		case 3:
			for _, m := range g.Members {
				delete(snap.Pods, m)
			}
			delete(snap.Gangs, id)
		default:
			id = model.GangID(fmt.Sprintf("g%03d", next))
			next++
			addRandomGang(r, snap, string(id))
		}
		o.Refresh(snap, id)
		if step%100 == 0 || step == 2999 {
			if d := o.Diff(OrderOf(snap)); d != "" {
				t.Fatalf("step %d: the kept order differs from a new one: %s", step, d)
			}
			if got, want := walk(o), sorted(snap); !slices.Equal(got, want) {
				t.Fatalf("step %d: order\n%v\nwant\n%v", step, got, want)
			}
		}
	}
}

// The workload learner shown only the gangs refreshed since the last cycle learns
// the same mix as one shown every pending gang each cycle.
func TestKeptOrderLearnsTheSameMix(t *testing.T) {
	r := rand.New(rand.NewSource(4))
	snap := chargedSnapshot(r)
	every, err := New("", Config{})
	if err != nil {
		t.Fatal(err)
	}
	kept, _ := New("", Config{})
	o := NewOrder()
	for id := range snap.Gangs {
		o.Refresh(snap, id)
	}
	skipAll := func(model.GangID) bool { return true }
	for cycle := 0; cycle < 20; cycle++ {
		every.ScheduleWithin(snap, skipAll, 0)
		kept.ScheduleOrdered(snap, o, skipAll, Bound{})
		o.Settle()
		for i := 0; i < 10; i++ {
			id := fmt.Sprintf("c%02d-%d", cycle, i)
			addRandomGang(r, snap, id)
			for _, m := range snap.Gangs[model.GangID(id)].Members {
				chargePod(r, snap.Pods[m])
			}
			o.Refresh(snap, model.GangID(id))
		}
	}
	a, b := every.Placer.Settings().Arrivals, kept.Placer.Settings().Arrivals
	if a != b || a == 0 {
		t.Fatalf("learned from %d pods with the kept order, %d from every pending gang", b, a)
	}
	if ma, mb := fmt.Sprint(every.Placer.Mix()), fmt.Sprint(kept.Placer.Mix()); ma != mb {
		t.Fatalf("mix %s with the kept order, %s from every pending gang", mb, ma)
	}
}

// randomGang is one of snap's gangs, drawn by r in an order that does not depend on
// map iteration, so a seed replays the same steps.
func randomGang(r *rand.Rand, snap *model.Snapshot) model.GangID {
	ids := make([]model.GangID, 0, len(snap.Gangs))
	for id := range snap.Gangs {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	return ids[r.Intn(len(ids))]
}
