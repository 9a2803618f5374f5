package gang

import (
	"sort"
	"strings"
	"testing"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// wantGang is what a test expects of one gang; zero fields are checked too, except
// warnings (checked only when set).
type wantGang struct {
	source            Source
	minMember         int
	members           int
	elastic           []string // pod names
	queue             string
	priorityClassName string
	owner             string
	missing           string
	preemptible       *bool
	belowMinimum      bool
	warning           string
}

type gangCase struct {
	name    string
	objects []any
	pods    []*corev1.Pod
	want    map[model.GangID]wantGang
}

func runGangCases(t *testing.T, cases []gangCase) {
	t.Helper()
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			lookup, err := NewStaticLookup(tc.objects...)
			if err != nil {
				t.Fatal(err)
			}
			gangs := Group(tc.pods, lookup)
			got := map[model.GangID]*Gang{}
			for _, g := range gangs {
				got[g.ID] = g
			}
			if len(got) != len(tc.want) {
				ids := make([]string, 0, len(got))
				for id := range got {
					ids = append(ids, string(id))
				}
				t.Fatalf("got gangs %v, want %d", ids, len(tc.want))
			}
			for id, want := range tc.want {
				g := got[id]
				if g == nil {
					t.Errorf("no gang %s", id)
					continue
				}
				checkGang(t, g, want)
			}
		})
	}
}

func checkGang(t *testing.T, g *Gang, want wantGang) {
	t.Helper()
	var elastic []string
	for _, m := range g.Members {
		if m.Elastic {
			elastic = append(elastic, m.Pod.Name)
		}
	}
	sort.Strings(elastic)
	sort.Strings(want.elastic)
	checks := []struct {
		what      string
		got, want any
	}{
		{"source", g.Source, want.source},
		{"minMember", g.MinMember, want.minMember},
		{"members", len(g.Members), want.members},
		{"elastic", strings.Join(elastic, ","), strings.Join(want.elastic, ",")},
		{"queue", g.Queue, want.queue},
		{"priority class", g.PriorityClassName, want.priorityClassName},
		{"owner", g.Owner, want.owner},
		{"missing", g.Missing, want.missing},
		{"preemptible", fmtBool(g.Preemptible), fmtBool(want.preemptible)},
		{"below minimum", g.BelowMinimum(), want.belowMinimum},
	}
	for _, c := range checks {
		if c.got != c.want {
			t.Errorf("gang %s: %s = %v, want %v", g.ID, c.what, c.got, c.want)
		}
	}
	if want.warning != "" && !strings.Contains(strings.Join(g.Warnings, "\n"), want.warning) {
		t.Errorf("gang %s: warnings %q, want one containing %q", g.ID, g.Warnings, want.warning)
	}
}

func fmtBool(b *bool) string {
	if b == nil {
		return "unset"
	}
	if *b {
		return "true"
	}
	return "false"
}

func TestSeedRayCluster(t *testing.T) {
	c := seedRayCluster(t)
	name := c.Name
	kai := label(names.LabelQueueKAI, "team-a") // KubeRay with batchScheduler.name=kai-scheduler
	id := rayGangID(ns, name)
	runGangCases(t, []gangCase{
		{
			name:    "head and worker are the minimum; the autoscaled second worker is elastic",
			objects: []any{c},
			pods: []*corev1.Pod{
				head(name, kai, boundTo("node-1")),
				worker(name, "worker", name+"-worker-a", 1, kai, boundTo("node-1")),
				worker(name, "worker", name+"-worker-b", 2, kai),
			},
			want: map[model.GangID]wantGang{id: {
				source: SourceRayCluster, minMember: 2, members: 3, elastic: []string{name + "-worker-b"},
				queue: "team-a", priorityClassName: "train", owner: "RayCluster/" + name,
			}},
		},
		{
			name:    "only the head exists yet: the gang waits for its worker; queue from the cluster's label",
			objects: []any{c},
			pods:    []*corev1.Pod{head(name)},
			want: map[model.GangID]wantGang{id: {
				source: SourceRayCluster, minMember: 2, members: 1, queue: "team-a", priorityClassName: "train",
				owner: "RayCluster/" + name, missing: "waiting for 1 of 2 pods to be created", belowMinimum: true,
			}},
		},
		{
			name:    "a failed worker does not count; its pending replacement is in the minimum",
			objects: []any{c},
			pods: []*corev1.Pod{
				head(name, boundTo("node-1")),
				worker(name, "worker", name+"-worker-a", 1, finished(corev1.PodFailed)),
				worker(name, "worker", name+"-worker-b", 2),
			},
			want: map[model.GangID]wantGang{id: {
				source: SourceRayCluster, minMember: 2, members: 3, queue: "team-a", priorityClassName: "train",
				owner: "RayCluster/" + name,
			}},
		},
		{
			name:    "a terminating worker does not count",
			objects: []any{c},
			pods: []*corev1.Pod{
				head(name, boundTo("node-1")),
				worker(name, "worker", name+"-worker-a", 1, boundTo("node-1"), terminating()),
			},
			want: map[model.GangID]wantGang{id: {
				source: SourceRayCluster, minMember: 2, members: 2, queue: "team-a", priorityClassName: "train",
				owner: "RayCluster/" + name, missing: "waiting for 1 of 2 pods to be created", belowMinimum: true,
			}},
		},
		{
			name:    "the bound worker is kept in the minimum over an older pending one",
			objects: []any{c},
			pods: []*corev1.Pod{
				head(name, boundTo("node-1")),
				worker(name, "worker", name+"-worker-old", 1),
				worker(name, "worker", name+"-worker-new", 5, boundTo("node-2")),
			},
			want: map[model.GangID]wantGang{id: {
				source: SourceRayCluster, minMember: 2, members: 3, elastic: []string{name + "-worker-old"},
				queue: "team-a", priorityClassName: "train", owner: "RayCluster/" + name,
			}},
		},
		{
			name: "cluster not known yet: hold all its pods",
			pods: []*corev1.Pod{head("ghost"), worker("ghost", "worker", "ghost-worker-a", 1)},
			want: map[model.GangID]wantGang{rayGangID(ns, "ghost"): {
				source: SourceRayCluster, minMember: 2, members: 2,
				missing: "RayCluster default/ghost is not known yet: waiting for it before starting any of its pods",
			}},
		},
	})
}

