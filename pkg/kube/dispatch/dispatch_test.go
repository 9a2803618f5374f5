package dispatch

import (
	"context"
	"errors"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/events"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

var podsGR = schema.GroupResource{Resource: "pods"}

func req(name, node string) cache.BindRequest {
	return cache.BindRequest{
		Pod:       &model.Pod{ID: model.PodID("ns/" + name), UID: "uid-" + name},
		Placement: placement.Placement{Pod: model.PodID("ns/" + name), Node: node},
	}
}

// fakeBinder answers each Binding with bind(pod name, attempt) and each GET of a pod
// with get(pod name); it records deletions.
type fakeAPI struct {
	mu       sync.Mutex
	attempts map[string]int
	deleted  []string
	bind     func(name string, attempt int) error
	get      func(name string) (*corev1.Pod, error)
}

func newFake(t *testing.T, api *fakeAPI) *binder {
	t.Helper()
	api.attempts = map[string]int{}
	client := fake.NewSimpleClientset()
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "binding" {
			return false, nil, nil
		}
		b := a.(k8stesting.CreateAction).GetObject().(*corev1.Binding)
		api.mu.Lock()
		api.attempts[b.Name]++
		n := api.attempts[b.Name]
		api.mu.Unlock()
		return true, nil, api.bind(b.Name, n)
	})
	client.PrependReactor("get", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		name := a.(k8stesting.GetAction).GetName()
		pod, err := api.get(name)
		return true, pod, err
	})
	client.PrependReactor("delete", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		api.mu.Lock()
		api.deleted = append(api.deleted, a.(k8stesting.DeleteAction).GetName())
		api.mu.Unlock()
		return true, nil, nil
	})
	b := newBinder(client, 8)
	b.backoff = wait.Backoff{Duration: time.Millisecond, Factor: 2, Steps: 4}
	return b
}

func boundPod(name, node string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name)}, Spec: corev1.PodSpec{NodeName: node}}
}

func outcomes(rs []result) map[string]outcome {
	out := map[string]outcome{}
	for _, r := range rs {
		out[string(r.req.Pod.ID)] = r.outcome
	}
	return out
}

// refusing is an API server that refuses the Binding of one pod (Forbidden) and
// accepts the others'.
func refusing(refused string) *fakeAPI {
	return &fakeAPI{
		bind: func(name string, _ int) error {
			if name == refused {
				return apierrors.NewForbidden(podsGR, name, errors.New("no"))
			}
			return nil
		},
		get: func(name string) (*corev1.Pod, error) { return boundPod(name, ""), nil },
	}
}

func TestPartialGangBindFailureRollsTheGangBack(t *testing.T) {
	api := refusing("w2")
	b := newFake(t, api)
	results, err := b.bindGang(context.Background(), []cache.BindRequest{req("w1", "a"), req("w2", "a"), req("w3", "a")}, 3)
	if err == nil {
		t.Fatal("a gang bound below its minimum returned no error")
	}
	got := outcomes(results)
	if got["ns/w1"] != rolledBack || got["ns/w3"] != rolledBack || got["ns/w2"] != failed {
		t.Fatalf("outcomes = %v, want w1 and w3 rolled back, w2 failed", got)
	}
	if len(api.deleted) != 2 {
		t.Fatalf("deleted %v, want the two members bound", api.deleted)
	}
}

func TestElasticMembersAboveTheMinimumAreKept(t *testing.T) {
	api := refusing("w2")
	b := newFake(t, api)
	results, _ := b.bindGang(context.Background(), []cache.BindRequest{req("w1", "a"), req("w2", "a")}, 1)
	if got := outcomes(results); got["ns/w1"] != bound || len(api.deleted) != 0 {
		t.Fatalf("outcomes = %v, deleted %v: want w1 kept bound", got, api.deleted)
	}
}

