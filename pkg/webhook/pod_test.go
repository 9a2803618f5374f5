package webhook

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
)

func podRequest(t *testing.T, containers ...corev1.Container) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(&corev1.Pod{Spec: corev1.PodSpec{Containers: containers}})
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}
}

func TestPodDefaulterAddsMissingExtendedLimits(t *testing.T) {
	gpu := resource.MustParse("1")
	cpu := resource.MustParse("1")
	tests := []struct {
		name      string
		container corev1.Container
		want      []jsonPatchOp
	}{
		{
			name: "the KAI walkthrough's worker: limits without the GPU",
			container: corev1.Container{Name: "w", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": gpu, corev1.ResourceCPU: cpu},
				Limits:   corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("4")},
			}},
			want: []jsonPatchOp{{Op: "add", Path: "/spec/containers/0/resources/limits/nvidia.com~1gpu", Value: "1"}},
		},
		{
			name: "no limits at all",
			container: corev1.Container{Name: "w", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), corev1.ResourceCPU: cpu},
			}},
			want: []jsonPatchOp{{Op: "add", Path: "/spec/containers/0/resources/limits", Value: map[string]any{"nvidia.com/gpu": "2"}}},
		},
		{
			name: "already limited: untouched",
			container: corev1.Container{Name: "w", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{"nvidia.com/gpu": gpu}, Limits: corev1.ResourceList{"nvidia.com/gpu": gpu},
			}},
		},
		{
			name: "native resources only: untouched (they may be overcommitted)",
			container: corev1.Container{Name: "w", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: cpu, corev1.ResourceMemory: resource.MustParse("1Gi")},
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := PodDefaulter{}.Review(context.Background(), podRequest(t, tt.container))
			if !resp.Allowed {
				t.Fatalf("denied: %v", resp.Result)
			}
			var got []jsonPatchOp
			if len(resp.Patch) > 0 {
				if err := json.Unmarshal(resp.Patch, &got); err != nil {
					t.Fatal(err)
				}
			}
			gotJSON, _ := json.Marshal(got)
			wantJSON, _ := json.Marshal(tt.want)
			if len(tt.want) == 0 && len(got) == 0 {
				return
			}
			if string(gotJSON) != string(wantJSON) {
				t.Errorf("patch = %s, want %s", gotJSON, wantJSON)
			}
		})
	}
}

func TestPodDefaulterIgnoresOtherKinds(t *testing.T) {
	req := podRequest(t)
	req.Kind = metav1.GroupVersionKind{Group: "scheduling.gantry.dev", Version: "v1alpha1", Kind: "Queue"}
	if resp := (PodDefaulter{}).Review(context.Background(), req); !resp.Allowed || len(resp.Patch) > 0 {
		t.Errorf("non-pod request: allowed %v patch %s, want allowed and untouched", resp.Allowed, resp.Patch)
	}
}

func annotatedPodRequest(t *testing.T, annotations map[string]string, gpus string) *admissionv1.AdmissionRequest {
	t.Helper()
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: annotations},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "w"}}},
	}
	if gpus != "" {
		q := resource.MustParse(gpus)
		pod.Spec.Containers[0].Resources = corev1.ResourceRequirements{
			Requests: corev1.ResourceList{"nvidia.com/gpu": q}, Limits: corev1.ResourceList{"nvidia.com/gpu": q},
		}
	}
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		Name:      "p",
		Kind:      metav1.GroupVersionKind{Version: "v1", Kind: "Pod"},
		Operation: admissionv1.Create,
		Object:    runtime.RawExtension{Raw: raw},
	}
}

