package main

import (
	"context"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/names"
)

// queueCharge is the queue whose quota and limit a pod counts against, and why that
// one: `gantry explain` prints it.
type queueCharge struct {
	// Queue is empty when the pod is charged to no queue.
	Queue string `json:"queue,omitempty"`
	Why   string `json:"why"`
}

// queueState is what the cluster says of a queue name: found, and whether it has
// child queues (only leaves hold pods).
type queueState struct{ found, parent bool }

// chargedQueue works out the pod's queue as the scheduler does: the gang's queue
// (pkg/gang resolves it from the pods' labels, the PodGroup's spec.queue, then the top
// owner's labels), else the scheduler's default queue, whether or not it exists (the
// pod then waits until it does, unless no Queue exists at all). queues maps
// every Queue of the cluster; nil when they could not be listed. gangErr is why the
// gang could not be read, if it could not.
func chargedQueue(pod *corev1.Pod, g *gang.Gang, gangErr error, defaultQueue string, queues map[string]queueState) queueCharge {
	c := chargedQueueOf(pod, g, defaultQueue, queues)
	if gangErr != nil && pod.Labels[names.LabelQueue] == "" && pod.Labels[names.LabelQueueKAI] == "" {
		c.Why += fmt.Sprintf("; its gang could not be read (%v), so a queue its PodGroup or owner names would take precedence and is not shown", gangErr)
	}
	return c
}

func chargedQueueOf(pod *corev1.Pod, g *gang.Gang, defaultQueue string, queues map[string]queueState) queueCharge {
	name, why := "", ""
	switch {
	case pod.Labels[names.LabelQueue] != "":
		name, why = pod.Labels[names.LabelQueue], "label "+names.LabelQueue+" on the pod"
	case pod.Labels[names.LabelQueueKAI] != "":
		name, why = pod.Labels[names.LabelQueueKAI], "label "+names.LabelQueueKAI+" on the pod (KAI's, read as an alias)"
	case g != nil && g.Queue != "":
		name, why = g.Queue, gangQueueSource(g)
	}
	if name == "" {
		if defaultQueue == "" {
			return queueCharge{Why: "no queue label, and no default queue is configured: no quota or limit applies"}
		}
		name, why = defaultQueue, "no queue label on the pod, its gang or their owner: the scheduler's default queue (defaultQueue in its config; --default-queue here)"
	}
	if queues != nil && len(queues) == 0 {
		// The scheduler applies queues only once one exists.
		return queueCharge{Queue: name, Why: why + "; no Queue exists in the cluster, so no quota or limit applies"}
	}
	if queues != nil {
		switch st := queues[name]; {
		case !st.found:
			why += fmt.Sprintf("; queue %s does not exist, so the pod waits (QueueNotFound)", name)
		case st.parent:
			why += fmt.Sprintf("; queue %s has child queues and only leaves hold pods, so the pod waits (QueueNotLeaf)", name)
		}
	}
	return queueCharge{Queue: name, Why: why}
}

// gangQueueSource says where a gang's queue came from when its pod has no label.
func gangQueueSource(g *gang.Gang) string {
	for _, m := range g.Members {
		if m.Pod == nil {
			continue
		}
		for _, key := range []string{names.LabelQueue, names.LabelQueueKAI} {
			if m.Pod.Labels[key] == g.Queue {
				return fmt.Sprintf("label %s on %s, a member of its gang %s", key, m.Pod.Name, g.ID)
			}
		}
	}
	if g.Source == gang.SourcePodGroup {
		return fmt.Sprintf("spec.queue of PodGroup %s, or its owner's queue label", g.Name)
	}
	if g.Owner != "" {
		return fmt.Sprintf("queue label on %s, the owner of its gang %s", g.Owner, g.ID)
	}
	return fmt.Sprintf("its gang %s", g.ID)
}

// listQueues reads every Queue's name and parent; nil when they cannot be listed.
func listQueues(ctx context.Context, cfg *rest.Config) map[string]queueState {
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil
	}
	list, err := dyn.Resource(schema.GroupVersionResource{Group: "scheduling.gantry.dev", Version: "v1alpha1", Resource: "queues"}).
		List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil
	}
	out := map[string]queueState{}
	for _, q := range list.Items {
		st := out[q.GetName()]
		st.found = true
		out[q.GetName()] = st
		if parent, _, _ := unstructured.NestedString(q.Object, "spec", "parentQueue"); parent != "" {
			p := out[parent]
			p.parent = true
			out[parent] = p
		}
	}
	return out
}