func TestBindRetriesThrottlingWithBackoff(t *testing.T) {
	api := &fakeAPI{
		bind: func(name string, attempt int) error {
			if attempt < 3 {
				return apierrors.NewTooManyRequests("slow down", 0)
			}
			return nil
		},
		get: func(name string) (*corev1.Pod, error) { return nil, errors.New("unexpected GET") },
	}
	b := newFake(t, api)
	r := b.bind(context.Background(), req("p", "a"))
	if r.outcome != bound || api.attempts["p"] != 3 {
		t.Fatalf("outcome %v after %d attempts, want bound after 3", r.outcome, api.attempts["p"])
	}
}

func TestConflictTakesTheAPIsWord(t *testing.T) {
	api := &fakeAPI{
		bind: func(name string, _ int) error {
			return apierrors.NewConflict(podsGR, name, errors.New("pod p is already assigned to node b"))
		},
		get: func(name string) (*corev1.Pod, error) { return boundPod(name, "b"), nil },
	}
	b := newFake(t, api)
	r := b.bind(context.Background(), req("p", "a"))
	if r.outcome != elsewhere || r.pod == nil || r.pod.Spec.NodeName != "b" {
		t.Fatalf("outcome %v, pod %+v: want elsewhere, on b", r.outcome, r.pod)
	}
	// Already bound where planned (our own earlier attempt landed): bound.
	api.get = func(name string) (*corev1.Pod, error) { return boundPod(name, "a"), nil }
	if r := b.bind(context.Background(), req("q", "a")); r.outcome != bound {
		t.Fatalf("outcome %v for a pod already bound where planned, want bound", r.outcome)
	}
}

func TestLostReplyIsNeverTakenAsFailure(t *testing.T) {
	refused := &connError{syscall.ECONNREFUSED}
	api := &fakeAPI{
		bind: func(string, int) error { return refused },
		get:  func(string) (*corev1.Pod, error) { return nil, refused },
	}
	b := newFake(t, api)
	if r := b.bind(context.Background(), req("p", "a")); r.outcome != uncertain {
		t.Fatalf("outcome %v with the API unreachable, want uncertain (kept assumed)", r.outcome)
	}
	// The reply was lost but the Binding landed.
	api.bind = func(string, int) error { return apierrors.NewTimeoutError("lost", 1) }
	api.get = func(name string) (*corev1.Pod, error) { return boundPod(name, "a"), nil }
	if r := b.bind(context.Background(), req("q", "a")); r.outcome != bound {
		t.Fatalf("outcome %v for a Binding that landed, want bound", r.outcome)
	}
	// The reply was lost and the Binding did not land: safe to forget.
	api.get = func(name string) (*corev1.Pod, error) { return boundPod(name, ""), nil }
	if r := b.bind(context.Background(), req("s", "a")); r.outcome != failed {
		t.Fatalf("outcome %v for a Binding that did not land, want failed", r.outcome)
	}
}

// connError is a connection error as the transport returns it.
type connError struct{ errno syscall.Errno }

func (e *connError) Error() string { return "dial tcp: " + e.errno.Error() }
func (e *connError) Unwrap() error { return e.errno }

// countingLimiter allows `allow` tokens, then refuses.
type countingLimiter struct {
	mu           sync.Mutex
	waits, allow int
}

func (l *countingLimiter) Wait(context.Context) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.waits++
	if l.waits > l.allow {
		return errors.New("rate limited")
	}
	return nil
}
func (l *countingLimiter) TryAccept() bool { return true }
func (l *countingLimiter) Accept()         {}
func (l *countingLimiter) Stop()           {}
func (l *countingLimiter) QPS() float32    { return 1 }

func victims(names ...string) []cache.Victim {
	var out []cache.Victim
	for _, n := range names {
		out = append(out, cache.Victim{Eviction: scheduler.Eviction{Pod: model.PodID("ns/" + n), Preemptor: "ns/serve", Kind: "preempt"},
			Pod: &model.Pod{ID: model.PodID("ns/" + n), UID: "uid-" + n}})
	}
	return out
}

