package cache

import (
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	resourcehelper "k8s.io/component-helpers/resource"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

func TestPodDemand(t *testing.T) {
	gpus := func(n string) corev1.ResourceList {
		return corev1.ResourceList{names.ExtendedGPUResource: resource.MustParse(n)}
	}
	tests := []struct {
		name        string
		annotations map[string]string
		requests    corev1.ResourceList
		want        model.GPUDemand
		wantErr     string
	}{
		{name: "no GPU", requests: corev1.ResourceList{}},
		{name: "two whole GPUs", requests: gpus("2"), want: model.GPUDemand{Count: 2}},
		{name: "memory share", annotations: map[string]string{names.AnnotationGPUMemory: "20Gi"}, want: model.GPUDemand{Count: 1, MemoryBytes: 20 << 30}},
		{name: "quarter", annotations: map[string]string{names.AnnotationGPUFraction: "0.25"}, want: model.GPUDemand{Count: 1, FractionMilli: 250}},
		{name: "fraction 1 is a whole GPU", annotations: map[string]string{names.AnnotationGPUFraction: "1"}, requests: gpus("1"), want: model.GPUDemand{Count: 1}},
		{name: "share of each of two GPUs", annotations: map[string]string{names.AnnotationGPUMemory: "10Gi"}, requests: gpus("2"), want: model.GPUDemand{Count: 2, MemoryBytes: 10 << 30}},
		{name: "models", annotations: map[string]string{names.AnnotationGPUModel: "NVIDIA H100 80GB HBM3|NVIDIA-A100-SXM4-80GB"}, requests: gpus("1"),
			want: model.GPUDemand{Count: 1, Models: []string{"NVIDIA-H100-80GB-HBM3", "NVIDIA-A100-SXM4-80GB"}}},
		{name: "nonsense fraction", annotations: map[string]string{names.AnnotationGPUFraction: "1.5"}, wantErr: "use a number above 0 and at most 1"},
		{name: "zero fraction", annotations: map[string]string{names.AnnotationGPUFraction: "0"}, wantErr: names.AnnotationGPUFraction},
		{name: "bad memory", annotations: map[string]string{names.AnnotationGPUMemory: "lots"}, wantErr: "(20Gi)"},
		{name: "unit-less memory is MiB, as in KAI", annotations: map[string]string{names.AnnotationGPUMemory: "2000"}, want: model.GPUDemand{Count: 1, MemoryBytes: 2000 << 20}},
		{name: "NaN fraction", annotations: map[string]string{names.AnnotationGPUFraction: "NaN"}, wantErr: "at most 1"},
		{name: "infinite fraction", annotations: map[string]string{names.AnnotationGPUFraction: "+Inf"}, wantErr: "at most 1"},
		{name: "negative fraction", annotations: map[string]string{names.AnnotationGPUFraction: "-0.5"}, wantErr: "at most 1"},
		{name: "NaN memory", annotations: map[string]string{names.AnnotationGPUMemory: "NaN"}, wantErr: "plain number"},
		{name: "infinite memory", annotations: map[string]string{names.AnnotationGPUMemory: "Inf"}, wantErr: "plain number"},
		{name: "negative memory", annotations: map[string]string{names.AnnotationGPUMemory: "-20Gi"}, wantErr: "plain number"},
		{name: "both", annotations: map[string]string{names.AnnotationGPUMemory: "1Gi", names.AnnotationGPUFraction: "0.5"}, wantErr: "keep one"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: tt.annotations}}
			got, err := podDemand(pod, tt.requests, claimInput{})
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want one saying %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got.Count != tt.want.Count || got.MemoryBytes != tt.want.MemoryBytes || got.FractionMilli != tt.want.FractionMilli || strings.Join(got.Models, ",") != strings.Join(tt.want.Models, ",") {
				t.Errorf("demand = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestGPUAnnotationRoundTrip(t *testing.T) {
	in := []model.GPUBinding{{Index: 0, Whole: true}, {Index: 3, MemoryBytes: 20 << 30}}
	s := FormatGPUs(in)
	if s != "0,3:21474836480" {
		t.Errorf("FormatGPUs = %q", s)
	}
	out, err := ParseGPUs(s)
	if err != nil || len(out) != 2 || out[0] != in[0] || out[1] != in[1] {
		t.Errorf("ParseGPUs(%q) = %+v, %v, want %+v", s, out, err, in)
	}
	for _, bad := range []string{"x,2:-5,4", "0,", "1:", "-1", "0:abc", " 1", "1:0"} {
		if _, err := ParseGPUs(bad); err == nil || !strings.Contains(err.Error(), "INDEX:BYTES") {
			t.Errorf("ParseGPUs(%q): error %v, want one saying what an entry is", bad, err)
		}
	}
	if _, err := ParseGPUs("x,2:-5,4"); err == nil || !strings.Contains(err.Error(), `"x", "2:-5"`) {
		t.Errorf("the error must name every bad entry: %v", err)
	}
}

// A bound pod whose booking is corrupt is booked on as many idle GPUs as it asks for,
// never on the part of the booking that could be read: those GPUs go to nobody else.
func TestCorruptBookingIsBookedByDemand(t *testing.T) {
	c, _ := gpuCluster(t, 4, "n1")
	p := gpuPod("hand-edited", 3, 0, "n1")
	p.Annotations = map[string]string{names.AnnotationGPUs: "0,x,2"}
	c.UpsertPod(p)
	if got := podOf(c, "ns/hand-edited"); len(got.GPUs) != 3 {
		t.Fatalf("booked on %+v, want 3 GPUs (its demand), not the 2 readable entries", got.GPUs)
	}
	if n := idleGPUs(c, "n1"); n != 1 {
		t.Errorf("%d idle GPUs, want 1", n)
	}
	p = p.DeepCopy()
	p.Annotations[names.AnnotationGPUs] = "0,1,3"
	c.UpsertPod(p)
	if got := podOf(c, "ns/hand-edited"); len(got.GPUs) != 3 || got.GPUs[2].Index != 3 {
		t.Errorf("a readable booking is used as written: %+v", got.GPUs)
	}
}

func TestNodeFromAPIFallsBackToCountAndGFDLabels(t *testing.T) {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Labels: map[string]string{names.LabelGFDProduct: "NVIDIA-A10G", names.LabelGFDMemory: "23028"}},
		Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			names.ExtendedGPUResource: resource.MustParse("2"), corev1.ResourceCPU: resource.MustParse("8"),
		}},
	}
	m := nodeFromAPI(n, nil)
	if !m.GPUsByCountOnly || len(m.GPUs) != 2 || m.GPUs[1].Model != "NVIDIA-A10G" || m.GPUs[1].MemoryBytes != 23028<<20 {
		t.Errorf("node = %+v", m)
	}
	inv := []model.GPU{{Index: 0, UUID: "GPU-1", Model: "NVIDIA-A10G", MemoryBytes: 24e9, Healthy: true}}
	if m := nodeFromAPI(n, inv); m.GPUsByCountOnly || len(m.GPUs) != 1 || m.GPUs[0].UUID != "GPU-1" {
		t.Errorf("with an inventory the devices must win: %+v", m)
	}
}

