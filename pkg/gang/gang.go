package gang

import (
	"fmt"
	"sort"
	"strconv"
	"strings"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// Source says what made pods a gang.
type Source string

const (
	// SourceRayCluster: the pods of one RayCluster (standalone, or a RayJob's or a
	// RayService's).
	SourceRayCluster Source = "RayCluster"
	// SourcePodGroup: pods annotated gantry.dev/pod-group naming an existing PodGroup.
	SourcePodGroup Source = "PodGroup"
	// SourceAnnotation: pods annotated gantry.dev/pod-group with no PodGroup of that
	// name; their gantry.dev/min-member annotations give the size.
	SourceAnnotation Source = "Annotation"
	// SourceRayJobSubmitter: the submitter pod of a K8sJobMode RayJob, a gang of one.
	SourceRayJobSubmitter Source = "RayJobSubmitter"
	// SourcePod: any other pod, a gang of one.
	SourcePod Source = "Pod"
)

// Role is a member's part in its gang.
type Role string

const (
	RoleHead      Role = "head"
	RoleWorker    Role = "worker"
	RoleSubmitter Role = "submitter"
	RoleMember    Role = "member"
)

// State is where a member pod is in its life.
type State string

const (
	StatePending     State = "Pending"     // not bound to a node
	StateRunning     State = "Running"     // bound, not finished
	StateSucceeded   State = "Succeeded"   // finished; counts towards the minimum
	StateFailed      State = "Failed"      // finished badly; does not count
	StateTerminating State = "Terminating" // being deleted; does not count
)

// Member is one pod of a gang.
type Member struct {
	Pod   *corev1.Pod
	ID    model.PodID
	Role  Role
	State State
	// Group is the Ray worker group (ray.io/group) or the PodGroup sub-group
	// (gantry.dev/sub-group); empty when none.
	Group string
	// Elastic is true for a member above the gang's minimum. Failed and terminating
	// members are never elastic (they need no placement).
	Elastic bool
}

// Counts tallies the members by State.
type Counts struct {
	Pending, Running, Succeeded, Failed, Terminating int
}

// SubGroup is a part of a gang with its own minimum (PodGroup spec.subGroups).
type SubGroup struct {
	Name      string
	MinMember int
}

// Gang is a set of pods that start together, and what the scheduler needs to know
// about it.
type Gang struct {
	ID     model.GangID
	Source Source
	// Namespace and Name of what groups the pods: the RayCluster, the PodGroup (or
	// annotation value), or the pod of a gang of one.
	Namespace string
	Name      string
	// Owner is the top owner as "Kind/name" (for example "RayService/llm"), or empty.
	Owner string
	// MinMember is how many members must be placed together.
	MinMember int
	// SubGroups are minima within the gang, for PodGroups that declare them.
	SubGroups []SubGroup
	// Queue is the leaf queue the gang is charged to; empty when nothing names one.
	Queue string
	// PriorityClassName is the gang's priority class; empty when nothing names one.
	PriorityClassName string
	// Preemptible overrides the priority class's preemptibility when not nil.
	Preemptible *bool
	// Members are the gang's existing pods: head first, then by group, the minimum
	// before elastic members, then by name.
	Members []Member
	Counts  Counts
	// MissingPods is how many more pods must be created before the minimum exists
	// (per Ray worker group and PodGroup sub-group, so extras in one group do not hide
	// a shortage in another).
	MissingPods int
	// Missing says why the gang cannot start yet although its pods may fit ("waiting
	// for 2 of 3 pods to be created"); empty when nothing is missing.
	Missing string
	// StartFreeFraction is, for the workers of a Ray Serve LLM service (a RayService
	// whose serveConfigV2 runs vLLM engines), the engines' gpu_memory_utilization:
	// the share of each GPU's memory that must be free when a worker starts. 0 when
	// the gang runs no such engine.
	StartFreeFraction float64
	// Warnings are problems with the gang's metadata that Gantry worked around, for
	// an Event (for example an unreadable gantry.dev/min-member).
	Warnings []string
}

// Present is how many members count towards the minimum: pending, running and
// succeeded ones.
func (g *Gang) Present() int { return g.Counts.Pending + g.Counts.Running + g.Counts.Succeeded }

// BelowMinimum reports whether pods of the minimum are missing: not created yet, or
// failed or deleted and not replaced. Succeeded members count as present, so a gang
// whose members are completing is not below its minimum.
func (g *Gang) BelowMinimum() bool { return g.MissingPods > 0 }

// Model returns the gang as the scheduling core sees it: Members are the pods that
// are pending or bound (terminating ones included, since they still hold resources),
// and finished pods are left out, the Succeeded ones counted in Succeeded. The caller
// resolves the priority class to a priority and decides preemptibility (Preemptible,
// if set, overrides the class).
func (g *Gang) Model(priority int32, preemptible bool, createdAt int64) *model.Gang {
	members := make([]model.PodID, 0, len(g.Members))
	for _, m := range g.Members {
		if m.State != StateSucceeded && m.State != StateFailed {
			members = append(members, m.ID)
		}
	}
	return &model.Gang{
		ID:          g.ID,
		Queue:       g.Queue,
		Priority:    priority,
		Preemptible: preemptible,
		MinMember:   g.MinMember,
		Members:     members,
		Succeeded:   g.Counts.Succeeded,
		Missing:     g.Missing,
		CreatedAt:   createdAt,
	}
}

// PodID names a pod as the model does: "namespace/name".
func PodID(pod *corev1.Pod) model.PodID { return model.PodID(pod.Namespace + "/" + pod.Name) }

// Identity is which gang a pod belongs to, decided from the pod and its owners alone.
type Identity struct {
	Gang      model.GangID
	Source    Source
	Namespace string
	// Name of the RayCluster or PodGroup, or of the pod for a gang of one.
	Name  string
	Role  Role
	Group string
}

// Identify decides which gang pod belongs to (see the package doc for the rules).
func Identify(pod *corev1.Pod, lookup Lookup) Identity {
	ns := pod.Namespace
	if name := podGroupName(pod); name != "" {
		source := SourceAnnotation
		if lookup.PodGroup(ns, name) != nil {
			source = SourcePodGroup
		}
		return Identity{
			Gang: podGroupGangID(ns, name), Source: source, Namespace: ns, Name: name,
			Role: RoleMember, Group: pod.Labels[names.LabelSubGroup],
		}
	}
	if cluster, role := rayClusterOf(pod); cluster != "" {
		return Identity{
			Gang: rayGangID(ns, cluster), Source: SourceRayCluster, Namespace: ns, Name: cluster,
			Role: role, Group: pod.Labels[names.LabelRayGroup],
		}
	}
	lone := Identity{Gang: model.GangID(PodID(pod)), Source: SourcePod, Namespace: ns, Name: pod.Name, Role: RoleMember}
	if rayJobOfSubmitter(pod, lookup) != nil {
		lone.Source, lone.Role = SourceRayJobSubmitter, RoleSubmitter
	}
	return lone
}

func podGroupGangID(namespace, name string) model.GangID {
	return model.GangID("podgroup:" + namespace + "/" + name)
}

func rayGangID(namespace, cluster string) model.GangID {
	return model.GangID("ray:" + namespace + "/" + cluster)
}

func podGroupName(pod *corev1.Pod) string {
	return pod.Annotations[names.AnnotationPodGroup]
}

// rayClusterOf returns the RayCluster of a Ray head or worker pod and its role; an
// empty name for other pods (including KubeRay's redis-cleanup pods).
func rayClusterOf(pod *corev1.Pod) (string, Role) {
	var role Role
	switch pod.Labels[names.LabelRayNodeType] {
	case names.RayNodeTypeHead:
		role = RoleHead
	case names.RayNodeTypeWorker:
		role = RoleWorker
	default:
		return "", ""
	}
	if name := pod.Labels[names.LabelRayCluster]; name != "" {
		return name, role
	}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "RayCluster" && strings.HasPrefix(ref.APIVersion, "ray.io/") {
		return ref.Name, role
	}
	return "", ""
}

// rayJobOfSubmitter returns the RayJob whose submitter pod this is: a pod of a Job
// named after a RayJob in the same namespace (KubeRay names the Job after the RayJob).
func rayJobOfSubmitter(pod *corev1.Pod, lookup Lookup) *rayv1.RayJob {
	jobName := ""
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.Kind == "Job" && strings.HasPrefix(ref.APIVersion, "batch/") {
		jobName = ref.Name
	} else {
		jobName = pod.Labels[names.LabelJobName]
	}
	if jobName == "" {
		return nil
	}
	job := lookup.RayJob(pod.Namespace, jobName)
	if job == nil || (job.Spec.SubmissionMode != "" && job.Spec.SubmissionMode != rayv1.K8sJobMode) {
		return nil
	}
	return job
}

// Group sorts pods into gangs. Pass every pod the scheduler serves, bound, pending and
// finished alike: finished pods tell a completing gang from a stale one. Gangs come
// back sorted by ID.
func Group(pods []*corev1.Pod, lookup Lookup) []*Gang {
	type bucket struct {
		identity Identity
		members  []Member
	}
	buckets := map[model.GangID]*bucket{}
	for _, pod := range pods {
		id := Identify(pod, lookup)
		b := buckets[id.Gang]
		if b == nil {
			b = &bucket{identity: id}
			buckets[id.Gang] = b
		}
		b.members = append(b.members, Member{Pod: pod, ID: PodID(pod), Role: id.Role, State: stateOf(pod), Group: id.Group})
	}
	gangs := make([]*Gang, 0, len(buckets))
	for _, b := range buckets {
		gangs = append(gangs, build(b.identity, b.members, lookup))
	}
	sort.Slice(gangs, func(i, j int) bool { return gangs[i].ID < gangs[j].ID })
	return gangs
}

func stateOf(pod *corev1.Pod) State {
	switch {
	case pod.Status.Phase == corev1.PodSucceeded:
		return StateSucceeded
	case pod.Status.Phase == corev1.PodFailed:
		return StateFailed
	case pod.DeletionTimestamp != nil:
		return StateTerminating
	case pod.Spec.NodeName != "":
		return StateRunning
	}
	return StatePending
}

func build(id Identity, members []Member, lookup Lookup) *Gang {
	g := &Gang{ID: id.Gang, Source: id.Source, Namespace: id.Namespace, Name: id.Name}
	sortByStanding(members)
	minimum := map[*Member]bool{}
	var from sources
	switch id.Source {
	case SourceRayCluster:
		from = buildRay(g, members, minimum, lookup)
	case SourcePodGroup:
		from = buildPodGroup(g, members, minimum, lookup.PodGroup(id.Namespace, id.Name))
	case SourceAnnotation:
		buildAnnotated(g, members, minimum)
	default:
		g.MinMember = 1
		g.MissingPods = pick(pointers(members), 1, minimum)
		if id.Source == SourceRayJobSubmitter {
			if job := rayJobOfSubmitter(members[0].Pod, lookup); job != nil {
				g.Owner = "RayJob/" + job.Name
				from.owners = []metav1.Object{job}
			}
		}
	}
	for i := range members {
		members[i].Elastic = counts(members[i]) && !minimum[&members[i]]
	}
	sortMembers(members)
	g.Members = members
	for _, m := range g.Members {
		switch m.State {
		case StatePending:
			g.Counts.Pending++
		case StateRunning:
			g.Counts.Running++
		case StateSucceeded:
			g.Counts.Succeeded++
		case StateFailed:
			g.Counts.Failed++
		case StateTerminating:
			g.Counts.Terminating++
		}
	}
	if g.Missing == "" && g.MissingPods > 0 {
		g.Missing = fmt.Sprintf("waiting for %d of %d pods to be created", g.MissingPods, g.MinMember)
	}
	resolveQueueAndPriority(g, from)
	return g
}

// pick adds to minimum the first n candidates that count and are not in it yet
// (candidates are in standing order), and returns how many of the n it could not find.
func pick(candidates []*Member, n int, minimum map[*Member]bool) (short int) {
	for _, m := range candidates {
		if n == 0 {
			break
		}
		if counts(*m) && !minimum[m] {
			minimum[m] = true
			n--
		}
	}
	return n
}

func pointers(members []Member) []*Member {
	out := make([]*Member, len(members))
	for i := range members {
		out[i] = &members[i]
	}
	return out
}

// counts reports whether a member counts towards the minimum.
func counts(m Member) bool { return m.State != StateFailed && m.State != StateTerminating }

// sortByStanding orders members as candidates for the minimum: members that count
// before those that do not, bound or finished ones before pending ones, then oldest
// first, then by name.
func sortByStanding(members []Member) {
	rank := func(m Member) int {
		switch {
		case !counts(m):
			return 2
		case m.State == StatePending:
			return 1
		}
		return 0
	}
	sort.SliceStable(members, func(i, j int) bool {
		a, b := members[i], members[j]
		if rank(a) != rank(b) {
			return rank(a) < rank(b)
		}
		ta, tb := a.Pod.CreationTimestamp, b.Pod.CreationTimestamp
		if !ta.Equal(&tb) {
			return ta.Before(&tb)
		}
		return a.ID < b.ID
	})
}

func sortMembers(members []Member) {
	roleOrder := map[Role]int{RoleHead: 0, RoleWorker: 1, RoleMember: 2, RoleSubmitter: 3}
	sort.SliceStable(members, func(i, j int) bool {
		a, b := members[i], members[j]
		switch {
		case roleOrder[a.Role] != roleOrder[b.Role]:
			return roleOrder[a.Role] < roleOrder[b.Role]
		case a.Group != b.Group:
			return a.Group < b.Group
		case a.Elastic != b.Elastic:
			return !a.Elastic
		}
		return a.ID < b.ID
	})
}

func parseBool(s string) (bool, bool) {
	b, err := strconv.ParseBool(s)
	return b, err == nil
}
