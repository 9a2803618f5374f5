package invariant

import (
	"fmt"
	"sort"
	"strings"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"

	schedv1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names"
)

// Names the checker reads on pods and nodes, as DESIGN.md ("Names") documents them.
// They are spelled here again on purpose: see the package doc.
const (
	annotationGPUs        = names.AnnotationGPUs
	annotationGPUFraction = names.AnnotationGPUFraction
	annotationPodGroup    = names.AnnotationPodGroup
	annotationMinMember   = names.AnnotationMinMember
	labelQueue            = names.LabelQueue
	labelQueueKAI         = "kai.scheduler/queue"
	labelGFDMemoryMiB     = "nvidia.com/gpu.memory"
	resourceGPU           = corev1.ResourceName("nvidia.com/gpu")

	rayClusterLabel  = "ray.io/cluster"
	rayNodeTypeLabel = "ray.io/node-type"
)

// State is one view of the cluster: what the checks read.
type State struct {
	Now         time.Time
	Pods        []*corev1.Pod
	Nodes       []*corev1.Node
	Claims      []*resourcev1.ResourceClaim
	Slices      []*resourcev1.ResourceSlice
	Queues      []*schedv1.Queue
	PodGroups   []*schedv1.PodGroup
	RayClusters []*rayv1.RayCluster
}

// Kind names an invariant.
type Kind string

// The invariants.
const (
	PartialGang    Kind = "PartialGang"
	GPUOvercommit  Kind = "GPUOvercommit"
	DoubleEviction Kind = "DoubleEviction"
	LostPod        Kind = "LostPod"
	QueueOverLimit Kind = "QueueOverLimit"
	NotSettled     Kind = "NotSettled"
)

// Violation is one broken invariant.
type Violation struct {
	Kind Kind
	// Subject is what broke it: a gang, a node's GPU, a pod, a queue.
	Subject string
	Message string
	At      time.Time
}

func (v Violation) String() string {
	return fmt.Sprintf("%s %s: %s (at %s)", v.Kind, v.Subject, v.Message, v.At.UTC().Format("15:04:05.000"))
}

// holdsResources reports a pod that is bound and not finished. A terminating pod still
// holds its GPUs until the kubelet reports it gone.
func holdsResources(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

func podKey(p *corev1.Pod) string { return p.Namespace + "/" + p.Name }

// pendingReason returns the reason of a PodScheduled=False condition, "" without one.
func pendingReason(p *corev1.Pod) string {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionFalse {
			return c.Reason
		}
	}
	return ""
}

// gpuRequest is the pod's nvidia.com/gpu request: the larger of the sum over its
// containers and its largest init container, as the kubelet admits it.
func gpuRequest(p *corev1.Pod) int64 {
	var sum, initMax int64
	for _, c := range p.Spec.Containers {
		if q, ok := c.Resources.Requests[resourceGPU]; ok {
			sum += q.Value()
		} else if q, ok := c.Resources.Limits[resourceGPU]; ok {
			sum += q.Value()
		}
	}
	for _, c := range p.Spec.InitContainers {
		if q, ok := c.Resources.Requests[resourceGPU]; ok && q.Value() > initMax {
			initMax = q.Value()
		}
	}
	return max(sum, initMax)
}

// queueOf is the pod's queue label, "" without one.
func queueOf(p *corev1.Pod) string {
	if q := p.Labels[labelQueue]; q != "" {
		return q
	}
	return p.Labels[labelQueueKAI]
}

func sortViolations(vs []Violation) {
	sort.Slice(vs, func(i, j int) bool {
		if vs[i].Kind != vs[j].Kind {
			return vs[i].Kind < vs[j].Kind
		}
		return vs[i].Subject < vs[j].Subject
	})
}

func joinSorted(names []string) string {
	sort.Strings(names)
	return strings.Join(names, ", ")
}
