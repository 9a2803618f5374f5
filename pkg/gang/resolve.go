package gang

import (
	"fmt"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names"
)

// sources are what a gang's queue, priority class and preemptibility may come from
// after its pods: values a PodGroup's spec states, then the owners' labels, top owner
// first.
type sources struct {
	queue             string
	priorityClassName string
	preemptible       *bool
	owners            []metav1.Object
}

func resolveQueueAndPriority(g *Gang, from sources) {
	labelSets := make([]map[string]string, 0, len(g.Members))
	for _, m := range g.Members {
		labelSets = append(labelSets, m.Pod.Labels)
	}
	ownerLabels := make([]map[string]string, 0, len(from.owners))
	for _, o := range from.owners {
		ownerLabels = append(ownerLabels, o.GetLabels())
	}

	g.Queue = firstNonEmpty(queueOf(labelSets), from.queue, queueOf(ownerLabels))

	specClass := ""
	for _, m := range g.Members {
		if m.Pod.Spec.PriorityClassName != "" {
			specClass = m.Pod.Spec.PriorityClassName
			break
		}
	}
	g.PriorityClassName = firstNonEmpty(specClass, priorityClassOf(labelSets), from.priorityClassName, priorityClassOf(ownerLabels))

	for _, m := range g.Members {
		if g.Preemptible = g.preemptibleOf(m.Pod, "pod "+string(m.ID)); g.Preemptible != nil {
			return
		}
	}
	if from.preemptible != nil {
		g.Preemptible = from.preemptible
		return
	}
	for _, o := range from.owners {
		if g.Preemptible = g.preemptibleOf(o, ownerName(o)); g.Preemptible != nil {
			return
		}
	}
}

func queueOf(labelSets []map[string]string) string {
	for _, key := range []string{names.LabelQueue, names.LabelQueueKAI} {
		for _, labels := range labelSets {
			if v := labels[key]; v != "" {
				return v
			}
		}
	}
	return ""
}

func priorityClassOf(labelSets []map[string]string) string {
	for _, labels := range labelSets {
		for _, key := range []string{names.LabelPriorityClass, names.LabelRayPriorityClass} {
			if v := labels[key]; v != "" {
				return v
			}
		}
	}
	return ""
}

// preemptibleOf reads gantry.dev/preemptible from the object's labels, then its
// annotations; an unreadable value is reported in g.Warnings and ignored.
func (g *Gang) preemptibleOf(o metav1.Object, who string) *bool {
	for _, kv := range []map[string]string{o.GetLabels(), o.GetAnnotations()} {
		raw, ok := kv[names.LabelPreemptible]
		if !ok {
			continue
		}
		if b, ok := parseBool(raw); ok {
			return &b
		}
		g.Warnings = append(g.Warnings, fmt.Sprintf("%s: %s is %q: set it to \"true\" or \"false\"", who, names.LabelPreemptible, raw))
	}
	return nil
}

func ownerName(o metav1.Object) string {
	kind := "object"
	switch o.(type) {
	case *rayv1.RayCluster:
		kind = "RayCluster"
	case *rayv1.RayJob:
		kind = "RayJob"
	case *rayv1.RayService:
		kind = "RayService"
	case *schedulingv1alpha1.PodGroup:
		kind = "PodGroup"
	}
	return fmt.Sprintf("%s %s/%s", kind, o.GetNamespace(), o.GetName())
}

func firstNonEmpty(values ...string) string {
	for _, v := range values {
		if v != "" {
			return v
		}
	}
	return ""
}