func TestSeedRayServiceUpgradeMakesTwoGangs(t *testing.T) {
	svc := seedRayService(t)
	active := clusterOf(svc, "RayService", svc.Name+"-abcde", svc.Spec.RayClusterSpec)
	pending := clusterOf(svc, "RayService", svc.Name+"-fghij", svc.Spec.RayClusterSpec)
	// Queue and priority must come from the RayService even where the cluster lacks
	// them.
	pending.Labels = map[string]string{}
	owner := "RayService/" + svc.Name
	runGangCases(t, []gangCase{{
		name:    "active and pending clusters are separate gangs, each sized from its own spec",
		objects: []any{svc, active, pending},
		pods: []*corev1.Pod{
			head(active.Name, boundTo("node-1")),
			worker(active.Name, "gpu-group", active.Name+"-gpu-group-a", 1, boundTo("node-1")),
			head(pending.Name),
			worker(pending.Name, "gpu-group", pending.Name+"-gpu-group-a", 1),
		},
		want: map[model.GangID]wantGang{
			rayGangID(ns, active.Name): {
				source: SourceRayCluster, minMember: 2, members: 2, queue: "team-a", priorityClassName: "inference", owner: owner,
			},
			rayGangID(ns, pending.Name): {
				source: SourceRayCluster, minMember: 2, members: 2, queue: "team-a", priorityClassName: "inference", owner: owner,
			},
		},
	}})
}

func TestRayJobSubmitterIsNotAGangMember(t *testing.T) {
	spec := rayv1.RayClusterSpec{WorkerGroupSpecs: []rayv1.WorkerGroupSpec{workerGroup("gpu", ptr.To[int32](2), ptr.To[int32](2), 1)}}
	job := &rayv1.RayJob{
		ObjectMeta: metav1.ObjectMeta{Name: "train-job", Namespace: ns, Labels: map[string]string{
			names.LabelQueue: "team-b", names.LabelRayPriorityClass: "train",
		}},
		Spec: rayv1.RayJobSpec{SubmissionMode: rayv1.K8sJobMode, RayClusterSpec: &spec},
	}
	cluster := clusterOf(job, "RayJob", "train-job-x7k2p", spec)
	cluster.Labels = map[string]string{names.LabelRayOriginatedCRD: "RayJob", names.LabelRayOriginatedName: job.Name}
	submitter := pod("train-job-q9w8e", 10, ownedBy("batch/v1", "Job", job.Name), label(names.LabelJobName, job.Name))
	runGangCases(t, []gangCase{{
		name:    "K8sJobMode",
		objects: []any{job, cluster},
		pods: []*corev1.Pod{
			head(cluster.Name, boundTo("node-1")),
			worker(cluster.Name, "gpu", cluster.Name+"-gpu-a", 1, boundTo("node-1")),
			worker(cluster.Name, "gpu", cluster.Name+"-gpu-b", 1, boundTo("node-2")),
			submitter,
		},
		want: map[model.GangID]wantGang{
			rayGangID(ns, cluster.Name): {
				source: SourceRayCluster, minMember: 3, members: 3, queue: "team-b", priorityClassName: "train", owner: "RayJob/train-job",
			},
			model.GangID(ns + "/" + submitter.Name): {
				source: SourceRayJobSubmitter, minMember: 1, members: 1, queue: "team-b", priorityClassName: "train", owner: "RayJob/train-job",
			},
		},
	}})
}

