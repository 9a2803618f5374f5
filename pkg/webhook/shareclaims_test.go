package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

func sharePodRequest(t *testing.T, pod *corev1.Pod) *admissionv1.AdmissionRequest {
	t.Helper()
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	return &admissionv1.AdmissionRequest{
		Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Operation: admissionv1.Create,
		Namespace: "team-a", Object: runtime.RawExtension{Raw: raw},
	}
}

func annotatedPod(annotations map[string]string, containers ...corev1.Container) *corev1.Pod {
	if len(containers) == 0 {
		containers = []corev1.Container{{Name: "main"}}
	}
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Annotations: annotations}, Spec: corev1.PodSpec{Containers: containers}}
}

// recordTemplates is a TemplateEnsurer that keeps what it was asked to create.
type recordTemplates struct {
	made []*resourceapi.ResourceClaimTemplate
	err  error
}

func (r *recordTemplates) ensure(_ context.Context, t *resourceapi.ResourceClaimTemplate) error {
	r.made = append(r.made, t)
	return r.err
}

// applied is the pod after the response's patch, as the API server applies it.
func applied(t *testing.T, req *admissionv1.AdmissionRequest, resp *admissionv1.AdmissionResponse) *corev1.Pod {
	t.Helper()
	if !resp.Allowed {
		t.Fatalf("refused: %v", resp.Result)
	}
	raw := req.Object.Raw
	if len(resp.Patch) > 0 {
		p, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatal(err)
		}
		if raw, err = p.Apply(raw); err != nil {
			t.Fatalf("patch %s does not apply: %v", resp.Patch, err)
		}
	}
	var pod corev1.Pod
	if err := json.Unmarshal(raw, &pod); err != nil {
		t.Fatal(err)
	}
	return &pod
}

