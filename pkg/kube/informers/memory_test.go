package informers

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/gantry-dev/gantry/pkg/gang"
	gcache "github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// BenchmarkMemory reports what the scheduler holds per node and per pod, by layer:
// the informers' stores (objects as slimPod and slimNode leave them), the cache
// (snapshot, indexes, gangs), and what one cycle of the core allocates on a
// cluster with nothing pending (per node). Pods are test/bench's: one GPU, 100m,
// 128Mi, bound to nodes of 20 GPUs, as after a drain of 100,000 pods on 5,000 nodes,
// scaled to nodes×20 pods.
//
//	go test ./pkg/kube/informers -run '^$' -bench Memory -benchtime 1x
func BenchmarkMemory(b *testing.B) {
	for _, nodes := range []int{1000, 5000} {
		b.Run(fmt.Sprintf("nodes=%d", nodes), func(b *testing.B) {
			for range b.N {
				measureMemory(b, nodes, nodes*20)
			}
		})
	}
}

func measureMemory(b *testing.B, nodes, pods int) {
	per := func(v uint64, n int) float64 { return float64(int64(v)) / float64(n) }
	base := heapInUse()
	apiNodes := make([]any, nodes)
	for i := range apiNodes {
		apiNodes[i], _ = slimNode(benchNode(i))
	}
	apiPods := make([]any, pods)
	for i := range apiPods {
		apiPods[i], _ = slimPod(benchPod(i, nodeName(i/20)))
	}
	stores := heapInUse()
	// The watch-list's first sync hands every slimmed pod to the transform again
	// (slimPodOnce): what a second slimPod of each held while the first were still
	// held, and what slimPodOnce holds.
	again := make([]any, pods)
	for i, p := range apiPods {
		again[i], _ = slimPod(p)
	}
	copied := heapInUse()
	for i, p := range apiPods {
		again[i], _ = slimPodOnce(p)
	}
	kept := heapInUse()
	b.ReportMetric(per(copied-stores, pods), "sync-second-slim-B/pod")
	b.ReportMetric(per(kept-stores, pods), "sync-slim-once-B/pod")
	again = nil
	stores = heapInUse()
	c := gcache.New([]string{"gantry-scheduler"}, &gang.StaticLookup{}, "default")
	for _, n := range apiNodes {
		c.UpsertNode(n.(*corev1.Node))
	}
	afterNodes := heapInUse()
	for _, p := range apiPods {
		c.UpsertPod(p.(*corev1.Pod))
	}
	cached := heapInUse()
	s, err := scheduler.New("fgd", scheduler.Config{Preemption: true})
	if err != nil {
		b.Fatal(err)
	}
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	now := time.Now()
	c.Commit(c.Prepare(context.Background(), now, s.ScheduleSkipping).Plan, now)
	runtime.ReadMemStats(&after)
	b.ReportMetric(per(stores-base, pods+nodes), "informer-B/object")
	b.ReportMetric(per(afterNodes-stores, nodes), "cache-B/node")
	b.ReportMetric(per(cached-afterNodes, pods), "cache-B/pod")
	b.ReportMetric(per(after.TotalAlloc-before.TotalAlloc, nodes), "cycle-alloc-B/node")
	runtime.KeepAlive(apiNodes)
	runtime.KeepAlive(apiPods)
	runtime.KeepAlive(c)
	c, apiPods = nil, nil
	measurePending(b, apiNodes, pods)
}

