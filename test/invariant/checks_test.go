package invariant

import (
	"strings"
	"testing"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	schedv1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
)

var t0 = time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

func node(name string, gpus int64, memMiB string) *corev1.Node {
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{}}}
	n.Status.Allocatable = corev1.ResourceList{resourceGPU: *resource.NewQuantity(gpus, resource.DecimalSI)}
	if memMiB != "" {
		n.Labels[labelGFDMemoryMiB] = memMiB
	}
	return n
}

type podOpt func(*corev1.Pod)

func pod(name string, opts ...podOpt) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(t0)},
		Spec:       corev1.PodSpec{SchedulerName: "gantry-scheduler", Containers: []corev1.Container{{Name: "c"}}},
		Status:     corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func on(n string) podOpt {
	return func(p *corev1.Pod) { p.Spec.NodeName = n; p.Status.Phase = corev1.PodRunning }
}

func gpus(s string) podOpt { return annotate(annotationGPUs, s) }

func annotate(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Annotations == nil {
			p.Annotations = map[string]string{}
		}
		p.Annotations[k] = v
	}
}

func label(k, v string) podOpt {
	return func(p *corev1.Pod) {
		if p.Labels == nil {
			p.Labels = map[string]string{}
		}
		p.Labels[k] = v
	}
}

func requestGPUs(n int64) podOpt {
	return func(p *corev1.Pod) {
		p.Spec.Containers[0].Resources.Requests = corev1.ResourceList{resourceGPU: *resource.NewQuantity(n, resource.DecimalSI)}
	}
}

func member(group string, min string) podOpt {
	return func(p *corev1.Pod) {
		annotate(annotationPodGroup, group)(p)
		annotate(annotationMinMember, min)(p)
	}
}

func kinds(vs []Violation) string {
	var out []string
	for _, v := range vs {
		out = append(out, string(v.Kind)+" "+v.Subject)
	}
	return strings.Join(out, "; ")
}

func TestGPUOvercommitsFindsEachKind(t *testing.T) {
	cases := []struct {
		name  string
		state State
		want  string
	}{
		{"one GPU whole to two pods", State{Nodes: []*corev1.Node{node("n", 2, "")}, Pods: []*corev1.Pod{
			pod("a", on("n"), gpus("0")), pod("b", on("n"), gpus("1,0"))}}, "GPUOvercommit node n gpu 0"},
		{"whole and shared", State{Nodes: []*corev1.Node{node("n", 1, "")}, Pods: []*corev1.Pod{
			pod("a", on("n"), gpus("0")), pod("b", on("n"), gpus("0:1000"))}}, "GPUOvercommit node n gpu 0"},
		{"shares over memory", State{Nodes: []*corev1.Node{node("n", 1, "1024")}, Pods: []*corev1.Pod{
			pod("a", on("n"), gpus("0:600000000")), pod("b", on("n"), gpus("0:600000000"))}}, "GPUOvercommit node n gpu 0"},
		{"index beyond the node", State{Nodes: []*corev1.Node{node("n", 2, "")}, Pods: []*corev1.Pod{
			pod("a", on("n"), gpus("2"))}}, "GPUOvercommit node n gpu 2"},
		{"other scheduler's count on top of Gantry's indices", State{Nodes: []*corev1.Node{node("n", 2, "")}, Pods: []*corev1.Pod{
			pod("a", on("n"), gpus("0,1")), pod("kube", on("n"), requestGPUs(1))}}, "GPUOvercommit node n"},
		{"counted pods alone", State{Nodes: []*corev1.Node{node("n", 2, "")}, Pods: []*corev1.Pod{
			pod("a", on("n"), requestGPUs(2)), pod("b", on("n"), requestGPUs(1))}}, "GPUOvercommit node n"},
		{"terminating pod still holds its GPU", State{Nodes: []*corev1.Node{node("n", 1, "")}, Pods: []*corev1.Pod{
			pod("a", on("n"), gpus("0"), func(p *corev1.Pod) { p.DeletionTimestamp = &metav1.Time{Time: t0} }),
			pod("b", on("n"), gpus("0"))}}, "GPUOvercommit node n gpu 0"},
		{"unreadable annotation", State{Nodes: []*corev1.Node{node("n", 1, "")}, Pods: []*corev1.Pod{
			pod("a", on("n"), gpus("zero"))}}, "GPUOvercommit pod ns/a"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := kinds(GPUOvercommits(&c.state))
			if got != c.want {
				t.Errorf("violations = %q, want %q", got, c.want)
			}
		})
	}
}