// podRequests answers as the Kubernetes helper does for every pod: the fast path of
// a single container, and the helper's sums for init containers, sidecars, overhead
// and pod-level resources.
func TestPodRequestsAgreesWithTheHelper(t *testing.T) {
	rl := func(cpu, mem string) corev1.ResourceList {
		return corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)}
	}
	ctr := func(name string, r corev1.ResourceList) corev1.Container {
		return corev1.Container{Name: name, Resources: corev1.ResourceRequirements{Requests: r}}
	}
	always := corev1.ContainerRestartPolicyAlways
	sidecar := ctr("sidecar", rl("1", "1Gi"))
	sidecar.RestartPolicy = &always
	specs := map[string]corev1.PodSpec{
		"one container":       {Containers: []corev1.Container{ctr("a", rl("2", "4Gi"))}},
		"no requests":         {Containers: []corev1.Container{ctr("a", nil)}},
		"two containers":      {Containers: []corev1.Container{ctr("a", rl("2", "4Gi")), ctr("b", rl("1", "1Gi"))}},
		"init container":      {Containers: []corev1.Container{ctr("a", rl("2", "4Gi"))}, InitContainers: []corev1.Container{ctr("i", rl("8", "1Gi"))}},
		"sidecar":             {Containers: []corev1.Container{ctr("a", rl("2", "4Gi"))}, InitContainers: []corev1.Container{sidecar}},
		"overhead":            {Containers: []corev1.Container{ctr("a", rl("2", "4Gi"))}, Overhead: rl("250m", "120Mi")},
		"pod-level resources": {Containers: []corev1.Container{ctr("a", rl("2", "4Gi"))}, Resources: &corev1.ResourceRequirements{Requests: rl("3", "8Gi")}},
	}
	for name, spec := range specs {
		pod := &corev1.Pod{Spec: spec}
		got, want := podRequests(pod), resourcehelper.PodRequests(pod, resourcehelper.PodResourcesOptions{})
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			g, w := got[r], want[r]
			if g.Cmp(w) != 0 {
				t.Errorf("%s: %s %s, the helper %s", name, r, g.String(), w.String())
			}
		}
		if len(got) != len(want) {
			t.Errorf("%s: %v, the helper %v", name, got, want)
		}
	}
}