// measurePending reports what the cache holds per pending pod (a drain's backlog,
// each pod its own gang): the snapshot's pod and gang, the indexes, and the order
// and queue charges kept for the cycles (scheduler.Order).
func measurePending(b *testing.B, apiNodes []any, pods int) {
	c := gcache.New([]string{"gantry-scheduler"}, &gang.StaticLookup{}, "default")
	for _, n := range apiNodes {
		c.UpsertNode(n.(*corev1.Node))
	}
	apiPods := make([]any, pods)
	for i := range apiPods {
		apiPods[i], _ = slimPod(benchPod(i, ""))
	}
	before := heapInUse()
	for _, p := range apiPods {
		c.UpsertPod(p.(*corev1.Pod))
	}
	after := heapInUse()
	b.ReportMetric(float64(int64(after-before))/float64(pods), "cache-B/pending-pod")
	runtime.KeepAlive(apiPods)
	runtime.KeepAlive(c)
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

func nodeName(i int) string { return fmt.Sprintf("gpu-node-%05d", i) }

// benchNode and benchPod are test/bench's node and pod (workload.go), as the API
// server returns them: with admission's defaults, tolerations and kube-api-access
// volume.
func benchNode(i int) *corev1.Node {
	alloc := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("96"), corev1.ResourceMemory: resource.MustParse("1024Gi"),
		corev1.ResourcePods: resource.MustParse("110"), "nvidia.com/gpu": resource.MustParse("20"),
	}
	name := nodeName(i)
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: types.UID(fmt.Sprintf("uid-%s", name)), ResourceVersion: "12345",
			Labels: map[string]string{"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}},
		Status: corev1.NodeStatus{Capacity: alloc, Allocatable: alloc},
	}
}

func benchPod(i int, node string) *corev1.Pod {
	requests := corev1.ResourceList{
		corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("128Mi"), "nvidia.com/gpu": resource.MustParse("1"),
	}
	name := fmt.Sprintf("pod-%05d", i)
	access := fmt.Sprintf("kube-api-access-%05x", i)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "bench", UID: types.UID("uid-" + name), ResourceVersion: "12345",
			CreationTimestamp: metav1.Now()},
		Spec: corev1.PodSpec{
			SchedulerName: "gantry-scheduler", NodeName: node,
			RestartPolicy: corev1.RestartPolicyAlways, DNSPolicy: corev1.DNSClusterFirst, // the API server's defaults
			ServiceAccountName: "default", EnableServiceLinks: ptr(true), // admission's, as the two below
			Containers: []corev1.Container{{Name: "main", Image: "registry.k8s.io/pause:3.10",
				Resources:    corev1.ResourceRequirements{Requests: requests, Limits: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}},
				VolumeMounts: []corev1.VolumeMount{{Name: access, ReadOnly: true, MountPath: "/var/run/secrets/kubernetes.io/serviceaccount"}}}},
			Volumes: []corev1.Volume{apiAccessVolume(access)},
			Tolerations: []corev1.Toleration{
				{Key: "node.kubernetes.io/not-ready", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr(int64(300))},
			},
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending, Conditions: []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}}},
	}
}

// apiAccessVolume is the projected volume the API server's ServiceAccount admission
// adds to every pod (a token, the cluster's CA and the pod's namespace).
func apiAccessVolume(name string) corev1.Volume {
	return corev1.Volume{Name: name, VolumeSource: corev1.VolumeSource{Projected: &corev1.ProjectedVolumeSource{
		DefaultMode: ptr(int32(0o644)),
		Sources: []corev1.VolumeProjection{
			{ServiceAccountToken: &corev1.ServiceAccountTokenProjection{ExpirationSeconds: ptr(int64(3607)), Path: "token"}},
			{ConfigMap: &corev1.ConfigMapProjection{LocalObjectReference: corev1.LocalObjectReference{Name: "kube-root-ca.crt"},
				Items: []corev1.KeyToPath{{Key: "ca.crt", Path: "ca.crt"}}}},
			{DownwardAPI: &corev1.DownwardAPIProjection{Items: []corev1.DownwardAPIVolumeFile{{Path: "namespace",
				FieldRef: &corev1.ObjectFieldSelector{APIVersion: "v1", FieldPath: "metadata.namespace"}}}}},
		},
	}}}
}

func ptr[T any](v T) *T { return &v }
