package dispatch

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/events"
	"k8s.io/client-go/util/flowcontrol"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
)

// Kube-scheduler's client settings (its componentconfig's ClientConnection
// defaults), which its Events are written under: a client of their own, so that a
// burst of Events never takes the binds' share of the API.
const (
	EventQPS   = 50
	EventBurst = 100
	// EventQueue bounds the Events waiting for their turn at EventQPS: 200 s of
	// them, about 2 MB. An Event that finds it full is dropped and counted.
	EventQueue = 10000
	// EventBusyQPS is the Events' rate while binds are under way (a batch bound in
	// the last BindQuiet): Events yield to the binds they report, which share the
	// API server with them, and catch up at EventQPS when the binds pause.
	EventBusyQPS = 5
	BindQuiet    = time.Second
)

// ReasonScheduled and ActionBinding are what kube-scheduler writes on a bind.
const (
	ReasonScheduled = "Scheduled"
	ActionBinding   = "Binding"
)

// The actions of the scheduler's other Events (events.k8s.io requires one): why a
// pod waits (FailedScheduling, GangIncomplete, GPUShareConflict) is "Scheduling" and
// a preemption victim's Event "Preempting", as kube-scheduler writes them; a gang
// below its minimum is "Evicting".
const (
	ActionScheduling = "Scheduling"
	ActionPreempting = "Preempting"
	ActionEvicting   = "Evicting"
)

// NoteLimit is the most bytes of an events.k8s.io Event's note the API server
// accepts (its validation's NoteLengthLimit); a longer note is cut (truncateNote).
const NoteLimit = 1024

// truncateNote cuts a note to NoteLimit bytes, ending " ..." (kube-scheduler's
// truncateMessage), on a rune boundary: the API server refuses a longer note, and
// client-go drops a refused Event. The pod's condition keeps the whole message.
func truncateNote(note string) string {
	if len(note) <= NoteLimit {
		return note
	}
	const suffix = " ..."
	cut := NoteLimit - len(suffix)
	for cut > 0 && !utf8.RuneStart(note[cut]) {
		cut--
	}
	return note[:cut] + suffix
}

// NewEventBroadcaster is kube-scheduler's Event pipeline (cmd/kube-scheduler
// options.Config): an events.k8s.io broadcaster (client-go tools/events) over a
// client of its own at EventQPS and EventBurst, for all the scheduler's Events. The
// caller starts it (StartRecordingToSink) and shuts it down.
//
// How it writes (client-go v0.37 event_broadcaster.go): each Event is written in a
// goroutine of its own, waiting for the client's rate limiter, so that one slow
// write does not hold the others back. Events alike in type, reason, action,
// reporter and object (not note) fold into a series: the first is created; the
// second at once patches series.count to 2, keeping the first one's note; later
// ones only count in memory, written when the series ends (6 minutes without a
// repeat) or every 30 minutes. So a pod preempted twice reaches the API as one
// Event with series.count 2 as soon as the second happens (test/invariant's
// double-eviction check reads it so), and a pod's latest pending message is on its
// PodScheduled condition, the Event's note being its first. Each Event is
// remembered for 6 to 12 minutes (a map, per object and reason), then forgotten.
//
// The scheduler's core/v1 Events went through client-go's tools/record broadcaster
// before: one write per round trip, in order, and FailedScheduling reached the API
// a median 85 s late in the soak (docs/reliability.md, soak5 and soak6). Its
// correlator's LRU caches (4,096 objects each, per object, outliving it) also took
// 25 minutes of pod churn to fill and grew the heap as long: per-object state kept
// by an Event pipeline must be bounded by time or count, as this one's is by time.
func NewEventBroadcaster(ctx context.Context, cfg *rest.Config) (events.EventBroadcasterAdapter, error) {
	ec := rest.CopyConfig(cfg)
	ec.QPS, ec.Burst = EventQPS, EventBurst
	client, err := kubernetes.NewForConfig(ec)
	if err != nil {
		return nil, fmt.Errorf("events client: %w", err)
	}
	return events.NewEventBroadcasterAdapterWithContext(ctx, client), nil
}

// Events writes the Events of successful binds, as kube-scheduler does: a Normal
// "Scheduled" Event "Successfully assigned NS/POD to NODE" on every pod bound; and,
// when a gang with an object of its own (a PodGroup, a RayCluster) is bound whole,
// one Event on that object. A nil *Events writes nothing.
//
// Binds only queue their Events (bound, scheduled); one writer (Run) hands them to
// the recorder no faster than the Event client sends them. Client-go's tools/events
// broadcaster starts a goroutine per Event that then waits for the client's rate
// limiter, so a burst of 5,000 binds handed to it at once held about 4,750 goroutines
// and copies of their Events for 100 s. Here the backlog is a bounded queue of small
// values, and the broadcaster holds no more than a burst's worth. While binds are
// under way the writer slows to EventBusyQPS, so that the Events of a burst do not
// take the API server's time from the binds themselves (docs/benchmarks.md,
// scenario a); they are written when the binds pause.
type Events struct {
	recorder events.EventRecorder
	lookup   gang.Lookup
	queue    chan event
	limiter  flowcontrol.RateLimiter
	dropped  func()
	// lastBind is when a batch was last bound (Unix ns); lastWrite, the writer's
	// last Event.
	lastBind  atomic.Int64
	lastWrite time.Time
}

