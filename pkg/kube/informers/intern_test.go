package informers

import (
	"fmt"
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func sameMap(a, b any) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func slimmed(t *testing.T, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := slimPod(p)
	if err != nil {
		t.Fatal(err)
	}
	return out.(*corev1.Pod)
}

// Two pods of one shape, slimmed from separate API objects, hold one requests map,
// one container slice, one toleration slice and one node selector; a pod of another
// shape holds its own, and its values are its own.
func TestSlimPodsOfOneShapeShareTheirValues(t *testing.T) {
	a, b := benchPod(1, ""), benchPod(2, "")
	a.Spec.NodeSelector = map[string]string{"pool": "a100", "zone": "z1"}
	b.Spec.NodeSelector = map[string]string{"zone": "z1", "pool": "a100"}
	sa, sb := slimmed(t, a), slimmed(t, b)
	if !sameMap(sa.Spec.Containers[0].Resources.Requests, sb.Spec.Containers[0].Resources.Requests) {
		t.Error("two pods of one shape hold two requests maps")
	}
	if &sa.Spec.Containers[0] != &sb.Spec.Containers[0] {
		t.Error("two pods of one shape hold two container slices")
	}
	if &sa.Spec.Tolerations[0] != &sb.Spec.Tolerations[0] {
		t.Error("two pods with the default tolerations hold two toleration slices")
	}
	if !sameMap(sa.Spec.NodeSelector, sb.Spec.NodeSelector) {
		t.Error("two pods with one node selector hold two maps")
	}

	c := benchPod(3, "")
	c.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"] = resource.MustParse("2")
	c.Spec.Tolerations[0].TolerationSeconds = ptr(int64(60))
	c.Spec.NodeSelector = map[string]string{"pool": "h100", "zone": "z1"}
	sc := slimmed(t, c)
	if sameMap(sa.Spec.Containers[0].Resources.Requests, sc.Spec.Containers[0].Resources.Requests) ||
		&sa.Spec.Containers[0] == &sc.Spec.Containers[0] {
		t.Error("a pod asking for 2 GPUs shares the requests of a pod asking for 1")
	}
	if got := sc.Spec.Containers[0].Resources.Requests["nvidia.com/gpu"]; got.Value() != 2 {
		t.Errorf("the 2-GPU pod's slim requests ask for %s GPUs", got.String())
	}
	if &sa.Spec.Tolerations[0] == &sc.Spec.Tolerations[0] || *sc.Spec.Tolerations[0].TolerationSeconds != 60 {
		t.Error("tolerations with other seconds were shared")
	}
	if sameMap(sa.Spec.NodeSelector, sc.Spec.NodeSelector) || sc.Spec.NodeSelector["pool"] != "h100" {
		t.Error("another node selector was shared")
	}
}

// A container with a host port keeps a slice of its own (the ports are the pod's),
// but shares its requests.
func TestSlimPodWithHostPortKeepsItsContainers(t *testing.T) {
	a, b := benchPod(1, ""), benchPod(2, "")
	b.Spec.Containers[0].Ports = []corev1.ContainerPort{{ContainerPort: 80, HostPort: 8080}}
	sa, sb := slimmed(t, a), slimmed(t, b)
	if &sa.Spec.Containers[0] == &sb.Spec.Containers[0] {
		t.Fatal("a container with a host port shares the slice of one without")
	}
	if len(sb.Spec.Containers[0].Ports) != 1 || len(sa.Spec.Containers[0].Ports) != 0 {
		t.Fatalf("host ports: %v and %v, want none and one", sa.Spec.Containers[0].Ports, sb.Spec.Containers[0].Ports)
	}
	if !sameMap(sa.Spec.Containers[0].Resources.Requests, sb.Spec.Containers[0].Resources.Requests) {
		t.Error("equal requests were not shared")
	}
}

// The tables stay bounded when every pod is different.
func TestInternerIsBounded(t *testing.T) {
	in := newInterner()
	for i := range 3 * maxInterned {
		p := &corev1.Pod{Spec: corev1.PodSpec{
			NodeSelector: map[string]string{"n": fmt.Sprint(i)},
			Containers: []corev1.Container{{Name: "c", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: *resource.NewMilliQuantity(int64(i+1), resource.DecimalSI)}}}},
		}}
		in.pod(p)
		if got := p.Spec.NodeSelector["n"]; got != fmt.Sprint(i) {
			t.Fatalf("pod %d got the node selector of pod %s", i, got)
		}
		if got := p.Spec.Containers[0].Resources.Requests.Cpu().MilliValue(); got != int64(i+1) {
			t.Fatalf("pod %d got %dm of CPU, want %dm", i, got, i+1)
		}
	}
	if len(in.lists) > maxInterned || len(in.containers) > maxInterned || len(in.selectors) > maxInterned {
		t.Errorf("tables hold %d lists, %d container slices, %d selectors; want at most %d each",
			len(in.lists), len(in.containers), len(in.selectors), maxInterned)
	}
}