func evictionClient(refuse string) (*fake.Clientset, *[]string) {
	client := fake.NewSimpleClientset()
	var evicted []string
	var mu sync.Mutex
	client.PrependReactor("create", "pods", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "eviction" {
			return false, nil, nil
		}
		name := a.(k8stesting.CreateAction).GetObject().(metav1.Object).GetName()
		if name == refuse {
			// What the API server answers when a PodDisruptionBudget forbids it.
			return true, nil, apierrors.NewTooManyRequests("Cannot evict pod as it would violate the pod's disruption budget.", 0)
		}
		mu.Lock()
		evicted = append(evicted, name)
		mu.Unlock()
		return true, nil, nil
	})
	client.PrependReactor("patch", "pods", func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, nil })
	return client, &evicted
}

func TestEvictorKeepsAVictimItsPDBProtects(t *testing.T) {
	client, evicted := evictionClient("v2")
	e := newEvictor(client, events.NewFakeRecorder(10), 100, 100)
	done, kept, err := e.evictFor(context.Background(), victims("v1", "v2"), func() bool { return true })
	if err == nil || len(kept) != 1 || kept[0].Pod.ID != "ns/v2" || len(done) != 1 || len(*evicted) != 1 {
		t.Fatalf("evicted %v, kept %v, err %v: want v1 evicted, v2 kept with the PDB's refusal", *evicted, kept, err)
	}
}

func TestEvictionsForOnePreemptorAreAllOrNone(t *testing.T) {
	client, evicted := evictionClient("")
	e := newEvictor(client, events.NewFakeRecorder(10), 100, 100)
	// The limiter allows only one of three: none is issued.
	e.limiter = &countingLimiter{allow: 1}
	_, kept, err := e.evictFor(context.Background(), victims("v1", "v2", "v3"), func() bool { return true })
	if err == nil || len(kept) != 3 || len(*evicted) != 0 {
		t.Fatalf("evicted %v, kept %d: want none issued when the rate limit stops the group", *evicted, len(kept))
	}
	// Every victim waits its turn at the limiter before any is issued.
	l := &countingLimiter{allow: 3}
	e.limiter = l
	if _, _, err := e.evictFor(context.Background(), victims("v1", "v2", "v3"), func() bool { return true }); err != nil || l.waits != 3 || len(*evicted) != 3 {
		t.Fatalf("waits %d, evicted %v, err %v: want 3 waits then 3 evictions", l.waits, *evicted, err)
	}
}

func TestEvictionsNoLongerNeededAreCancelled(t *testing.T) {
	client, evicted := evictionClient("")
	e := newEvictor(client, events.NewFakeRecorder(10), 100, 100)
	_, kept, err := e.evictFor(context.Background(), victims("v1", "v2"), func() bool { return false })
	if !errors.Is(err, errNotNeeded) || len(kept) != 2 || len(*evicted) != 0 {
		t.Fatalf("evicted %v, kept %d, err %v: want both cancelled", *evicted, len(kept), err)
	}
}