func TestRayClusterWithSeveralWorkerGroups(t *testing.T) {
	cluster := &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{Name: "multi", Namespace: ns, Labels: map[string]string{names.LabelQueue: "research"}},
		Spec: rayv1.RayClusterSpec{WorkerGroupSpecs: []rayv1.WorkerGroupSpec{
			workerGroup("cpu", ptr.To[int32](2), ptr.To[int32](3), 1),       // 2
			workerGroup("multihost", ptr.To[int32](1), ptr.To[int32](2), 4), // 1 replica × 4 hosts
			func() rayv1.WorkerGroupSpec { // suspended: 0, not 3
				g := workerGroup("suspended", ptr.To[int32](3), ptr.To[int32](3), 1)
				g.Suspend = ptr.To(true)
				return g
			}(),
			workerGroup("no-min", nil, ptr.To[int32](2), 1),                // minReplicas unset: replicas 2
			workerGroup("zero-min", ptr.To[int32](0), ptr.To[int32](1), 1), // autoscaled from 0
		}},
	}
	// Head + 2 + 4 + 0 + 2 + 0.
	const minimum = 9
	full := []*corev1.Pod{
		head("multi", boundTo("n1")),
		worker("multi", "cpu", "cpu-a", 1, boundTo("n1")),
		worker("multi", "cpu", "cpu-b", 2, boundTo("n1")),
		worker("multi", "cpu", "cpu-c", 3),
		worker("multi", "suspended", "suspended-a", 1),
		worker("multi", "no-min", "no-min-a", 1),
		worker("multi", "no-min", "no-min-b", 1),
		worker("multi", "zero-min", "zero-min-a", 1),
	}
	// Two multi-host replicas of 4 hosts; the second (pending) one is elastic as a whole.
	for i, host := range []string{"0", "1", "2", "3"} {
		full = append(full,
			worker("multi", "multihost", "mh-r2-"+host, 1, replica("multihost-r2")),
			worker("multi", "multihost", "mh-r1-"+host, 2+i, replica("multihost-r1"), boundTo("n2")),
		)
	}
	runGangCases(t, []gangCase{
		{
			name:    "minimum from every group; extras, suspended and zero-min workers are elastic",
			objects: []any{cluster},
			pods:    full,
			want: map[model.GangID]wantGang{rayGangID(ns, "multi"): {
				source: SourceRayCluster, minMember: minimum, members: len(full),
				elastic: []string{"cpu-c", "suspended-a", "zero-min-a", "mh-r2-0", "mh-r2-1", "mh-r2-2", "mh-r2-3"},
				queue:   "research", owner: "RayCluster/multi",
			}},
		},
		{
			name:    "a shortage in one group is not hidden by extras in another",
			objects: []any{cluster},
			pods: []*corev1.Pod{
				head("multi"),
				worker("multi", "cpu", "cpu-a", 1), worker("multi", "cpu", "cpu-b", 1), worker("multi", "cpu", "cpu-c", 1),
				worker("multi", "zero-min", "zero-min-a", 1), worker("multi", "zero-min", "zero-min-b", 1),
				worker("multi", "zero-min", "zero-min-c", 1), worker("multi", "zero-min", "zero-min-d", 1),
				worker("multi", "zero-min", "zero-min-e", 1), worker("multi", "zero-min", "zero-min-f", 1),
			},
			want: map[model.GangID]wantGang{rayGangID(ns, "multi"): {
				source: SourceRayCluster, minMember: minimum, members: 10,
				elastic: []string{"cpu-c", "zero-min-a", "zero-min-b", "zero-min-c", "zero-min-d", "zero-min-e", "zero-min-f"},
				queue:   "research", owner: "RayCluster/multi",
				// multihost 4 + no-min 2.
				missing: "waiting for 6 of 9 pods to be created", belowMinimum: true,
			}},
		},
	})
}

