package main

import (
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/names"
)

func TestChargedQueue(t *testing.T) {
	pod := func(labels map[string]string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w0", Labels: labels}}
	}
	queues := map[string]queueState{"default": {found: true}, "team-a": {found: true}, "dept": {found: true, parent: true}}
	member := pod(map[string]string{names.LabelQueue: "team-a"})
	member.Name = "head"
	rayGang := &gang.Gang{ID: "raycluster:ml/llm", Source: gang.SourceRayCluster, Queue: "team-a",
		Members: []gang.Member{{Pod: member}}}
	ownerGang := &gang.Gang{ID: "raycluster:ml/llm", Source: gang.SourceRayCluster, Queue: "team-a", Owner: "RayService/llm"}
	for _, c := range []struct {
		name         string
		pod          *corev1.Pod
		gang         *gang.Gang
		defaultQueue string
		queues       map[string]queueState
		queue, why   string
	}{
		{"the pod's label", pod(map[string]string{names.LabelQueue: "team-a"}), nil, "default", queues, "team-a", "label gantry.dev/queue on the pod"},
		{"KAI's label", pod(map[string]string{names.LabelQueueKAI: "team-a"}), nil, "default", queues, "team-a", "kai.scheduler/queue on the pod (KAI's"},
		{"another member's label", pod(nil), rayGang, "default", queues, "team-a", "label gantry.dev/queue on head, a member of its gang"},
		{"the owner's label", pod(nil), ownerGang, "default", queues, "team-a", "on RayService/llm, the owner"},
		{"no label: the default queue", pod(nil), nil, "default", queues, "default", "the scheduler's default queue"},
		{"no label and no default queue", pod(nil), nil, "gpu-pool", queues, "gpu-pool", "queue gpu-pool does not exist, so the pod waits (QueueNotFound)"},
		{"no Queue in the cluster", pod(map[string]string{names.LabelQueue: "team-x"}), nil, "default", map[string]queueState{}, "team-x", "no Queue exists in the cluster, so no quota or limit applies"},
		{"a queue that does not exist", pod(map[string]string{names.LabelQueue: "team-x"}), nil, "default", queues, "team-x", "queue team-x does not exist, so the pod waits (QueueNotFound)"},
		{"a parent queue", pod(map[string]string{names.LabelQueue: "dept"}), nil, "default", queues, "dept", "only leaves hold pods"},
		{"queues not readable", pod(map[string]string{names.LabelQueue: "team-x"}), nil, "default", nil, "team-x", "label gantry.dev/queue on the pod"},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := chargedQueue(c.pod, c.gang, nil, c.defaultQueue, c.queues)
			if got.Queue != c.queue || !strings.Contains(got.Why, c.why) {
				t.Errorf("chargedQueue = %+v, want queue %q, why containing %q", got, c.queue, c.why)
			}
		})
	}
}

// When the gang cannot be read, an unlabelled pod's queue may come from its PodGroup or
// owner: the explanation says it cannot tell.
func TestChargedQueueGangUnreadable(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w0"}}
	got := chargedQueue(pod, nil, errors.New("forbidden"), "default", map[string]queueState{"default": {found: true}})
	if got.Queue != "default" || !strings.Contains(got.Why, "its gang could not be read (forbidden)") {
		t.Errorf("chargedQueue = %+v, want the default queue with a warning that the gang could not be read", got)
	}
	labelled := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ml", Name: "w0", Labels: map[string]string{names.LabelQueue: "team-a"}}}
	if got := chargedQueue(labelled, nil, errors.New("forbidden"), "default", nil); strings.Contains(got.Why, "could not be read") {
		t.Errorf("chargedQueue = %+v: the pod's own label decides, the gang does not matter", got)
	}
}