func TestGPUOvercommitsAcceptsAFullNode(t *testing.T) {
	s := State{Nodes: []*corev1.Node{node("n", 4, "1024")}, Pods: []*corev1.Pod{
		pod("whole", on("n"), gpus("0,1"), requestGPUs(2)),
		pod("s1", on("n"), gpus("2:536870912")), pod("s2", on("n"), gpus("2:536870912")),
		pod("kube", on("n"), requestGPUs(1)),
		pod("done", on("n"), gpus("0"), func(p *corev1.Pod) { p.Status.Phase = corev1.PodSucceeded }),
		pod("pending", gpus("0")),
	}}
	if vs := GPUOvercommits(&s); len(vs) > 0 {
		t.Errorf("a full, not over-committed node: %s", kinds(vs))
	}
}

func claim(name, device string, share bool, memory int64) *resourcev1.ResourceClaim {
	r := resourcev1.DeviceRequestAllocationResult{Request: "gpu", Driver: "gpu.gantry.dev", Pool: "n", Device: device}
	if share {
		r.ShareID = ptr.To(types.UID("share-" + name))
		r.ConsumedCapacity = map[resourcev1.QualifiedName]resource.Quantity{"memory": *resource.NewQuantity(memory, resource.BinarySI)}
	}
	return &resourcev1.ResourceClaim{
		ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name},
		Status: resourcev1.ResourceClaimStatus{Allocation: &resourcev1.AllocationResult{
			Devices: resourcev1.DeviceAllocationResult{Results: []resourcev1.DeviceRequestAllocationResult{r}}}},
	}
}

func slice(device string, memory int64) *resourcev1.ResourceSlice {
	return &resourcev1.ResourceSlice{Spec: resourcev1.ResourceSliceSpec{
		Driver: "gpu.gantry.dev", Pool: resourcev1.ResourcePool{Name: "n"},
		Devices: []resourcev1.Device{{Name: device, AllowMultipleAllocations: ptr.To(true),
			Capacity: map[resourcev1.QualifiedName]resourcev1.DeviceCapacity{"memory": {Value: *resource.NewQuantity(memory, resource.BinarySI)}}}},
	}}
}

func TestClaimOvercommits(t *testing.T) {
	slices := []*resourcev1.ResourceSlice{slice("gpu-0", 1000)}
	cases := []struct {
		name   string
		claims []*resourcev1.ResourceClaim
		want   string
	}{
		{"two exclusive", []*resourcev1.ResourceClaim{claim("a", "gpu-0", false, 0), claim("b", "gpu-0", false, 0)}, "GPUOvercommit device gpu.gantry.dev/n/gpu-0"},
		{"exclusive and share", []*resourcev1.ResourceClaim{claim("a", "gpu-0", false, 0), claim("b", "gpu-0", true, 10)}, "GPUOvercommit device gpu.gantry.dev/n/gpu-0"},
		{"shares over capacity", []*resourcev1.ResourceClaim{claim("a", "gpu-0", true, 600), claim("b", "gpu-0", true, 600)}, "GPUOvercommit device gpu.gantry.dev/n/gpu-0"},
		{"shares that fit", []*resourcev1.ResourceClaim{claim("a", "gpu-0", true, 500), claim("b", "gpu-0", true, 500)}, ""},
		{"two devices", []*resourcev1.ResourceClaim{claim("a", "gpu-0", false, 0), claim("b", "gpu-1", false, 0)}, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := kinds(GPUOvercommits(&State{Claims: c.claims, Slices: slices}))
			if got != c.want {
				t.Errorf("violations = %q, want %q", got, c.want)
			}
		})
	}
}

