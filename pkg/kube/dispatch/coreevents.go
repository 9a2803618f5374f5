package dispatch

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"
	"k8s.io/utils/clock"
)

// CoreEventWorkers write core Events at once, each from a queue of
// CoreEventWorkerQueue (all full: about 4 MB of Events, then new ones are dropped).
// Client-go's core broadcaster writes one Event at a time and waits for each
// round trip: in the soak (load 23) it fell 85 s behind within 4 minutes, its
// own queue of 1,000 full and dropping.
const (
	CoreEventWorkers     = 8
	CoreEventWorkerQueue = 256
	// coreEventTries and coreEventRetryWait are client-go's broadcaster's: a write
	// the API server could not take is tried 12 times, 10 s apart.
	coreEventTries     = 12
	coreEventRetryWait = 10 * time.Second
)

// CoreEventCache is how many objects client-go's core Event correlator remembers in
// each of its three LRU caches (spam filter, aggregator, deduplicating logger).
// Client-go's default, 4,096, is per-object state that outlives the object: in the
// soak (about 170 pods created a minute) the caches took about 25 minutes to fill
// with deleted pods, and the scheduler's live heap grew with them for as long (3 MiB
// of a 19 MiB live heap by minute 11, still rising). The scheduler already writes an
// Event only when a pod's reason changes (statusWriter), so the correlator's
// throttling matters only for objects evented recently; 1,024 keeps that and
// bounds the caches at a quarter, full within minutes.
const CoreEventCache = 1024

// StartCoreEvents starts the writer of the scheduler's core/v1 Events (pending
// reasons, preemptions) and returns its recorder and its shutdown. The Events are
// written over a client of their own at EventQPS and EventBurst: over the
// scheduler's client they waited behind its pod-status patches (2,000-3,300 a
// minute in the soak, at the client's 50 QPS) and reached the API minutes late.
func StartCoreEvents(ctx context.Context, cfg *rest.Config, component string) (record.EventRecorder, func(), error) {
	ec := rest.CopyConfig(cfg)
	ec.QPS, ec.Burst = EventQPS, EventBurst
	client, err := kubernetes.NewForConfig(ec)
	if err != nil {
		return nil, nil, fmt.Errorf("core events client: %w", err)
	}
	b := newCoreBroadcaster(ctx, clock.RealClock{})
	b.StartRecordingToSink(newParallelSink(ctx, &typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")}, CoreEventWorkers))
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}), b.Shutdown, nil
}

// newCoreBroadcaster is client-go's core Event broadcaster with its correlator's
// caches bounded at CoreEventCache objects.
func newCoreBroadcaster(ctx context.Context, clk clock.PassiveClock) record.EventBroadcaster {
	return record.NewBroadcaster(record.WithContext(ctx),
		record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: CoreEventCache, Clock: clk}))
}

// parallelSink hands each write to one of its workers and returns at once, so that
// the broadcaster's one writer only correlates. An Event's writes (its Create, then
// the Patches that count its repeats) go to the worker its name picks, in order; a
// Patch that finds the Event gone creates it, as client-go does. The correlator
// keeps the returned Event, which carries the name client-go gave it: Patches need
// nothing else.
type parallelSink struct {
	inner     record.EventSink
	queues    []chan sinkWrite
	retryWait time.Duration
}

type sinkWrite struct {
	event *corev1.Event
	patch []byte // nil: a Create
}

func newParallelSink(ctx context.Context, inner record.EventSink, workers int) *parallelSink {
	s := &parallelSink{inner: inner, queues: make([]chan sinkWrite, workers), retryWait: coreEventRetryWait}
	for i := range s.queues {
		s.queues[i] = make(chan sinkWrite, CoreEventWorkerQueue)
		go s.work(ctx, s.queues[i])
	}
	return s
}

func (s *parallelSink) worker(name string) int {
	h := fnv.New32a()
	_, _ = h.Write([]byte(name))
	return int(h.Sum32() % uint32(len(s.queues)))
}

func (s *parallelSink) enqueue(e *corev1.Event, patch []byte) (*corev1.Event, error) {
	w := sinkWrite{event: e.DeepCopy(), patch: patch}
	select {
	case s.queues[s.worker(e.Name)] <- w:
	default:
		klog.V(2).InfoS("Event dropped: its writer is behind", "object", klog.KRef(e.InvolvedObject.Namespace, e.InvolvedObject.Name), "reason", e.Reason)
	}
	return e, nil
}

func (s *parallelSink) Create(e *corev1.Event) (*corev1.Event, error) { return s.enqueue(e, nil) }

func (s *parallelSink) Patch(e *corev1.Event, data []byte) (*corev1.Event, error) {
	return s.enqueue(e, data)
}

// Update is not called by client-go's broadcaster; it writes through.
func (s *parallelSink) Update(e *corev1.Event) (*corev1.Event, error) { return s.inner.Update(e) }

func (s *parallelSink) work(ctx context.Context, q chan sinkWrite) {
	for {
		select {
		case <-ctx.Done():
			return
		case w := <-q:
			s.writeRetrying(ctx, w)
		}
	}
}

// writeRetrying writes w, and again after retryWait while the API server did not
// take it for want of time or availability (no answer, 429, 5xx), up to
// coreEventTries times, as client-go's broadcaster does: an Event is not lost to an
// API server restart. The worker's later Events wait meanwhile.
func (s *parallelSink) writeRetrying(ctx context.Context, w sinkWrite) {
	for try := 1; ; try++ {
		err := s.write(w)
		if err == nil || apierrors.IsAlreadyExists(err) {
			return
		}
		if !retryable(err) || try == coreEventTries {
			klog.V(2).InfoS("Event not written", "object", klog.KRef(w.event.InvolvedObject.Namespace, w.event.InvolvedObject.Name), "reason", w.event.Reason, "tries", try, "err", err)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(s.retryWait):
		}
	}
}

func (s *parallelSink) write(w sinkWrite) error {
	var err error
	if w.patch != nil {
		_, err = s.inner.Patch(w.event, w.patch)
	}
	if w.patch == nil || apierrors.IsNotFound(err) {
		w.event.ResourceVersion = "" // enqueue copied it
		_, err = s.inner.Create(w.event)
	}
	return err
}

// retryable: the API server did not answer, or answered that it could not take the
// write now.
func retryable(err error) bool {
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		return true
	}
	return apierrors.IsTooManyRequests(err) || apierrors.IsServerTimeout(err) || apierrors.IsTimeout(err) ||
		apierrors.IsInternalError(err) || apierrors.IsServiceUnavailable(err)
}
