package webhook

import (
	"context"
	"encoding/json"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
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
