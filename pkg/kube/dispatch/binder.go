package dispatch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/semaphore"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/util/retry"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/podspec/volumebind"
)

// outcome is what is known of one pod's binding after the binder is done with it.
type outcome int

const (
	// bound: the pod is bound where the plan put it.
	bound outcome = iota
	// failed: the pod is certainly not bound; its assumption may be forgotten.
	failed
	// elsewhere: the pod is bound, but not where the plan put it (someone else bound
	// it first); the cache must take the API's word at once.
	elsewhere
	// uncertain: the reply was lost and the API could not be asked since: the pod
	// may be bound. It stays assumed on its node until the API says.
	uncertain
)

// result is one pod's outcome; pod is the API's pod when it was read (elsewhere).
type result struct {
	req     cache.BindRequest
	outcome outcome
	err     error
	pod     *corev1.Pod
	// volumes are the volume decisions written before the Binding (bindVolumes).
	volumes []volumebind.VolumeAction
}

// binder issues pods/binding calls, at most `workers` at once: the API server handles
// them in parallel, and one cycle's binds would otherwise queue behind each other's
// round trips. Gangs take slots first come, first served, each taking its members'
// slots before the next gang takes any (bindAll), so gangs are bound one after
// another, each in about one round trip, rather than interleaved member by member.
type binder struct {
	client  kubernetes.Interface
	workers int
	slots   *semaphore.Weighted
	// backoff is the retry of one Binding after an error worth retrying, and of the
	// GET that settles a lost reply.
	backoff retryBackoff
	// inFlight counts the pods between taking a slot and their result: what the
	// cycle log reports, to tell whether the pipeline ran dry between cycles.
	inFlight atomic.Int64
	// pool runs the batches (Runner.startBind) and the members of a gang but its
	// last (bindAll): at most workers of each at once, so at most twice that wait
	// for work.
	pool *workerPool
	// turn lets one gang at a time take slots (bindAll).
	turn sync.Mutex
}

func newBinder(client kubernetes.Interface, workers int) *binder {
	return &binder{client: client, workers: workers, slots: semaphore.NewWeighted(int64(workers)), backoff: retry.DefaultBackoff,
		pool: newWorkerPool(2 * workers)}
}

// bind allocates the pod's claims and posts its Binding, retrying errors that say
// nothing happened (throttling, a server timeout before the write), then settles an
// answer that does not say whether the pod is bound. The GPUs the pod got travel as
// an annotation of the Binding, which the API server copies onto the pod together
// with spec.nodeName.
func (b *binder) bind(ctx context.Context, r cache.BindRequest) result {
	var err error
	switch {
	case r.Structured:
		err = dra.Write(ctx, b.client, r.Pod, r.Claims, r.Allocations)
	case len(r.Claims) > 0:
		err = dra.Allocate(ctx, b.client, r.Pod, r.Claims, r.Placement.Node, r.Placement.GPUs)
	}
	var volumes []volumebind.VolumeAction
	if err == nil {
		volumes, err = b.bindVolumes(ctx, r)
	}
	if err != nil {
		b.undoVolumes(ctx, r, volumes)
		return result{req: r, outcome: failed, err: err}
	}
	res := b.postBinding(ctx, r)
	res.volumes = volumes
	if res.outcome == failed || res.outcome == elsewhere {
		b.undoVolumes(ctx, r, volumes)
	}
	return res
}

// postBinding posts the pod's Binding, retrying errors that say nothing was written,
// and settles an answer that does not say whether the pod is bound.
func (b *binder) postBinding(ctx context.Context, r cache.BindRequest) result {
	ns, name := splitID(r.Pod.ID)
	binding := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(r.Pod.UID)},
		Target:     corev1.ObjectReference{Kind: "Node", Name: r.Placement.Node},
	}
	if len(r.Placement.GPUs) > 0 {
		binding.Annotations = map[string]string{names.AnnotationGPUs: cache.FormatGPUs(r.Placement.GPUs)}
	}
	err := retry.OnError(b.backoff, retriable, func() error {
		return b.client.CoreV1().Pods(ns).Bind(ctx, binding, metav1.CreateOptions{})
	})
	switch {
	case err == nil:
		return result{req: r, outcome: bound}
	case apierrors.IsConflict(err), lostReply(err):
		// "already assigned", or no answer at all: ask the API where the pod is.
		return b.settle(ctx, r, err)
	default:
		return result{req: r, outcome: failed, err: fmt.Errorf("bind %s to %s: %w", r.Pod.ID, r.Placement.Node, err)}
	}
}

