package gang

import (
	"os"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/pkg/names"
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/yaml"
)

const ns = "default"

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// loadSeed parses one of the seed manifests copied into testdata, strictly, so that a
// field KubeRay does not know fails the test.
func loadSeed[T any](t *testing.T, file string) *T {
	t.Helper()
	data, err := os.ReadFile("testdata/" + file)
	if err != nil {
		t.Fatal(err)
	}
	obj := new(T)
	if err := yaml.UnmarshalStrict(data, obj); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return obj
}

func seedRayCluster(t *testing.T) *rayv1.RayCluster {
	c := loadSeed[rayv1.RayCluster](t, "raycluster-train.yaml")
	c.Namespace = ns
	return c
}

func seedRayService(t *testing.T) *rayv1.RayService {
	s := loadSeed[rayv1.RayService](t, "rayservice-inference.yaml")
	s.Namespace = ns
	return s
}

// clusterOf builds the RayCluster KubeRay creates for a RayService or RayJob: the
// owner's labels, the origin labels, and a controller reference to the owner.
func clusterOf(owner metav1.Object, kind, name string, spec rayv1.RayClusterSpec) *rayv1.RayCluster {
	labels := map[string]string{}
	for k, v := range owner.GetLabels() {
		labels[k] = v
	}
	labels[names.LabelRayOriginatedCRD] = kind
	labels[names.LabelRayOriginatedName] = owner.GetName()
	return &rayv1.RayCluster{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: owner.GetNamespace(), Labels: labels,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "ray.io/v1", Kind: kind, Name: owner.GetName(), Controller: ptr.To(true)}},
		},
		Spec: spec,
	}
}

type podOption func(*corev1.Pod)

// pod returns a pending pod created at epoch + age seconds.
func pod(name string, age int, opts ...podOption) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: ns, Labels: map[string]string{}, Annotations: map[string]string{},
			CreationTimestamp: metav1.NewTime(epoch.Add(time.Duration(age) * time.Second)),
		},
		Status: corev1.PodStatus{Phase: corev1.PodPending},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

// rayPod is a pod as KubeRay creates it for a cluster: labels and controller reference.
func rayPod(cluster, nodeType, group, name string, age int, opts ...podOption) *corev1.Pod {
	base := []podOption{
		label(names.LabelRayCluster, cluster), label(names.LabelRayNodeType, nodeType), label(names.LabelRayGroup, group),
		label("ray.io/is-ray-node", "yes"),
		ownedBy("ray.io/v1", "RayCluster", cluster),
	}
	return pod(name, age, append(base, opts...)...)
}

func head(cluster string, opts ...podOption) *corev1.Pod {
	return rayPod(cluster, "head", "headgroup", cluster+"-head", 0, opts...)
}

func worker(cluster, group, name string, age int, opts ...podOption) *corev1.Pod {
	return rayPod(cluster, "worker", group, name, age, opts...)
}

func label(k, v string) podOption { return func(p *corev1.Pod) { p.Labels[k] = v } }

func annotate(k, v string) podOption { return func(p *corev1.Pod) { p.Annotations[k] = v } }

func boundTo(node string) podOption {
	return func(p *corev1.Pod) { p.Spec.NodeName = node; p.Status.Phase = corev1.PodRunning }
}

func finished(phase corev1.PodPhase) podOption {
	return func(p *corev1.Pod) { p.Spec.NodeName = "node-1"; p.Status.Phase = phase }
}

func terminating() podOption {
	return func(p *corev1.Pod) { now := metav1.NewTime(epoch); p.DeletionTimestamp = &now }
}

func priorityClass(name string) podOption {
	return func(p *corev1.Pod) { p.Spec.PriorityClassName = name }
}

func replica(name string) podOption { return label(names.LabelRayReplicaName, name) }

func ownedBy(apiVersion, kind, name string) podOption {
	return func(p *corev1.Pod) {
		p.OwnerReferences = append(p.OwnerReferences, metav1.OwnerReference{
			APIVersion: apiVersion, Kind: kind, Name: name, Controller: ptr.To(true),
		})
	}
}

func workerGroup(name string, minReplicas, replicas *int32, hosts int32) rayv1.WorkerGroupSpec {
	return rayv1.WorkerGroupSpec{
		GroupName: name, MinReplicas: minReplicas, Replicas: replicas, MaxReplicas: ptr.To[int32](10), NumOfHosts: hosts,
	}
}
