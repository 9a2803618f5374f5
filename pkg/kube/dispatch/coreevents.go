package dispatch

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
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
	b.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: client.CoreV1().Events("")})
	return b.NewRecorder(scheme.Scheme, corev1.EventSource{Component: component}), b.Shutdown, nil
}

// newCoreBroadcaster is client-go's core Event broadcaster with its correlator's
// caches bounded at CoreEventCache objects.
func newCoreBroadcaster(ctx context.Context, clk clock.PassiveClock) record.EventBroadcaster {
	return record.NewBroadcaster(record.WithContext(ctx),
		record.WithCorrelatorOptions(record.CorrelatorOptions{LRUCacheSize: CoreEventCache, Clock: clk}))
}