func TestExplicitAndLoneGangs(t *testing.T) {
	trainer := &schedulingv1alpha1.PodGroup{
		ObjectMeta: metav1.ObjectMeta{Name: "trainer", Namespace: ns},
		Spec: schedulingv1alpha1.PodGroupSpec{
			MinMember: 3, Queue: "team-a", PriorityClassName: "train",
			SubGroups: []schedulingv1alpha1.SubGroup{{Name: "leader", MinMember: 1}, {Name: "workers", MinMember: 2}},
		},
	}
	member := func(group, name string, age int, opts ...podOption) *corev1.Pod {
		base := []podOption{annotate(names.AnnotationPodGroup, "trainer")}
		if group != "" {
			base = append(base, label(names.LabelSubGroup, group))
		}
		return pod(name, age, append(base, opts...)...)
	}
	adhoc := func(name string, opts ...podOption) *corev1.Pod {
		return pod(name, 0, append([]podOption{annotate(names.AnnotationPodGroup, "sweep")}, opts...)...)
	}
	trainerID, sweepID := podGroupGangID(ns, "trainer"), podGroupGangID(ns, "sweep")
	runGangCases(t, []gangCase{
		{
			name:    "PodGroup with sub-groups: the extra worker is elastic",
			objects: []any{trainer},
			pods: []*corev1.Pod{
				member("leader", "leader-0", 0), member("workers", "worker-0", 1),
				member("workers", "worker-1", 2), member("workers", "worker-2", 3),
			},
			want: map[model.GangID]wantGang{trainerID: {
				source: SourcePodGroup, minMember: 3, members: 4, elastic: []string{"worker-2"},
				queue: "team-a", priorityClassName: "train", owner: "PodGroup/trainer",
			}},
		},
		{
			name:    "a sub-group short of its minimum is named even when other pods abound",
			objects: []any{trainer},
			pods: []*corev1.Pod{
				member("leader", "leader-0", 0), member("workers", "worker-0", 1),
				member("", "helper-0", 2), member("", "helper-1", 3),
			},
			want: map[model.GangID]wantGang{trainerID: {
				source: SourcePodGroup, minMember: 3, members: 4, elastic: []string{"helper-1"},
				queue: "team-a", priorityClassName: "train", owner: "PodGroup/trainer",
				missing: "waiting for 1 of 2 pods of sub-group workers to be created", belowMinimum: true,
			}},
		},
		{
			name:    "succeeded members count: a completing gang is not below its minimum",
			objects: []any{trainer},
			pods: []*corev1.Pod{
				member("leader", "leader-0", 0, finished(corev1.PodSucceeded)),
				member("workers", "worker-0", 1, finished(corev1.PodSucceeded)),
				member("workers", "worker-1", 2, boundTo("n1")),
			},
			want: map[model.GangID]wantGang{trainerID: {
				source: SourcePodGroup, minMember: 3, members: 3,
				queue: "team-a", priorityClassName: "train", owner: "PodGroup/trainer",
			}},
		},
		{
			name:    "the pod's own queue label and priority class win over the PodGroup's",
			objects: []any{trainer},
			pods: []*corev1.Pod{
				member("leader", "leader-0", 0, label(names.LabelQueueKAI, "team-b"), priorityClass("build")),
				member("workers", "worker-0", 1), member("workers", "worker-1", 2),
			},
			want: map[model.GangID]wantGang{trainerID: {
				source: SourcePodGroup, minMember: 3, members: 3,
				queue: "team-b", priorityClassName: "build", owner: "PodGroup/trainer",
			}},
		},
		{
			name: "annotation without a PodGroup: size from gantry.dev/min-member",
			pods: []*corev1.Pod{
				adhoc("sweep-0", annotate(names.AnnotationMinMember, "3"), label(names.LabelQueue, "team-a")),
				adhoc("sweep-1", annotate(names.AnnotationMinMember, "many")),
			},
			want: map[model.GangID]wantGang{sweepID: {
				source: SourceAnnotation, minMember: 3, members: 2, queue: "team-a",
				missing: "waiting for 1 of 3 pods to be created", belowMinimum: true,
				warning: `pod default/sweep-1: gantry.dev/min-member is "many", not a whole number of at least 1: set it to how many pods must start together`,
			}},
		},
		{
			name: "annotation without any min-member: all present pods together",
			pods: []*corev1.Pod{adhoc("sweep-0"), adhoc("sweep-1"), adhoc("sweep-2")},
			want: map[model.GangID]wantGang{sweepID: {source: SourceAnnotation, minMember: 3, members: 3}},
		},
		{
			name: "a lone pod is a gang of one named after it",
			pods: []*corev1.Pod{
				pod("solo", 0, label(names.LabelQueueKAI, "team-a"), priorityClass("build"), annotate(names.LabelPreemptible, "false")),
				pod("redis-cleanup", 0, label(names.LabelRayNodeType, "redis-cleanup"), label(names.LabelRayCluster, "gone")),
			},
			want: map[model.GangID]wantGang{
				"default/solo": {
					source: SourcePod, minMember: 1, members: 1, queue: "team-a", priorityClassName: "build", preemptible: ptr.To(false),
				},
				"default/redis-cleanup": {source: SourcePod, minMember: 1, members: 1},
			},
		},
		{
			name: "a Job pod whose name matches no RayJob is a plain pod",
			pods: []*corev1.Pod{pod("etl-x1", 0, ownedBy("batch/v1", "Job", "etl"), label(names.LabelJobName, "etl"))},
			want: map[model.GangID]wantGang{"default/etl-x1": {source: SourcePod, minMember: 1, members: 1}},
		},
	})
}