// event is one queued Event: its object and its message.
type event struct {
	regarding runtime.Object
	note      string
}

// NewEvents writes through recorder (NewEventBroadcaster's NewRecorder with the
// scheduler's name) once Run is started; lookup finds gangs' objects (nil: no gang
// Events); dropped, when not nil, counts an Event dropped because the queue was full.
func NewEvents(recorder events.EventRecorder, lookup gang.Lookup, dropped func()) *Events {
	return &Events{
		recorder: recorder, lookup: lookup, dropped: dropped,
		queue:   make(chan event, EventQueue),
		limiter: flowcontrol.NewTokenBucketRateLimiter(EventQPS, EventBurst),
	}
}

// Run hands the queued Events to the recorder until ctx ends: at most EventQPS a
// second after a burst of EventBurst (the Event client's own limits, so that the
// broadcaster's goroutines do not wait on the client), and EventBusyQPS while binds
// are under way.
func (e *Events) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-e.queue:
			if !e.pace(ctx) {
				return
			}
			e.write(ev)
		}
	}
}

// pace waits for the next Event's turn; false when ctx ended first.
func (e *Events) pace(ctx context.Context) bool {
	for {
		wait := e.busyWait(time.Now())
		if wait <= 0 {
			break
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return false
		case <-t.C:
		}
	}
	if e.limiter.Wait(ctx) != nil {
		return false
	}
	e.lastWrite = time.Now()
	return true
}

// busyWait is how much longer the next Event waits at now to keep to EventBusyQPS
// while binds are under way; 0 once none was bound for BindQuiet.
func (e *Events) busyWait(now time.Time) time.Duration {
	if now.Sub(time.Unix(0, e.lastBind.Load())) >= BindQuiet {
		return 0
	}
	return e.lastWrite.Add(time.Second / EventBusyQPS).Sub(now)
}

func (e *Events) write(ev event) {
	e.recorder.Eventf(ev.regarding, nil, corev1.EventTypeNormal, ReasonScheduled, ActionBinding, "%s", ev.note)
}

// add queues one Event, or drops and counts it when the queue is full.
func (e *Events) add(regarding runtime.Object, note string) {
	select {
	case e.queue <- event{regarding: regarding, note: note}:
	default:
		if e.dropped != nil {
			e.dropped()
		}
	}
}

// bound queues the Events of one batch's binds: one per pod bound where planned,
// and the gang's when every request of the batch was.
func (e *Events) bound(b cache.Batch, results []result) {
	if e == nil {
		return
	}
	e.lastBind.Store(time.Now().UnixNano())
	var nodes []string
	n := 0
	for _, res := range results {
		if res.outcome != bound {
			continue
		}
		e.scheduled(res.req)
		n++
		if !slices.Contains(nodes, res.req.Placement.Node) {
			nodes = append(nodes, res.req.Placement.Node)
		}
	}
	if n == 0 || n < len(b.Reqs) {
		return
	}
	if obj := e.gangObject(b.Gang); obj != nil {
		slices.Sort(nodes)
		e.add(obj, fmt.Sprintf("Successfully assigned %s to %s", pods(n), strings.Join(nodes, ", ")))
	}
}

// scheduled queues one pod's Event.
func (e *Events) scheduled(req cache.BindRequest) {
	if e == nil {
		return
	}
	ns, name := splitID(req.Pod.ID)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, UID: types.UID(req.Pod.UID)}}
	e.add(pod, fmt.Sprintf("Successfully assigned %v/%v to %v", ns, name, req.Placement.Node))
}

func pods(n int) string {
	if n == 1 {
		return "1 pod"
	}
	return fmt.Sprintf("%d pods", n)
}

// gangObject is the object a gang's Event is about: its PodGroup or RayCluster,
// as the lookup has it (with its UID, so that kubectl describe shows the Event);
// nil for a lone pod, an ad-hoc gang or an object not seen.
func (e *Events) gangObject(g model.GangID) runtime.Object {
	if e.lookup == nil {
		return nil
	}
	kind, key, ok := strings.Cut(string(g), ":")
	if !ok {
		return nil
	}
	ns, name, _ := strings.Cut(key, "/")
	ref := &metav1.PartialObjectMetadata{}
	switch kind {
	case "podgroup":
		pg := e.lookup.PodGroup(ns, name)
		if pg == nil {
			return nil
		}
		ref.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name, UID: pg.UID}
		ref.TypeMeta = metav1.TypeMeta{APIVersion: schedulingv1alpha1.SchemeGroupVersion.String(), Kind: "PodGroup"}
	case "ray":
		rc := e.lookup.RayCluster(ns, name)
		if rc == nil {
			return nil
		}
		ref.ObjectMeta = metav1.ObjectMeta{Namespace: ns, Name: name, UID: rc.UID}
		ref.TypeMeta = metav1.TypeMeta{APIVersion: rayv1.GroupVersion.String(), Kind: "RayCluster"}
	default:
		return nil
	}
	return ref
}