// bindVolumes writes the pod's volume decisions on its node before the Binding, as
// kube-scheduler's volume binder does: an available volume is bound to each
// WaitForFirstConsumer claim, or the claim is marked to be provisioned there.
// It returns the actions planned, to be undone if the pod ends up not bound.
func (b *binder) bindVolumes(ctx context.Context, r cache.BindRequest) ([]volumebind.VolumeAction, error) {
	if r.Pod.Constraints == nil || r.Pod.Constraints.Volumes == nil || len(r.Pod.Constraints.Volumes.Delayed) == 0 {
		return nil, nil
	}
	if r.Node == nil {
		return nil, fmt.Errorf("bind %s: node %s is gone; its volumes cannot be bound", r.Pod.ID, r.Placement.Node)
	}
	actions, err := volumebind.Plan(r.Pod, r.Placement, r.Node)
	if err != nil {
		return nil, err
	}
	return actions, volumebind.Apply(ctx, b.client, actions)
}

// undoVolumes takes back the volume decisions of a pod that is not bound where
// they were made (volumebind.Undo); what cannot be undone is logged, and is safe.
func (b *binder) undoVolumes(ctx context.Context, r cache.BindRequest, actions []volumebind.VolumeAction) {
	if len(actions) == 0 {
		return
	}
	if err := volumebind.Undo(ctx, b.client, actions); err != nil {
		klog.ErrorS(err, "Undo volume decisions of a pod not bound", "pod", r.Pod.ID, "node", r.Placement.Node)
	}
}

// settle asks the API where a pod is after a Binding whose answer did not say: bound
// where planned, elsewhere, not bound, or (the API unreachable still) uncertain.
func (b *binder) settle(ctx context.Context, r cache.BindRequest, bindErr error) result {
	ns, name := splitID(r.Pod.ID)
	var pod *corev1.Pod
	err := retry.OnError(b.backoff, func(err error) bool { return lostReply(err) || retriable(err) }, func() error {
		var err error
		pod, err = b.client.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err
	})
	return settled(r, pod, err, bindErr)
}

// settled turns the answer to settle's GET into an outcome.
func settled(r cache.BindRequest, pod *corev1.Pod, getErr, bindErr error) result {
	switch {
	case apierrors.IsNotFound(getErr) || (getErr == nil && string(pod.UID) != r.Pod.UID && r.Pod.UID != ""):
		return result{req: r, outcome: failed, err: fmt.Errorf("bind %s: the pod is gone: %w", r.Pod.ID, bindErr)}
	case getErr != nil:
		return result{req: r, outcome: uncertain, err: fmt.Errorf("bind %s to %s: no answer, and the pod cannot be read (%v): %w", r.Pod.ID, r.Placement.Node, getErr, bindErr)}
	case pod.Spec.NodeName == r.Placement.Node:
		return result{req: r, outcome: bound, pod: pod}
	case pod.Spec.NodeName != "":
		return result{req: r, outcome: elsewhere, pod: pod, err: fmt.Errorf("bind %s to %s: already bound to %s", r.Pod.ID, r.Placement.Node, pod.Spec.NodeName)}
	default:
		return result{req: r, outcome: failed, pod: pod, err: fmt.Errorf("bind %s to %s: %w", r.Pod.ID, r.Placement.Node, bindErr)}
	}
}

// retriable errors say the Binding was not written: retrying it is safe.
func retriable(err error) bool {
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsServiceUnavailable(err)
}

// lostReply reports an error after which the Binding may or may not have been
// written: a timeout, a connection closed or refused, an internal error.
func lostReply(err error) bool {
	var netErr net.Error
	return apierrors.IsTimeout(err) || apierrors.IsInternalError(err) || utilnet.IsConnectionReset(err) ||
		utilnet.IsConnectionRefused(err) || utilnet.IsProbableEOF(err) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &netErr) && netErr.Timeout())
}