// A gang rolled back, and a member whose Binding failed, leave no volume decision
// behind: the selected-node annotations written before the Bindings are removed,
// so that the claims can follow the gang's next placement.
func TestRollbackUndoesVolumeDecisions(t *testing.T) {
	api := refusing("w2")
	b := newFake(t, api)
	ctx := context.Background()
	var reqs []cache.BindRequest
	for _, name := range []string{"w1", "w2", "w3"} {
		r := req(name, "a")
		r.Node = &model.Node{Name: "a"}
		r.Pod.Constraints = &model.Constraints{Volumes: &model.VolumeNeeds{Delayed: []model.DelayedClaim{{Claim: name + "-data", Provisioner: "csi.example.com"}}}}
		reqs = append(reqs, r)
		claim := &corev1.PersistentVolumeClaim{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name + "-data"}}
		if _, err := b.client.CoreV1().PersistentVolumeClaims("ns").Create(ctx, claim, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	results, err := b.bindGang(ctx, reqs, 3)
	if err == nil {
		t.Fatal("a gang bound below its minimum returned no error")
	}
	if got := outcomes(results); got["ns/w1"] != rolledBack || got["ns/w2"] != failed {
		t.Fatalf("outcomes = %v", got)
	}
	for _, name := range []string{"w1", "w2", "w3"} {
		claim, err := b.client.CoreV1().PersistentVolumeClaims("ns").Get(ctx, name+"-data", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if node, ok := claim.Annotations["volume.kubernetes.io/selected-node"]; ok {
			t.Errorf("claim %s keeps selected node %q after its gang was rolled back", claim.Name, node)
		}
	}
}

// A gang's members start binding as slots free, not once all of its slots are free:
// with one slot of eight free, the first member of a gang of three is posted at
// once, and the gang completes as the other slots free. When a gang waited for all
// its slots together, nothing was posted until three were free.
func TestGangMembersTakeSlotsAsTheyFree(t *testing.T) {
	posted := make(chan string, 3)
	b := newFake(t, &fakeAPI{bind: func(name string, _ int) error {
		posted <- name
		return nil
	}})
	if err := b.slots.Acquire(context.Background(), 7); err != nil {
		t.Fatal(err)
	}
	done := make(chan []result, 1)
	go func() {
		results, _ := b.bindGang(context.Background(), []cache.BindRequest{req("w1", "a"), req("w2", "a"), req("w3", "a")}, 3)
		done <- results
	}()
	select {
	case <-posted:
	case <-time.After(10 * time.Second):
		t.Fatal("no member was posted with a slot free: the gang waited for all of its slots at once")
	}
	b.slots.Release(7)
	select {
	case results := <-done:
		for _, r := range results {
			if r.outcome != bound {
				t.Fatalf("%s: outcome %v, want bound", r.req.Pod.ID, r.outcome)
			}
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the gang was not bound once the slots freed")
	}
}

// Gangs take slots in turn: with every slot taken, a gang of three and then a gang
// of two wait; one slot, freed, passes from member to member as each Binding is
// answered, and goes to all of the first gang's members before the second's.
// Without the turn, the second gang's first member queued for a slot between the
// first gang's members.
func TestGangsTakeSlotsInTurn(t *testing.T) {
	var mu sync.Mutex
	var order []string
	b := newFake(t, &fakeAPI{bind: func(name string, _ int) error {
		mu.Lock()
		order = append(order, name)
		mu.Unlock()
		return nil
	}})
	if err := b.slots.Acquire(context.Background(), 8); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	gang := func(names ...string) {
		var reqs []cache.BindRequest
		for _, n := range names {
			reqs = append(reqs, req(n, "n"))
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			b.bindGang(context.Background(), reqs, len(reqs))
		}()
		time.Sleep(20 * time.Millisecond) // waiting for a slot, or for its turn
	}
	gang("a1", "a2", "a3")
	gang("b1", "b2")
	b.slots.Release(1)
	wg.Wait()
	if got := strings.Join(order, " "); got != "a1 a2 a3 b1 b2" {
		t.Fatalf("posted %s, want a1 a2 a3 b1 b2: the gangs' members interleaved", got)
	}
}

// A batch can reach the binder empty (its pods gone or bound by the time the cycle
// committed): it binds nothing and returns nothing, rather than index a member it
// does not have.
func TestEmptyBatchBindsNothing(t *testing.T) {
	b := newFake(t, &fakeAPI{bind: func(name string, _ int) error {
		t.Errorf("posted %s from an empty batch", name)
		return nil
	}})
	results, err := b.bindGang(context.Background(), nil, 0)
	if len(results) != 0 || err != nil {
		t.Fatalf("an empty batch gave %v, %v; want nothing", results, err)
	}
}