// KAI's gpu-memory annotation (unit-less: MiB) becomes a claim from a per-size
// template that every container lists; the claim the template makes asks the
// scheduler for exactly the share the annotation did, and the scheduler reads the
// claim first, so the share is counted once.
func TestGPUMemoryAnnotationBecomesAClaim(t *testing.T) {
	rec := &recordTemplates{}
	pod := annotatedPod(map[string]string{names.AnnotationGPUMemory: "20480"}, corev1.Container{Name: "llm"}, corev1.Container{Name: "sidecar",
		Resources: corev1.ResourceRequirements{Claims: []corev1.ResourceClaim{{Name: "other"}}}})
	pod.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: "other", ResourceClaimName: ptr.To("nic")}}
	req := sharePodRequest(t, pod)
	resp := PodDefaulter{Templates: rec.ensure, Sizes: fixedSizes(h100)}.Review(context.Background(), req)
	got := applied(t, req, resp)

	if len(rec.made) != 1 {
		t.Fatalf("templates made %d, want 1", len(rec.made))
	}
	tmpl := rec.made[0]
	const want = 20 << 30
	if tmpl.Namespace != "team-a" || tmpl.Name != ShareTemplateName(want) {
		t.Errorf("template %s/%s", tmpl.Namespace, tmpl.Name)
	}
	r := tmpl.Spec.Spec.Devices.Requests
	if len(r) != 1 || r[0].Exactly == nil || r[0].Exactly.DeviceClassName != names.DriverName || dra.RequestedMemory(r[0].Exactly) != want {
		t.Errorf("template requests %+v, want one %s device with %d bytes of memory", r, names.DriverName, want)
	}
	if n := len(got.Spec.ResourceClaims); n != 2 || got.Spec.ResourceClaims[1].Name != ShareClaimRef ||
		ptr.Deref(got.Spec.ResourceClaims[1].ResourceClaimTemplateName, "") != tmpl.Name {
		t.Errorf("pod resourceClaims %+v", got.Spec.ResourceClaims)
	}
	for _, c := range got.Spec.Containers {
		if l := len(c.Resources.Claims); l == 0 || c.Resources.Claims[l-1].Name != ShareClaimRef {
			t.Errorf("container %s claims %+v, want %s last", c.Name, c.Resources.Claims, ShareClaimRef)
		}
	}
	if !strings.Contains(strings.Join(resp.Warnings, " "), tmpl.Name) {
		t.Errorf("warnings %v do not say what was done", resp.Warnings)
	}
	// The label that makes the pod an owner of the template (RunTemplateOwners),
	// added to a pod without labels and to one with some.
	if got.Labels[names.LabelGPUShareClaim] != "true" {
		t.Errorf("pod labels %v, want %s=true", got.Labels, names.LabelGPUShareClaim)
	}
	labelled := pod.DeepCopy()
	labelled.Labels = map[string]string{"app": "llm"}
	req2 := sharePodRequest(t, labelled)
	got2 := applied(t, req2, PodDefaulter{Templates: rec.ensure, Sizes: fixedSizes(h100)}.Review(context.Background(), req2))
	if got2.Labels["app"] != "llm" || got2.Labels[names.LabelGPUShareClaim] != "true" {
		t.Errorf("labelled pod's labels %v, want app=llm and %s=true", got2.Labels, names.LabelGPUShareClaim)
	}

	// The scheduler waits for the claim (no share counted from the annotation
	// meanwhile), then counts it: the same share the annotation asked for.
	if _, waiting := dra.Resolve(got, nil); waiting == "" {
		t.Error("a pod whose claim is not created yet is not waiting for it")
	}
	claimName := "p-" + ShareClaimRef
	got.Namespace = "team-a" // the API server's, from the request
	got.Status.ResourceClaimStatuses = []corev1.PodResourceClaimStatus{{Name: ShareClaimRef, ResourceClaimName: &claimName}}
	claims := map[string]*resourceapi.ResourceClaim{
		"team-a/nic":          {Spec: resourceapi.ResourceClaimSpec{}},
		"team-a/" + claimName: {Spec: tmpl.Spec.Spec},
	}
	resolved, waiting := dra.Resolve(got, claims)
	if waiting != "" {
		t.Fatal(waiting)
	}
	fromClaim := dra.Demand(resolved, model.GPUDemand{})
	fromAnnotation, err := cache.AnnotatedDemand(pod)
	if err != nil {
		t.Fatal(err)
	}
	if fromClaim.Count != fromAnnotation.Count || fromClaim.MemoryBytes != fromAnnotation.MemoryBytes {
		t.Errorf("claim demand %+v, annotation demand %+v", fromClaim, fromAnnotation)
	}
}

// h100 and a100 are the memory a share can take on those GPUs, as the node agent
// publishes it (the total less what the driver reserves).
const (
	h100 = 79_646 << 20
	a100 = 39_936 << 20
)

func fixedSizes(sizes ...int64) GPUSizes {
	return func(context.Context) ([]int64, error) { return sizes, nil }
}

func TestAnnotationSharesLeftAlone(t *testing.T) {
	cases := map[string]*corev1.Pod{
		"no annotation": annotatedPod(nil),
	}
	converted := annotatedPod(map[string]string{names.AnnotationGPUMemory: "20Gi"})
	converted.Spec.ResourceClaims = []corev1.PodResourceClaim{{Name: ShareClaimRef, ResourceClaimTemplateName: ptr.To(ShareTemplateName(20 << 30))}}
	cases["already converted"] = converted
	for name, pod := range cases {
		rec := &recordTemplates{}
		resp := PodDefaulter{Templates: rec.ensure, Sizes: fixedSizes(h100)}.Review(context.Background(), sharePodRequest(t, pod))
		if !resp.Allowed || len(rec.made) > 0 || strings.Contains(string(resp.Patch), ShareClaimRef) {
			t.Errorf("%s: allowed %v, templates %d, patch %s", name, resp.Allowed, len(rec.made), resp.Patch)
		}
	}
	// Off unless asked for.
	resp := PodDefaulter{}.Review(context.Background(), sharePodRequest(t, annotatedPod(map[string]string{names.AnnotationGPUMemory: "20Gi"})))
	if len(resp.Patch) > 0 {
		t.Errorf("converted without Templates: %s", resp.Patch)
	}
	// No node agent publishes a GPU (a sandbox whose nodes only have GPU Feature
	// Discovery labels), or the sizes cannot be read: the annotation stays, as
	// before, and the warning says so.
	for what, sizes := range map[string]GPUSizes{
		"no Gantry GPU": fixedSizes(),
		"no sizes":      func(context.Context) ([]int64, error) { return nil, errors.New("forbidden") },
	} {
		for _, ann := range []map[string]string{{names.AnnotationGPUMemory: "20Gi"}, {names.AnnotationGPUFraction: "0.5"}} {
			rec := &recordTemplates{}
			resp := PodDefaulter{Templates: rec.ensure, Sizes: sizes}.Review(context.Background(), sharePodRequest(t, annotatedPod(ann)))
			if !resp.Allowed || len(rec.made) > 0 || len(resp.Patch) > 0 || !strings.Contains(strings.Join(resp.Warnings, " "), "stays an annotation") {
				t.Errorf("%s, %v: allowed %v, templates %d, patch %s, warnings %v", what, ann, resp.Allowed, len(rec.made), resp.Patch, resp.Warnings)
			}
		}
	}
}

