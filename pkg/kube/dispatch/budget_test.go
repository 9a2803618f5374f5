package dispatch

import (
	"context"
	"fmt"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/events"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// backlog is a cache of 8 nodes × 8 GPUs and n pending one-GPU pods.
func backlog(t *testing.T, n int) (*cache.Cache, *scheduler.Scheduler) {
	t.Helper()
	c := cache.New([]string{"gantry"}, &gang.StaticLookup{}, "")
	for i := range 8 {
		alloc := corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi"),
			corev1.ResourcePods: resource.MustParse("110"), names.ExtendedGPUResource: *resource.NewQuantity(8, resource.DecimalSI),
		}
		c.UpsertNode(&corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("n%d", i)}, Status: corev1.NodeStatus{Allocatable: alloc}})
	}
	for i := range n {
		c.UpsertPod(pendingGPUPod(fmt.Sprintf("p%02d", i), int64(1000+i)))
	}
	s, err := scheduler.New("", scheduler.Config{})
	if err != nil {
		t.Fatal(err)
	}
	return c, s
}

// pendingGPUPod is a pending one-GPU pod of the scheduler "gantry", created at
// the given Unix second.
func pendingGPUPod(name string, created int64) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.Unix(created, 0)},
		Spec: corev1.PodSpec{SchedulerName: "gantry", Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
			Requests: corev1.ResourceList{names.ExtendedGPUResource: *resource.NewQuantity(1, resource.DecimalSI)}}}}},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
}

// A backlog larger than a cycle's budget is placed over several cycles, each placing
// its budget and sending it to bind before the next; the loop is woken for the next
// cycle once the binds queued run low, without an informer event or the resync.
func TestBacklogIsPlacedOverBoundedCycles(t *testing.T) {
	c, s := backlog(t, 40)
	api := &fakeAPI{bind: func(string, int) error { return nil }}
	r := New(c, s, nil, events.NewFakeRecorder(1000), nil, Options{BindWorkers: 4})
	r.binder = newFake(t, api)
	r.opts.CycleTarget = time.Hour // no cycle stops for its time
	ctx := context.Background()
	var cycles, placed int
	for {
		cycles++
		r.budget = 8 // held there: resize would grow it
		plan := r.Cycle(ctx)
		n := 0
		for _, b := range plan.Binds {
			n += len(b.Placements)
		}
		placed += n
		if plan.Deferred == 0 {
			break
		}
		if n != 8 {
			t.Fatalf("cycle %d placed %d pods and deferred %d pods; want its budget of 8", cycles, n, plan.Deferred)
		}
		select {
		case <-r.ready:
		case <-time.After(30 * time.Second):
			t.Fatalf("cycle %d deferred %d pods, but the loop was never woken for them", cycles, plan.Deferred)
		}
	}
	if placed != 40 || cycles != 5 {
		t.Errorf("placed %d pods in %d cycles, want 40 in 5", placed, cycles)
	}
}

// A cycle past CycleTarget places no more gangs, whatever its budget left: each
// cycle here has run past a target of 1 ns after its first gang, places that one and
// defers the rest, and the loop is woken for them.
func TestACyclePastItsTargetStopsPlacing(t *testing.T) {
	c, s := backlog(t, 6)
	api := &fakeAPI{bind: func(string, int) error { return nil }}
	r := New(c, s, nil, events.NewFakeRecorder(1000), nil, Options{BindWorkers: 4, CycleTarget: time.Nanosecond})
	r.binder = newFake(t, api)
	ctx := context.Background()
	for cycle := 1; cycle <= 6; cycle++ {
		r.budget = 1000 // held there: resize would shrink it
		plan := r.Cycle(ctx)
		n := 0
		for _, b := range plan.Binds {
			n += len(b.Placements)
		}
		if n != 1 || plan.Deferred != 6-cycle {
			t.Fatalf("cycle %d placed %d pods and deferred %d; want 1 and %d", cycle, n, plan.Deferred, 6-cycle)
		}
		if plan.Deferred > 0 {
			select {
			case <-r.ready:
			case <-time.After(30 * time.Second):
				t.Fatalf("cycle %d deferred %d pods, but the loop was never woken for them", cycle, plan.Deferred)
			}
		}
	}
}

