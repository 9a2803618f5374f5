package webhook

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/names"
)

// PodDefaulter is the http.Handler of a mutating webhook for pods that sets, for every
// extended resource a container requests but does not limit (nvidia.com/gpu above
// all), the limit equal to the request. The API server refuses such a container
// ("Limit must be set for non overcommitable resources"), so a manifest written that
// way, such as the KAI walkthrough's RayCluster worker, could never create its pod.
//
// It also refuses a pod whose GPU annotations the scheduler could never read
// (gantry.dev/gpu-fraction "NaN", a negative gantry.dev/gpu-memory or one in an
// unknown unit, both set at once, a gantry.dev/gpus booking with unreadable entries):
// the scheduler would hold it back with the same words (or, for a booking, ignore
// it), but a pod refused at admission tells whoever created it at once, with what to
// write instead. Both read the annotations with the same functions
// (cache.AnnotatedDemand, cache.ParseGPUs).
//
// With Templates set (--annotation-share-claims), it also turns a
// gantry.dev/gpu-memory or gantry.dev/gpu-fraction annotation into a DRA claim the
// node agent prepares (shareTemplate), creating the share's ResourceClaimTemplate in
// the pod's namespace first; if that fails the pod is admitted unchanged, with a
// warning. While no node publishes a Gantry GPU (Sizes), annotations stay as they are.
//
// It only ever adds; it never changes a value a user wrote, and it
// must be registered with failurePolicy: Ignore so that an outage blocks no pod (the
// scheduler still refuses to place a pod with a bad annotation, with a reason).
type PodDefaulter struct {
	// Templates creates share templates; nil leaves annotation shares as they are.
	Templates TemplateEnsurer
	// Sizes are the GPU sizes the node agents publish; none (or nil) leaves
	// annotation shares as they are.
	Sizes GPUSizes
}

// ServeHTTP answers one AdmissionReview.
func (p PodDefaulter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveReview(w, r, p.Review)
}

// Review decides one admission request: pods get the patch, anything else passes.
func (p PodDefaulter) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Kind.Group != "" || req.Kind.Kind != "Pod" || req.Operation != admissionv1.Create {
		return allow(nil)
	}
	var pod corev1.Pod
	// Case-sensitive, as the API server decodes: encoding/json would read "speC" as
	// spec, and a patch for /spec/... would then not apply to the object sent.
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(req.Object.Raw, &pod); err != nil {
		// Fail open: the API server's own validation will say what is wrong.
		return allow(nil)
	}
	if msg := gpuAnnotationProblem(&pod); msg != "" {
		return deny(http.StatusUnprocessableEntity, msg)
	}
	patch := extendedLimitsPatch(&pod)
	var warnings []string
	if len(patch) > 0 {
		warnings = append(warnings, fmt.Sprintf("gantry set %d missing extended-resource limits equal to their requests", len(patch)))
	}
	ops, w, refusal := p.shareClaims(ctx, req, &pod)
	if refusal != "" {
		return deny(http.StatusUnprocessableEntity, refusal)
	}
	patch = append(patch, ops...)
	if w != "" {
		warnings = append(warnings, w)
	}
	if len(patch) == 0 {
		return allow(warnings)
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return allow(nil)
	}
	pt := admissionv1.PatchTypeJSONPatch
	return &admissionv1.AdmissionResponse{
		Allowed:   true,
		Patch:     b,
		PatchType: &pt,
		Warnings:  warnings,
	}
}

// shareClaims is the annotation-share part of Review: the patch and a warning
// saying what was done, or why not; or a refusal.
func (p PodDefaulter) shareClaims(ctx context.Context, req *admissionv1.AdmissionRequest, pod *corev1.Pod) ([]jsonPatchOp, string, string) {
	if p.Templates == nil {
		return nil, "", ""
	}
	pod.Namespace = req.Namespace
	tmpl, warning, refusal := p.shareTemplate(ctx, pod)
	if tmpl == nil {
		return nil, warning, refusal
	}
	// A dry run shows the pod as it would be, and creates nothing.
	if req.DryRun == nil || !*req.DryRun {
		if err := p.Templates(ctx, tmpl); err != nil {
			return nil, fmt.Sprintf("gantry could not create ResourceClaimTemplate %s/%s (%v): the share stays an annotation, which no container receives",
				tmpl.Namespace, tmpl.Name, err), ""
		}
	}
	return shareClaimOps(pod, tmpl.Name), fmt.Sprintf("gantry turned the pod's GPU share annotation into the DRA claim %q (template %s), which the node agent prepares for every container",
		ShareClaimRef, tmpl.Name), ""
}

// gpuAnnotationProblem says what is wrong with a pod's gantry.dev GPU annotations and
// what to write instead, or "" when the scheduler can read them.
func gpuAnnotationProblem(pod *corev1.Pod) string {
	if _, err := cache.AnnotatedDemand(pod); err != nil {
		return err.Error()
	}
	if _, err := cache.ParseGPUs(pod.Annotations[names.AnnotationGPUs]); err != nil {
		return err.Error()
	}
	return ""
}

type jsonPatchOp struct {
	Op    string `json:"op"`
	Path  string `json:"path"`
	Value any    `json:"value"`
}

// extendedLimitsPatch returns JSON-patch operations adding the missing limits.
func extendedLimitsPatch(pod *corev1.Pod) []jsonPatchOp {
	var ops []jsonPatchOp
	add := func(kind string, cs []corev1.Container) {
		for i, c := range cs {
			var missing []corev1.ResourceName
			for name := range c.Resources.Requests {
				if _, ok := c.Resources.Limits[name]; !ok && isExtendedResource(name) {
					missing = append(missing, name)
				}
			}
			if len(missing) == 0 {
				continue
			}
			sort.Slice(missing, func(a, b int) bool { return missing[a] < missing[b] })
			if c.Resources.Limits == nil {
				limits := map[string]string{}
				for _, name := range missing {
					q := c.Resources.Requests[name]
					limits[string(name)] = q.String()
				}
				ops = append(ops, jsonPatchOp{Op: "add", Path: fmt.Sprintf("/spec/%s/%d/resources/limits", kind, i), Value: limits})
				continue
			}
			for _, name := range missing {
				q := c.Resources.Requests[name]
				ops = append(ops, jsonPatchOp{Op: "add", Path: fmt.Sprintf("/spec/%s/%d/resources/limits/%s", kind, i, escapeJSONPointer(string(name))), Value: q.String()})
			}
		}
	}
	add("containers", pod.Spec.Containers)
	add("initContainers", pod.Spec.InitContainers)
	return ops
}

// isExtendedResource reports a resource outside the kubernetes.io namespace, such as
// nvidia.com/gpu: these may not be overcommitted, so requests must equal limits.
func isExtendedResource(name corev1.ResourceName) bool {
	s := string(name)
	if !strings.Contains(s, "/") || strings.HasPrefix(s, "requests.") {
		return false
	}
	domain := s[:strings.Index(s, "/")]
	return domain != "kubernetes.io" && !strings.HasSuffix(domain, ".kubernetes.io")
}

func escapeJSONPointer(s string) string {
	return strings.NewReplacer("~", "~0", "/", "~1").Replace(s)
}