func TestPartialGangReportedAfterGrace(t *testing.T) {
	tr := NewTracker(Rules{GangGrace: 5 * time.Second})
	nodes := []*corev1.Node{node("n", 8, "")}
	tr.Observe(&State{Now: t0, Nodes: nodes})
	pending := State{Now: t0, Nodes: nodes, Pods: []*corev1.Pod{pod("a", member("g", "2")), pod("b", member("g", "2"))}}
	if vs := tr.Observe(&pending); len(vs) > 0 {
		t.Fatalf("a pending gang: %s", kinds(vs))
	}
	half := State{Now: t0.Add(time.Second), Nodes: nodes, Pods: []*corev1.Pod{pod("a", member("g", "2"), on("n")), pod("b", member("g", "2"))}}
	if vs := tr.Observe(&half); len(vs) > 0 {
		t.Fatalf("partial within the grace: %s", kinds(vs))
	}
	half.Now = t0.Add(7 * time.Second)
	if got := kinds(tr.Observe(&half)); got != "PartialGang gang podgroup:ns/g" {
		t.Fatalf("partial past the grace: %q", got)
	}
}

func TestBaselineIsNotReported(t *testing.T) {
	// A checker attached to a running cluster: what it finds partial or over a limit
	// at its first look, it did not see happen.
	tr := NewTracker(Rules{GangGrace: time.Second, BoundTime: time.Hour})
	limited := &schedv1.Queue{ObjectMeta: metav1.ObjectMeta{Name: "default"}, Spec: schedv1.QueueSpec{
		Resources: &schedv1.QueueResources{GPU: &schedv1.QueueResource{Limit: 1}}}}
	s := State{Now: t0, Queues: []*schedv1.Queue{limited}, Pods: []*corev1.Pod{
		pod("a", member("g", "2"), on("n"), requestGPUs(2)), pod("b", member("g", "2"))}}
	tr.Observe(&s)
	s.Now = t0.Add(time.Minute)
	if vs := tr.Observe(&s); len(vs) > 0 {
		t.Fatalf("baseline reported: %s", kinds(vs))
	}
	// A gang that appears later, already partly bound, was bound under watch.
	s.Pods = append(s.Pods, pod("c", member("h", "2"), on("n")), pod("d", member("h", "2")))
	tr.Observe(&s)
	s.Now = t0.Add(2 * time.Minute)
	if got := kinds(tr.Observe(&s)); got != "PartialGang gang podgroup:ns/h" {
		t.Fatalf("a new gang partly bound: %q", got)
	}
}

func TestGangThatLosesMembersIsNotAPartialStart(t *testing.T) {
	tr := NewTracker(Rules{GangGrace: time.Second})
	whole := State{Now: t0, Pods: []*corev1.Pod{pod("a", member("g", "2"), on("n")), pod("b", member("g", "2"), on("n"))}}
	tr.Observe(&whole)
	// b's node went away; its replacement waits.
	lost := State{Now: t0.Add(10 * time.Second), Pods: []*corev1.Pod{pod("a", member("g", "2"), on("n")), pod("b2", member("g", "2"))}}
	if vs := tr.Observe(&lost); len(vs) > 0 {
		t.Fatalf("a gang that lost a member: %s", kinds(vs))
	}
	if err := tr.Settled(&lost); err == nil {
		t.Fatal("Settled accepted a partly bound gang")
	}
}

func TestRayGangMinimumAndHead(t *testing.T) {
	rc := &rayv1.RayCluster{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "rc"}, Spec: rayv1.RayClusterSpec{
		WorkerGroupSpecs: []rayv1.WorkerGroupSpec{
			{GroupName: "gpu", Replicas: ptr.To[int32](2), MinReplicas: ptr.To[int32](1), NumOfHosts: 2},
			{GroupName: "off", Replicas: ptr.To[int32](4), Suspend: ptr.To(true)},
		}}}
	ray := func(name, kind string, opts ...podOpt) *corev1.Pod {
		return pod(name, append([]podOpt{label(rayClusterLabel, "rc"), label(rayNodeTypeLabel, kind)}, opts...)...)
	}
	s := State{RayClusters: []*rayv1.RayCluster{rc}, Pods: []*corev1.Pod{
		ray("head", "head"), ray("w1", "worker", on("n")), ray("w2", "worker", on("n")), ray("w3", "worker")}}
	g := Gangs(&s)["ray:ns/rc"]
	if g == nil || g.Minimum != 3 || !g.Partial() {
		t.Fatalf("workers bound before the head: %+v, want minimum 3 and partial", g)
	}
	s.Pods[0] = ray("head", "head", on("n"))
	if g := Gangs(&s)["ray:ns/rc"]; g.Partial() {
		t.Fatalf("head and the minimum bound, an elastic worker pending: %+v is not partial", g)
	}
}