// The budget moves halfway to the size that would have taken CycleTarget, only after
// a cycle that spent it, whatever the backlog left.
func TestBudgetFollowsTheTimePerPod(t *testing.T) {
	r := New(cache.New([]string{"gantry"}, &gang.StaticLookup{}, ""), nil, nil, events.NewFakeRecorder(1), nil, Options{CycleTarget: 40 * time.Millisecond})
	r.budget, r.minBudget = 400, 10
	plan := func(pods, deferred int) *scheduler.Plan {
		p := &scheduler.Plan{Deferred: deferred}
		p.Binds = append(p.Binds, scheduler.GangBind{Placements: make([]placement.Placement, pods)})
		return p
	}
	r.resize(plan(400, 0), time.Second)
	if r.budget != 400 {
		t.Fatalf("a cycle that left nothing for later moved the budget to %d", r.budget)
	}
	r.resize(plan(400, 5), 80*time.Millisecond) // 400 pods would take 40 ms: 200
	if r.budget != 300 {
		t.Errorf("budget %d after 400 pods in 80 ms, want 300 (halfway to 200)", r.budget)
	}
	r.resize(plan(300, 5), 30*time.Millisecond) // 400 fit in 40 ms
	if r.budget != 350 {
		t.Errorf("budget %d after 300 pods in 30 ms, want 350 (halfway to 400)", r.budget)
	}
	r.resize(plan(350, 5), time.Millisecond) // 14,000 fit in 40 ms
	if r.budget != maxBudget {
		t.Errorf("budget %d after 350 pods in 1 ms, want the ceiling of %d", r.budget, maxBudget)
	}
	for range 10 {
		r.resize(plan(10, 5), time.Second)
	}
	if r.budget != 10 {
		t.Errorf("budget %d after slow cycles, want the floor of 10", r.budget)
	}
	r.resize(plan(10, 100000), time.Second)
	if r.budget != 10 {
		t.Errorf("budget %d after a slow cycle with 100,000 pods left, want the floor of 10: the backlog does not size it", r.budget)
	}
}

// A change after a quiet spell is scheduled at once, not after Debounce: with a
// debounce of an hour and no resync, a backlog that appears in an idle cache is
// bound (the first cycle's binds reach the API) without waiting. With the debounce
// slept on every change, as before, nothing was bound for the hour.
func TestAChangeAfterAQuietSpellIsNotDebounced(t *testing.T) {
	c, s := backlog(t, 0)
	bound := make(chan string, 100)
	api := &fakeAPI{bind: func(name string, _ int) error {
		bound <- name
		return nil
	}}
	r := New(c, s, nil, events.NewFakeRecorder(1000), nil, Options{BindWorkers: 4, Debounce: time.Hour, Resync: time.Hour})
	r.binder = newFake(t, api)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// The nodes' arrival left a change pending. Were the loop to run a cycle on it
	// before the pod came (as it did in CI, under load), the pod's change would come
	// within Debounce of that cycle and rightly wait: take it, so that the pod's
	// change is the first the loop sees.
	select {
	case <-c.Changed():
	default:
	}
	go r.Run(ctx)
	time.Sleep(10 * time.Millisecond) // the loop waits for a change before the pod
	c.UpsertPod(pendingGPUPod("alone", 1000))
	select {
	case got := <-bound:
		if got != "alone" {
			t.Fatalf("bound %s, want alone", got)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a pod that arrived in an idle cache was not bound: its cycle waited for the debounce")
	}
}

// A change soon after a cycle waits only for the rest of Debounce since that cycle,
// not for a whole Debounce after the change: with a debounce of 2 s, a pod that
// arrives 1.5 s after the last cycle is bound about 0.5 s later. When every such
// change slept the whole Debounce, it was bound 2 s later.
func TestAChangeSoonAfterACycleWaitsOnlyTheRestOfTheDebounce(t *testing.T) {
	const debounce = 2 * time.Second
	c, s := backlog(t, 0)
	bound := make(chan string, 100)
	api := &fakeAPI{bind: func(name string, _ int) error {
		bound <- name
		return nil
	}}
	r := New(c, s, nil, events.NewFakeRecorder(1000), nil, Options{BindWorkers: 4, Debounce: debounce, Resync: time.Hour})
	r.binder = newFake(t, api)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go r.Run(ctx)
	c.UpsertPod(pendingGPUPod("first", 1000))
	<-bound
	first := time.Now()
	time.Sleep(debounce * 3 / 4)
	c.UpsertPod(pendingGPUPod("second", 1000))
	select {
	case <-bound:
		// The first cycle ended before first; the second may start at its end +
		// debounce. Waiting a whole debounce after the change ends at 1.75 × it.
		if took := time.Since(first); took >= debounce*7/4 {
			t.Fatalf("second pod bound %v after the first, want under %v: it waited a whole debounce after its change", took, debounce*7/4)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("second pod never bound")
	}
}