// A share annotation beside an nvidia.com/gpu request is refused, as KAI Scheduler
// refuses it, once shares become claims: the device plugin would give the container
// whole GPUs beside the claim's share. The refusal says what to write instead.
func TestShareAnnotationWithDevicePluginGPUsIsRefused(t *testing.T) {
	gpu := resource.MustParse("1")
	for _, ann := range []map[string]string{{names.AnnotationGPUMemory: "20Gi"}, {names.AnnotationGPUFraction: "0.5"}} {
		pod := annotatedPod(ann, corev1.Container{Name: "w",
			Resources: corev1.ResourceRequirements{Requests: corev1.ResourceList{"nvidia.com/gpu": gpu}, Limits: corev1.ResourceList{"nvidia.com/gpu": gpu}}})
		rec := &recordTemplates{}
		resp := PodDefaulter{Templates: rec.ensure, Sizes: fixedSizes(h100)}.Review(context.Background(), sharePodRequest(t, pod))
		if resp.Allowed || len(rec.made) > 0 || resp.Result == nil ||
			!strings.Contains(resp.Result.Message, "drop the nvidia.com/gpu request") {
			t.Errorf("%v with nvidia.com/gpu: allowed %v, templates %d, result %+v", ann, resp.Allowed, len(rec.made), resp.Result)
		}
		// Without share claims (or without a node agent) the scheduler books the share
		// on each device-plugin GPU, as before.
		for _, d := range []PodDefaulter{{}, {Templates: rec.ensure, Sizes: fixedSizes()}} {
			if resp := d.Review(context.Background(), sharePodRequest(t, pod)); !resp.Allowed {
				t.Errorf("%v with nvidia.com/gpu refused without share claims: %+v", ann, resp.Result)
			}
		}
	}
}

func TestShareTemplateFailureAdmitsThePodUnchanged(t *testing.T) {
	rec := &recordTemplates{err: errors.New("forbidden")}
	req := sharePodRequest(t, annotatedPod(map[string]string{names.AnnotationGPUMemory: "8Gi"}))
	resp := PodDefaulter{Templates: rec.ensure, Sizes: fixedSizes(h100)}.Review(context.Background(), req)
	if !resp.Allowed || len(resp.Patch) > 0 || !strings.Contains(strings.Join(resp.Warnings, " "), "forbidden") {
		t.Errorf("allowed %v patch %s warnings %v", resp.Allowed, resp.Patch, resp.Warnings)
	}
	// A dry run patches but creates nothing.
	rec = &recordTemplates{}
	req.DryRun = ptr.To(true)
	resp = PodDefaulter{Templates: rec.ensure, Sizes: fixedSizes(h100)}.Review(context.Background(), req)
	if len(rec.made) != 0 || !strings.Contains(string(resp.Patch), ShareClaimRef) {
		t.Errorf("dry run: templates %d, patch %s", len(rec.made), resp.Patch)
	}
}