func TestUnexplainedPods(t *testing.T) {
	explained := pod("explained", func(p *corev1.Pod) {
		p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable"}}
	})
	s := State{Now: t0.Add(2 * time.Minute), Pods: []*corev1.Pod{
		pod("lost"), explained, pod("bound", on("n")),
		pod("other", func(p *corev1.Pod) { p.Spec.SchedulerName = "default-scheduler" }),
		pod("young", func(p *corev1.Pod) { p.CreationTimestamp = metav1.NewTime(t0.Add(110 * time.Second)) }),
	}}
	if got := kinds(UnexplainedPods(&s, []string{"gantry-scheduler"}, time.Minute)); got != "LostPod pod ns/lost" {
		t.Errorf("violations = %q, want only the lost pod", got)
	}
}

func TestQueueOverLimitOnlyAfterABind(t *testing.T) {
	q := func(name, parent string, limit float64) *schedv1.Queue {
		return &schedv1.Queue{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: schedv1.QueueSpec{ParentQueue: parent,
			Resources: &schedv1.QueueResources{GPU: &schedv1.QueueResource{Quota: 0, Limit: limit}}}}
	}
	queues := []*schedv1.Queue{q("root", "", 2), q("team", "root", -1)}
	tr := NewTracker(Rules{})
	tr.Observe(&State{Now: t0, Queues: queues})
	s := State{Now: t0, Queues: queues, Pods: []*corev1.Pod{pod("a", on("n"), label(labelQueue, "team"), requestGPUs(2))}}
	if vs := tr.Observe(&s); len(vs) > 0 {
		t.Fatalf("at the limit: %s", kinds(vs))
	}
	s.Pods = append(s.Pods, pod("b", on("n"), label(labelQueue, "team"), gpus("0:100"), annotate(annotationGPUFraction, "0.5")))
	if got := kinds(tr.Observe(&s)); got != "QueueOverLimit queue root" {
		t.Fatalf("a bind past the parent's limit: %q", got)
	}
	// Lowering a limit under running work is not a scheduling error.
	tr2 := NewTracker(Rules{})
	tr2.Observe(&State{Queues: queues, Pods: s.Pods})
	if vs := tr2.Observe(&State{Queues: []*schedv1.Queue{q("root", "", 1), q("team", "root", -1)}, Pods: s.Pods}); len(vs) > 0 {
		t.Fatalf("limit lowered under running work: %s", kinds(vs))
	}
}

func TestDoubleEviction(t *testing.T) {
	ev := func(name string, count int32) *corev1.Event {
		return &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Reason: "Preempted", Count: count,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: "ns", Name: "victim", UID: "uid-victim"}}
	}
	tr := NewTracker(Rules{})
	if vs := tr.ObserveEvent(ev("e1", 1), t0); len(vs) > 0 {
		t.Fatalf("one preemption: %s", kinds(vs))
	}
	if vs := tr.ObserveEvent(ev("e1", 1), t0); len(vs) > 0 {
		t.Fatalf("the same Event seen again: %s", kinds(vs))
	}
	if got := kinds(tr.ObserveEvent(ev("e2", 1), t0)); got != "DoubleEviction pod ns/victim" {
		t.Fatalf("a second Preempted Event: %q", got)
	}
	tr = NewTracker(Rules{})
	if got := kinds(tr.ObserveEvent(ev("e1", 2), t0)); got != "DoubleEviction pod ns/victim" {
		t.Fatalf("an Event counted twice: %q", got)
	}
}

func TestNamespacesScopeTheChecks(t *testing.T) {
	tr := NewTracker(Rules{Namespaces: []string{"mine"}})
	s := State{Now: t0.Add(time.Hour), Pods: []*corev1.Pod{pod("lost")}}
	if vs := tr.Observe(&s); len(vs) > 0 {
		t.Errorf("a pod of another namespace: %s", kinds(vs))
	}
}