// The webhook refuses what the scheduler could never read, saying what to write; it
// lets through every spelling the scheduler accepts.
func TestPodWebhookRefusesBadGPUAnnotations(t *testing.T) {
	const (
		mem  = "gantry.dev/gpu-memory"
		frac = "gantry.dev/gpu-fraction"
	)
	tests := []struct {
		name        string
		annotations map[string]string
		gpus        string
		refuse      string // a part of the message; "" = allowed
	}{
		{"fraction NaN (issue 18)", map[string]string{frac: "NaN"}, "", "use a number above 0 and at most 1"},
		{"fraction +Inf", map[string]string{frac: "+Inf"}, "", "use a number above 0 and at most 1"},
		{"fraction negative", map[string]string{frac: "-0.5"}, "", "e.g. 0.25"},
		{"fraction zero", map[string]string{frac: "0"}, "", "above 0"},
		{"fraction over one", map[string]string{frac: "1.5"}, "", "at most 1"},
		{"fraction as a percentage", map[string]string{frac: "50%"}, "", "e.g. 0.25"},
		{"fraction empty", map[string]string{frac: ""}, "", "e.g. 0.25"},
		{"memory NaN", map[string]string{mem: "NaN"}, "", "write MiB as a plain number (20480) or a quantity with a unit (20Gi)"},
		{"memory negative", map[string]string{mem: "-20Gi"}, "", "not a positive amount of memory"},
		{"memory negative MiB", map[string]string{mem: "-2000"}, "", "not a positive amount of memory"},
		{"memory zero", map[string]string{mem: "0"}, "", "not a positive amount of memory"},
		{"memory unknown unit GB", map[string]string{mem: "20GB"}, "", "(20Gi)"},
		{"memory unknown unit lower-case gi", map[string]string{mem: "20gi"}, "", "(20Gi)"},
		{"memory words", map[string]string{mem: "twenty gigs"}, "", "(20Gi)"},
		{"memory infinite", map[string]string{mem: "Inf"}, "", "not a positive amount"},
		{"memory overflows bytes", map[string]string{mem: "1e300"}, "", "not a positive amount"},
		{"both set", map[string]string{mem: "20Gi", frac: "0.5"}, "", "keep one"},
		{"booking with an unreadable entry", map[string]string{"gantry.dev/gpus": "0,x"}, "1", "INDEX:BYTES"},
		{"booking as the scheduler writes it", map[string]string{"gantry.dev/gpus": "0,3:21474836480"}, "1", ""},
		{"memory in MiB (KAI's unit)", map[string]string{mem: "2000"}, "", ""},
		{"memory with a unit", map[string]string{mem: "20Gi"}, "", ""},
		{"memory with spaces", map[string]string{mem: " 20Gi "}, "", ""},
		{"fraction half of two GPUs", map[string]string{frac: "0.5"}, "2", ""},
		{"fraction one", map[string]string{frac: "1"}, "", ""},
		{"no GPU annotation", map[string]string{"gantry.dev/gpu-model": "A100"}, "1", ""},
		{"no annotations", nil, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			resp := PodDefaulter{}.Review(context.Background(), annotatedPodRequest(t, tt.annotations, tt.gpus))
			if tt.refuse == "" {
				if !resp.Allowed {
					t.Fatalf("refused: %v", resp.Result)
				}
				return
			}
			if resp.Allowed {
				t.Fatalf("allowed, want refused with %q", tt.refuse)
			}
			if resp.Result == nil || !strings.Contains(resp.Result.Message, tt.refuse) {
				t.Fatalf("message %v, want one containing %q", resp.Result, tt.refuse)
			}
			if resp.Result.Code != 422 || resp.Result.Reason != metav1.StatusReasonInvalid {
				t.Errorf("code %d reason %s, want 422 Invalid", resp.Result.Code, resp.Result.Reason)
			}
		})
	}
}

// Admission and scheduling read the annotations with one function: every value the
// webhook refuses, the scheduler's demand reader refuses too, and the other way round.
func TestPodWebhookAgreesWithScheduler(t *testing.T) {
	for _, key := range []string{"gantry.dev/gpu-memory", "gantry.dev/gpu-fraction"} {
		for _, v := range []string{"NaN", "-1", "0", "0.001", "0.5", "1", "2", "2000", "20Gi", "20GB", "1e-9", "1e30", "", " 1 ", "0x10", "Inf"} {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{key: v}}}
			_, schedErr := cache.AnnotatedDemand(pod)
			resp := PodDefaulter{}.Review(context.Background(), annotatedPodRequest(t, pod.Annotations, ""))
			if resp.Allowed != (schedErr == nil) {
				t.Errorf("%s=%q: webhook allowed %v, scheduler error %v", key, v, resp.Allowed, schedErr)
			}
		}
	}
}
