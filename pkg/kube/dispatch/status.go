package dispatch

import (
	"context"
	"encoding/json"
	"hash/fnv"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/model"
)

// statusWriter patches PodScheduled conditions and records Events off the cycle's
// path, through a small pool of workers. Each pod's writes go through one lane, so
// that they keep their order: with one shared queue, two workers could write a pod's
// old reason after its new one, and the old one stayed, as the runner writes a reason
// only when it changes (TestSchedulingGatesHoldTheGang failed so in .ci/run).
//
// A lane holds one entry per pod, and a pod's entry only its latest condition: a
// newer reason replaces one not written yet. Before, every reason was queued: in the
// soak, pending gangs' reasons changed every cycle (they name counts of nodes), the
// lanes ran minutes behind the cycles, and a new pod's first reason waited behind
// them; the invariant checker saw such pods without a reason for more than 2 minutes
// (LostPod). A pod now waits at most for one write of each pod ahead of it in its lane.
//
// Its Events go straight to the recorder (the events.k8s.io broadcaster), not
// through the Scheduled Events' queue (Events), which slows to EventBusyQPS while
// binds run: a pod's reason and a victim's Preempted matter most exactly then
// (users, the invariant checker), and they need no pacing of their own, as each
// follows a write already paced (the pod's condition patch, on the scheduler's
// client) or is written once per pod (GangIncomplete, GPUShareConflict).
type statusWriter struct {
	client   kubernetes.Interface
	recorder events.EventRecorder
	lanes    []*lane
}

// maxLaneEvents bounds the Events queued on a lane; more are dropped (Events are
// advisory, and the API server's own recorder drops them too when it falls behind).
const maxLaneEvents = 1024

// lane is the queue of the writes of the pods that hash to it, one entry per pod, in
// the order the pods' first writes were queued.
type lane struct {
	mu     sync.Mutex
	order  []model.PodID
	writes map[model.PodID]*podWrites
	events int
	wake   chan struct{}
}

// podWrites is what is queued for one pod: its latest condition (nil for none), with
// the call for when that write fails, and its Events in order.
type podWrites struct {
	cond   func() error
	failed func()
	events []func()
}

// newStatusWriter starts workers lanes, each with its worker; with 0 there is one
// lane and no worker (tests call drain).
func newStatusWriter(client kubernetes.Interface, recorder events.EventRecorder, workers int) *statusWriter {
	s := &statusWriter{client: client, recorder: recorder}
	for i := 0; i < max(workers, 1); i++ {
		s.lanes = append(s.lanes, &lane{writes: map[model.PodID]*podWrites{}, wake: make(chan struct{}, 1)})
	}
	for i := 0; i < workers; i++ {
		go func(l *lane) {
			for range l.wake {
				for l.runOne() {
				}
			}
		}(s.lanes[i])
	}
	return s
}

// lane is the lane of one pod's writes.
func (s *statusWriter) lane(id model.PodID) *lane {
	h := fnv.New32a()
	h.Write([]byte(id))
	return s.lanes[h.Sum32()%uint32(len(s.lanes))]
}

// add queues a condition write (cond, with failed) and/or an Event for pod id. A
// condition replaces the pod's queued one; the replaced write is not a failure (the
// newer one stands for it).
func (l *lane) add(id model.PodID, cond func() error, failed func(), event func()) {
	l.mu.Lock()
	w := l.writes[id]
	if w == nil {
		w = &podWrites{}
		l.writes[id] = w
		l.order = append(l.order, id)
	}
	if cond != nil {
		w.cond, w.failed = cond, failed
	}
	if event != nil && l.events < maxLaneEvents {
		w.events = append(w.events, event)
		l.events++
	}
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// runOne carries out the writes of the pod first in the lane: its condition, then
// its Events. It reports false when the lane was empty.
func (l *lane) runOne() bool {
	l.mu.Lock()
	if len(l.order) == 0 {
		l.order = nil // let a long backlog's array go
		l.mu.Unlock()
		return false
	}
	id := l.order[0]
	l.order = l.order[1:]
	w := l.writes[id]
	delete(l.writes, id)
	l.events -= len(w.events)
	l.mu.Unlock()
	if w.cond != nil {
		if err := w.cond(); err != nil {
			klog.V(2).InfoS("Write pending reason", "pod", id, "err", err)
			if w.failed != nil {
				w.failed()
			}
		}
	}
	for _, e := range w.events {
		e()
	}
	return true
}

// drain runs every queued write in the caller's goroutine (tests, with no workers).
func (s *statusWriter) drain() {
	for _, l := range s.lanes {
		for l.runOne() {
		}
	}
}

// queued counts the pods with a condition queued and the Events queued.
func (s *statusWriter) queued() (conds, events int) {
	for _, l := range s.lanes {
		l.mu.Lock()
		for _, w := range l.writes {
			if w.cond != nil {
				conds++
			}
		}
		events += l.events
		l.mu.Unlock()
	}
	return conds, events
}

// pending sets PodScheduled=False with reason and message on a pod and records a
// Warning Event (reason eventReason), off the cycle's path. failed, if set, is called
// when the condition could not be written.
func (s *statusWriter) pending(ctx context.Context, p *model.Pod, reason, eventReason, message string, failed func()) {
	ns, name := splitID(p.ID)
	cond := func() error {
		c := corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: message,
			LastTransitionTime: metav1.Now(),
		}
		return patchPodCondition(ctx, s.client, ns, name, c)
	}
	ref := podRef(p)
	note := truncateNote(message)
	s.lane(p.ID).add(p.ID, cond, failed, func() {
		s.recorder.Eventf(ref, nil, corev1.EventTypeWarning, eventReason, ActionScheduling, "%s", note)
	})
}

// event records an Event (action ActionScheduling) on a pod off the cycle's path.
func (s *statusWriter) event(p *model.Pod, eventType, reason, message string) {
	ref := podRef(p)
	note := truncateNote(message)
	s.lane(p.ID).add(p.ID, nil, nil, func() {
		s.recorder.Eventf(ref, nil, eventType, reason, ActionScheduling, "%s", note)
	})
}

// podRef is the reference an Event on p names: the pod by name and UID, so that an
// Event on an earlier pod of the same name is not folded into this one's.
func podRef(p *model.Pod) *corev1.ObjectReference {
	ns, name := splitID(p.ID)
	return &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: types.UID(p.UID)}
}

// patchPodCondition sets one condition on a pod's status (strategic merge by type).
func patchPodCondition(ctx context.Context, client kubernetes.Interface, ns, name string, cond corev1.PodCondition) error {
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"conditions": []corev1.PodCondition{cond}}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}

// patchNominatedNode sets status.nominatedNodeName ("" clears it).
func patchNominatedNode(ctx context.Context, client kubernetes.Interface, ns, name, node string) error {
	var v any = node
	if node == "" {
		v = nil
	}
	patch, err := json.Marshal(map[string]any{"status": map[string]any{"nominatedNodeName": v}})
	if err != nil {
		return err
	}
	_, err = client.CoreV1().Pods(ns).Patch(ctx, name, types.StrategicMergePatchType, patch, metav1.PatchOptions{}, "status")
	return err
}
