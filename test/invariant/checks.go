package invariant

import (
	"fmt"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// GangStatus is how much of one gang is bound.
type GangStatus struct {
	Key string
	// Minimum is how many members must start together.
	Minimum int
	// Live members are neither terminating nor failed; Bound of them have a node
	// (a Succeeded member counts: it ran).
	Live, Bound int
	// HeadBound is false for a Ray gang whose live head is not bound.
	HeadBound bool
	Unbound   []string
}

// Partial reports a gang with some members bound and not all of its minimum (or, for
// a Ray cluster, workers bound before the head).
func (g GangStatus) Partial() bool {
	return g.Bound > 0 && (g.Bound < g.Minimum || !g.HeadBound)
}

func (g GangStatus) String() string {
	return fmt.Sprintf("%d of minimum %d bound (%d live); unbound: %s", g.Bound, g.Minimum, g.Live, joinSorted(g.Unbound))
}

// Gangs groups the pods into gangs: a gantry.dev/pod-group annotation (minimum from its
// PodGroup, else gantry.dev/min-member) or a ray.io/cluster label (minimum: the head
// and minReplicas × numOfHosts of every worker group not suspended). When a gang's
// minimum cannot be known (no RayCluster, no min-member), every live member counts.
// Pods of no gang are left out: a gang of one cannot be partial.
func Gangs(s *State) map[string]*GangStatus {
	minimum := map[string]int{}
	for _, pg := range s.PodGroups {
		minimum["podgroup:"+pg.Namespace+"/"+pg.Name] = int(pg.Spec.MinMember)
	}
	for _, rc := range s.RayClusters {
		if rc.DeletionTimestamp != nil {
			continue
		}
		m := 1
		for _, g := range rc.Spec.WorkerGroupSpecs {
			if g.Suspend != nil && *g.Suspend {
				continue
			}
			replicas := int32(0)
			switch {
			case g.MinReplicas != nil:
				replicas = *g.MinReplicas
			case g.Replicas != nil:
				replicas = *g.Replicas
			}
			m += int(replicas * max(g.NumOfHosts, 1))
		}
		minimum["ray:"+rc.Namespace+"/"+rc.Name] = m
	}
	out := map[string]*GangStatus{}
	for _, p := range s.Pods {
		key, annotatedMin, isRay := gangOf(p)
		if key == "" || p.DeletionTimestamp != nil || p.Status.Phase == corev1.PodFailed {
			continue
		}
		g := out[key]
		if g == nil {
			g = &GangStatus{Key: key, HeadBound: true}
			out[key] = g
		}
		if _, known := minimum[key]; !known && annotatedMin > g.Minimum {
			g.Minimum = annotatedMin
		}
		g.Live++
		isHead := isRay && p.Labels[rayNodeTypeLabel] == "head"
		if p.Spec.NodeName != "" {
			g.Bound++
		} else {
			g.Unbound = append(g.Unbound, p.Name)
			if isHead {
				g.HeadBound = false
			}
		}
	}
	for key, g := range out {
		if m, ok := minimum[key]; ok {
			g.Minimum = m
		}
		if g.Minimum <= 0 {
			g.Minimum = g.Live
		}
	}
	return out
}

func gangOf(p *corev1.Pod) (key string, annotatedMin int, isRay bool) {
	if name := p.Annotations[annotationPodGroup]; name != "" {
		n, _ := strconv.Atoi(p.Annotations[annotationMinMember])
		return "podgroup:" + p.Namespace + "/" + name, n, false
	}
	if c := p.Labels[rayClusterLabel]; c != "" {
		if t := p.Labels[rayNodeTypeLabel]; t == "head" || t == "worker" {
			return "ray:" + p.Namespace + "/" + c, 0, true
		}
	}
	return "", 0, false
}

// UnexplainedPods returns a violation for every pod served by one of schedulers that is
// older than boundTime, not bound, not terminating, and has no PodScheduled=False
// condition with a reason: a pod the scheduler has lost.
func UnexplainedPods(s *State, schedulers []string, boundTime time.Duration) []Violation {
	served := sets.New(schedulers...)
	var out []Violation
	for _, p := range s.Pods {
		if !served.Has(p.Spec.SchedulerName) || p.Spec.NodeName != "" || p.DeletionTimestamp != nil ||
			p.Status.Phase != corev1.PodPending && p.Status.Phase != "" {
			continue
		}
		age := s.Now.Sub(p.CreationTimestamp.Time)
		if age <= boundTime || pendingReason(p) != "" {
			continue
		}
		out = append(out, Violation{Kind: LostPod, Subject: "pod " + podKey(p), At: s.Now,
			Message: fmt.Sprintf("neither bound nor pending with a reason %s after creation (scheduler %s; %s)", age.Round(time.Second), p.Spec.SchedulerName, statusSummary(p))})
	}
	sortViolations(out)
	return out
}

// statusSummary is what a lost pod's status shows, for whoever chases the cause: its
// uid (a re-created pod of the same name is another pod), phase, nominated node and
// conditions.
func statusSummary(p *corev1.Pod) string {
	var b strings.Builder
	fmt.Fprintf(&b, "uid %s, phase %q", p.UID, p.Status.Phase)
	if n := p.Status.NominatedNodeName; n != "" {
		fmt.Fprintf(&b, ", nominated to %s", n)
	}
	if len(p.Status.Conditions) == 0 {
		b.WriteString(", no conditions")
	}
	for _, c := range p.Status.Conditions {
		fmt.Fprintf(&b, ", %s=%s", c.Type, c.Status)
		if c.Reason != "" {
			fmt.Fprintf(&b, " (%s)", c.Reason)
		}
	}
	return b.String()
}

// QueueGPUs sums the GPUs of bound, unfinished pods per queue and up its ancestors.
// A pod without a queue label is charged to defaultQueue. Shares count as their
// fraction of the GPU (bytes over the node's GFD memory, else gantry.dev/gpu-fraction).
func QueueGPUs(s *State, defaultQueue string) map[string]float64 {
	parent := map[string]string{}
	for _, q := range s.Queues {
		parent[q.Name] = q.Spec.ParentQueue
	}
	memory := map[string]int64{}
	for _, n := range s.Nodes {
		if mib, err := strconv.ParseInt(n.Labels[labelGFDMemoryMiB], 10, 64); err == nil {
			memory[n.Name] = mib << 20
		}
	}
	out := map[string]float64{}
	for _, p := range s.Pods {
		if !holdsResources(p) {
			continue
		}
		gpus := podGPUs(p, memory[p.Spec.NodeName])
		if gpus == 0 {
			continue
		}
		q := queueOf(p)
		if q == "" {
			q = defaultQueue
		}
		seen := map[string]bool{}
		for ; q != "" && !seen[q]; q = parent[q] {
			seen[q] = true
			out[q] += gpus
		}
	}
	return out
}

func podGPUs(p *corev1.Pod, gpuMemory int64) float64 {
	uses, err := parseGPUAnnotation(p.Annotations[annotationGPUs])
	if err != nil || len(uses) == 0 {
		return float64(gpuRequest(p))
	}
	var gpus float64
	for _, u := range uses {
		switch {
		case u.bytes == 0:
			gpus++
		case gpuMemory > 0:
			gpus += float64(u.bytes) / float64(gpuMemory)
		default:
			f, err := strconv.ParseFloat(p.Annotations[annotationGPUFraction], 64)
			if err != nil || !(f > 0 && f <= 1) {
				f = min(1, float64(u.bytes)/80e9)
			}
			gpus += f
		}
	}
	return gpus
}

// QueuesOverLimit returns every queue whose bound GPUs exceed its spec GPU limit.
func QueuesOverLimit(s *State, defaultQueue string) map[string]string {
	used := QueueGPUs(s, defaultQueue)
	out := map[string]string{}
	for _, q := range s.Queues {
		r := q.Spec.Resources
		if r == nil || r.GPU == nil || r.GPU.Limit < 0 {
			continue
		}
		if used[q.Name] > r.GPU.Limit+1e-6 {
			out[q.Name] = fmt.Sprintf("%.3g GPUs bound, limit %.3g", used[q.Name], r.GPU.Limit)
		}
	}
	return out
}

// preemptionCount is how often one pod (by UID) was preempted, from its Preempted
// Events: the sum over Events of their counts, each Event at its highest count seen.
type preemptionCount struct {
	pod    string
	events map[string]int32 // Event name → count
}

func (c *preemptionCount) total() int {
	n := 0
	for _, v := range c.events {
		n += int(max(v, 1))
	}
	return n
}

// eventCount is an Event's count, the series count for a new-style Event.
func eventCount(e *corev1.Event) int32 {
	if e.Series != nil && e.Series.Count > e.Count {
		return e.Series.Count
	}
	return e.Count
}