// unreachable reports an error that says the API server cannot be reached at all.
func unreachable(err error) bool {
	var netErr net.Error
	return utilnet.IsConnectionRefused(err) || utilnet.IsConnectionReset(err) || utilnet.IsProbableEOF(err) ||
		apierrors.IsServiceUnavailable(err) || (errors.As(err, &netErr) && netErr.Timeout())
}

// bindAll binds a gang's batch in parallel and returns one result per request. It
// waits for all of them.
//
// Gangs take slots in turn (turn), and a gang's members one by one, each starting
// its Binding as soon as it has a slot. A gang that waited for all its slots at once
// left the slots freed meanwhile idle: in a drain of gangs of 8 the binds in flight
// averaged 26 of 32 at each cycle's start, against 30 for single pods (session 17).
// Taking them in turn still binds gangs one after another rather than interleaving
// their members. A gang larger than the slots takes back those its first members
// free.
func (b *binder) bindAll(ctx context.Context, reqs []cache.BindRequest) []result {
	if len(reqs) == 0 {
		return nil // a batch whose pods were all gone or bound by commit time
	}
	out := make([]result, len(reqs))
	one := func(i int) {
		defer b.slots.Release(1)
		b.inFlight.Add(1)
		defer b.inFlight.Add(-1)
		out[i] = b.bind(ctx, reqs[i])
	}
	last := len(reqs) - 1
	var wg sync.WaitGroup
	b.turn.Lock()
	for i := range reqs {
		if err := b.slots.Acquire(ctx, 1); err != nil {
			b.turn.Unlock()
			for j := i; j < len(reqs); j++ {
				out[j] = result{req: reqs[j], outcome: failed, err: err}
			}
			wg.Wait()
			return out
		}
		if i == last {
			break
		}
		// Every member but the last binds on a worker of the pool, the last on
		// this goroutine: a single pod, the most common batch, hands nothing.
		wg.Add(1)
		b.pool.run(ctx, func() {
			defer wg.Done()
			one(i)
		})
	}
	b.turn.Unlock()
	one(last)
	wg.Wait()
	return out
}

// bindGang binds a gang all-or-nothing as far as the API allows: a Binding cannot be
// undone, so when fewer than minimum members end up bound where planned, the members
// bound are deleted (their controllers recreate them), so that the gang is never left
// running below its minimum. Members whose binding is uncertain are not counted as
// bound, and are not deleted: nobody knows yet where they are. It returns every
// pod's result and an error that says what went wrong, if anything did.
func (b *binder) bindGang(ctx context.Context, reqs []cache.BindRequest, minimum int) ([]result, error) {
	results := b.bindAll(ctx, reqs)
	var ok []result
	var firstErr error
	for _, r := range results {
		if r.outcome == bound {
			ok = append(ok, r)
		} else if firstErr == nil {
			firstErr = r.err
		}
	}
	if firstErr == nil || len(reqs) == 1 || len(ok) >= minimum {
		// Above the minimum the gang runs; the failed members go back to pending.
		return results, firstErr
	}
	for i, r := range results {
		if r.outcome != bound {
			continue
		}
		ns, name := splitID(r.req.Pod.ID)
		grace := int64(0)
		uid := types.UID(r.req.Pod.UID)
		err := b.client.CoreV1().Pods(ns).Delete(ctx, name, metav1.DeleteOptions{GracePeriodSeconds: &grace, Preconditions: &metav1.Preconditions{UID: &uid}})
		if err != nil && !apierrors.IsNotFound(err) {
			klog.ErrorS(err, "Roll back partly bound gang", "pod", r.req.Pod.ID)
			continue
		}
		// Deleted: it holds its node until the informer says it is gone. Its volume
		// decisions go with it, so that they do not pin the gang's next placement.
		results[i].outcome = rolledBack
		b.undoVolumes(ctx, r.req, r.volumes)
	}
	return results, fmt.Errorf("gang bound only %d of its minimum %d; rolled back: %w", len(ok), minimum, firstErr)
}

// rolledBack: the pod was bound and then deleted to roll its gang back; it holds
// its node until the informer shows it gone.
const rolledBack outcome = uncertain + 1

// retryBackoff is client-go's retry.DefaultBackoff's type.
type retryBackoff = wait.Backoff

// splitID splits "namespace/name".
func splitID(id model.PodID) (string, string) {
	if ns, name, ok := strings.Cut(string(id), "/"); ok {
		return ns, name
	}
	return "", string(id)
}
