package dispatch

import (
	"context"
	"errors"
	"fmt"
	"sync"

	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// evictor evicts preemption victims through the Eviction API, so that
// PodDisruptionBudgets are respected, at a bounded rate. It is idempotent: a pod it
// has already asked to evict, or one already terminating, is not asked again, and a
// restarted scheduler sees terminating victims in the cache and does not evict anew.
type evictor struct {
	client   kubernetes.Interface
	recorder events.EventRecorder
	limiter  flowcontrol.RateLimiter
	// turn makes the preemptors take their tokens one group after another: waiting
	// token by token side by side, every group of a burst finished waiting at the
	// end of the burst, and the first preemptor waited as long as the last.
	turn sync.Mutex

	mu       sync.Mutex
	inFlight map[model.PodID]bool
}

func newEvictor(client kubernetes.Interface, recorder events.EventRecorder, qps float32, burst int) *evictor {
	return &evictor{
		client:   client,
		recorder: recorder,
		limiter:  flowcontrol.NewTokenBucketRateLimiter(qps, burst),
		inFlight: map[model.PodID]bool{},
	}
}

// evictFor evicts one preemptor's victims, all of them or none: it first waits for
// the rate limiter to allow every one of them, then asks needed whether the
// preemptor still needs them (it may have been bound elsewhere, or deleted, while
// the evictions waited their turn), and only then issues them all. It returns the
// victims evicted, and those not evicted (cancelled, or refused by the API server,
// a PodDisruptionBudget say) with the error.
func (e *evictor) evictFor(ctx context.Context, victims []cache.Victim, needed func() bool) (evicted, kept []cache.Victim, err error) {
	e.turn.Lock()
	for range victims {
		if err := e.limiter.Wait(ctx); err != nil {
			e.turn.Unlock()
			return nil, victims, err
		}
	}
	e.turn.Unlock()
	if !needed() {
		return nil, victims, errNotNeeded
	}
	errs := make([]error, len(victims))
	var wg sync.WaitGroup
	for i := range victims {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			errs[i] = e.evict(ctx, victims[i])
		}(i)
	}
	wg.Wait()
	for i, v := range victims {
		if errs[i] != nil {
			kept = append(kept, v)
		} else {
			evicted = append(evicted, v)
		}
	}
	return evicted, kept, errors.Join(errs...)
}

// errNotNeeded: the preemptor no longer needs its victims.
var errNotNeeded = errors.New("the preemptor no longer needs its victims")

// evict asks the API server to evict the victim and, once it is evicted, marks it
// with a DisruptionTarget condition and an Event that name the preemptor and the
// reason. The eviction goes first: a condition patch before it held every eviction
// back by one more round trip to the API server (issue 19), and a victim a
// PodDisruptionBudget keeps must not say it is being preempted. A refusal (a
// PodDisruptionBudget's 429) is returned so that a later cycle may choose again.
func (e *evictor) evict(ctx context.Context, v cache.Victim) error {
	victim := v.Pod
	e.mu.Lock()
	if e.inFlight[victim.ID] {
		e.mu.Unlock()
		return nil
	}
	e.inFlight[victim.ID] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.inFlight, victim.ID)
		e.mu.Unlock()
	}()
	ns, name := splitID(victim.ID)
	ev := &policyv1.Eviction{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}}
	if victim.UID != "" {
		uid := types.UID(victim.UID)
		ev.DeleteOptions = &metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}}
	}
	err := e.client.PolicyV1().Evictions(ns).Evict(ctx, ev)
	switch {
	case err == nil:
	case apierrors.IsNotFound(err), apierrors.IsConflict(err):
		return nil // gone already, or another pod of that name
	default:
		return fmt.Errorf("evict %s for %s: %w", victim.ID, v.Preemptor, err)
	}
	// The reason names the preemptor, the victim's gang and what is freed.
	message := v.Reason
	cond := corev1.PodCondition{
		Type:               corev1.DisruptionTarget,
		Status:             corev1.ConditionTrue,
		Reason:             names.ReasonPreemptionByScheduler,
		Message:            message,
		LastTransitionTime: metav1.Now(),
	}
	if err := patchPodCondition(ctx, e.client, ns, name, cond); err != nil && !apierrors.IsNotFound(err) {
		klog.ErrorS(err, "Mark preemption victim", "pod", victim.ID)
	}
	eventType, reason, action := corev1.EventTypeNormal, names.EventPreempted, ActionPreempting
	if v.Kind == cache.KindBelowMinimum {
		eventType, reason, action = corev1.EventTypeWarning, names.EventGangBelowMinimum, ActionEvicting
	}
	// Straight to the recorder (statusWriter says why); a second eviction of the
	// pod patches its Event's series.count to 2 at once (NewEventBroadcaster).
	e.recorder.Eventf(podRef(victim), nil, eventType, reason, action, "%s", truncateNote(message))
	return nil
}