func TestPreemptibleOverrides(t *testing.T) {
	svc := seedRayService(t)
	svc.Labels[names.LabelPreemptible] = "true"
	cluster := clusterOf(svc, "RayService", svc.Name+"-abcde", svc.Spec.RayClusterSpec)
	bad := seedRayCluster(t)
	bad.Annotations = map[string]string{names.LabelPreemptible: "maybe"}
	runGangCases(t, []gangCase{
		{
			name:    "from the top owner's label",
			objects: []any{svc, cluster},
			pods:    []*corev1.Pod{head(cluster.Name), worker(cluster.Name, "gpu-group", "w", 1)},
			want: map[model.GangID]wantGang{rayGangID(ns, cluster.Name): {
				source: SourceRayCluster, minMember: 2, members: 2, queue: "team-a", priorityClassName: "inference",
				owner: "RayService/" + svc.Name, preemptible: ptr.To(true),
			}},
		},
		{
			name:    "a pod's annotation wins over its owner's",
			objects: []any{svc, cluster},
			pods:    []*corev1.Pod{head(cluster.Name, annotate(names.LabelPreemptible, "false")), worker(cluster.Name, "gpu-group", "w", 1)},
			want: map[model.GangID]wantGang{rayGangID(ns, cluster.Name): {
				source: SourceRayCluster, minMember: 2, members: 2, queue: "team-a", priorityClassName: "inference",
				owner: "RayService/" + svc.Name, preemptible: ptr.To(false),
			}},
		},
		{
			name:    "an unreadable value is ignored with a warning",
			objects: []any{bad},
			pods:    []*corev1.Pod{head(bad.Name), worker(bad.Name, "worker", "w", 1)},
			want: map[model.GangID]wantGang{rayGangID(ns, bad.Name): {
				source: SourceRayCluster, minMember: 2, members: 2, queue: "team-a", priorityClassName: "train",
				owner:   "RayCluster/" + bad.Name,
				warning: `RayCluster default/raycluster-sample: gantry.dev/preemptible is "maybe": set it to "true" or "false"`,
			}},
		},
	})
}

func TestModelGang(t *testing.T) {
	c := seedRayCluster(t)
	lookup, _ := NewStaticLookup(c)
	gangs := Group([]*corev1.Pod{
		worker(c.Name, "worker", "w-b", 2), worker(c.Name, "worker", "w-a", 1), head(c.Name),
		worker(c.Name, "worker", "w-done", 0, finished(corev1.PodSucceeded)),
		worker(c.Name, "worker", "w-failed", 0, finished(corev1.PodFailed)),
	}, lookup)
	if len(gangs) != 1 {
		t.Fatalf("got %d gangs", len(gangs))
	}
	g := gangs[0].Model(50, true, 1234)
	want := model.Gang{
		ID: rayGangID(ns, c.Name), Queue: "team-a", Priority: 50, Preemptible: true, MinMember: 2,
		Members: []model.PodID{"default/raycluster-sample-head", "default/w-a", "default/w-b"}, CreatedAt: 1234,
	}
	if g.ID != want.ID || g.Queue != want.Queue || g.Priority != want.Priority || !g.Preemptible ||
		g.MinMember != want.MinMember || g.CreatedAt != want.CreatedAt || g.Missing != "" || g.Succeeded != 1 {
		t.Errorf("Model = %+v, want %+v", g, want)
	}
	if strings.Join(podIDs(g.Members), ",") != strings.Join(podIDs(want.Members), ",") {
		t.Errorf("members = %v, want the head first and no finished pods: %v", g.Members, want.Members)
	}
}

func podIDs(ids []model.PodID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = string(id)
	}
	return out
}

func TestStaticLookupRejectsOtherKinds(t *testing.T) {
	if _, err := NewStaticLookup(&corev1.Pod{}); err == nil {
		t.Error("a Pod is not a gang owner; want an error")
	}
}
