package dispatch

import (
	"context"
	"encoding/json"
	"hash/fnv"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/model"
)

// statusWriter patches PodScheduled conditions and records Events off the cycle's
// path, through a small pool of workers. Each pod's writes go through one lane, in
// the order the cycles made them: with one shared queue, two workers could write a
// pod's old reason after its new one, and the old one stayed, as the runner writes a
// reason only when it changes (TestSchedulingGatesHoldTheGang failed so in .ci/run).
type statusWriter struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	lanes    []chan func()
}

// newStatusWriter starts workers lanes, each with its worker; with 0 there is one
// lane and no worker (tests run its jobs).
func newStatusWriter(client kubernetes.Interface, recorder record.EventRecorder, workers int) *statusWriter {
	s := &statusWriter{client: client, recorder: recorder}
	for i := 0; i < max(workers, 1); i++ {
		s.lanes = append(s.lanes, make(chan func(), 1024))
	}
	for i := 0; i < workers; i++ {
		go func(jobs chan func()) {
			for j := range jobs {
				j()
			}
		}(s.lanes[i])
	}
	return s
}

// lane is the queue of one pod's writes.
func (s *statusWriter) lane(id model.PodID) chan func() {
	h := fnv.New32a()
	h.Write([]byte(id))
	return s.lanes[h.Sum32()%uint32(len(s.lanes))]
}

// pending sets PodScheduled=False with reason and message on a pod and records a
// Warning Event (reason eventReason), off the cycle's path. failed, if set, is called
// when the condition was not written (refused, or dropped with the queue full).
func (s *statusWriter) pending(ctx context.Context, p *model.Pod, reason, eventReason, message string, failed func()) {
	job := func() {
		ns, name := splitID(p.ID)
		cond := corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: message,
			LastTransitionTime: metav1.Now(),
		}
		if err := patchPodCondition(ctx, s.client, ns, name, cond); err != nil {
			klog.V(2).InfoS("Write pending reason", "pod", p.ID, "err", err)
			if failed != nil {
				failed()
			}
		}
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: types.UID(p.UID)}
		s.recorder.Event(ref, corev1.EventTypeWarning, eventReason, message)
	}
	select {
	case s.lane(p.ID) <- job:
	default:
		// Status is advisory; never block a cycle on it.
		if failed != nil {
			failed()
		}
	}
}

// event records an Event on a pod off the cycle's path.
func (s *statusWriter) event(p *model.Pod, eventType, reason, message string) {
	ns, name := splitID(p.ID)
	ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: types.UID(p.UID)}
	select {
	case s.lane(p.ID) <- func() { s.recorder.Event(ref, eventType, reason, message) }:
	default:
	}
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
