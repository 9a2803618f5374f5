package webhook

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
)

// serve posts body to handler and returns the HTTP status and the decoded review.
func serve(handler http.Handler, body []byte) (int, *admissionv1.AdmissionReview) {
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/", strings.NewReader(string(body))))
	var review admissionv1.AdmissionReview
	if rec.Code != http.StatusOK || json.Unmarshal(rec.Body.Bytes(), &review) != nil {
		return rec.Code, nil
	}
	return rec.Code, &review
}

// FuzzPodDefaulter posts any pod through the defaulting webhook. It refuses exactly
// the pods whose GPU annotations the scheduler cannot read, with the scheduler's
// words, and no other (it fails open); its patch must apply to the pod it was given and leave
// every extended resource a container requests with a limit equal to the request,
// changing nothing else the user wrote.
func FuzzPodDefaulter(f *testing.F) {
	f.Add([]byte(`{"spec":{"containers":[{"name":"w","resources":{"requests":{"nvidia.com/gpu":"1","cpu":"1"},"limits":{"cpu":"4"}}}]}}`))
	f.Add([]byte(`{"spec":{"containers":[{"name":"w","resources":{"requests":{"nvidia.com/gpu":"2","example.com/a~b/c":"3"}}}],"initContainers":[{"name":"i","resources":{"requests":{"vendor.io/x":"1"}}}]}}`))
	f.Add([]byte(`{"spec":{"containers":[{"name":"w","resources":{"requests":{"foo.kubernetes.io/x":"1","requests.nvidia.com/gpu":"1"}}}]}}`))
	f.Add([]byte(`{"spec":{"containers":null}}`))
	f.Add([]byte(`{"metadata":{"annotations":{"gantry.dev/gpu-fraction":"NaN"}},"spec":{"containers":[{"name":"w"}]}}`))
	f.Add([]byte(`{"metadata":{"annotations":{"gantry.dev/gpu-memory":"2000"}},"spec":{"containers":[{"name":"w","resources":{"requests":{"nvidia.com/gpu":"2"}}}]}}`))
	f.Add([]byte(`{"metadata":{"annotations":{"gantry.dev/gpu-memory":"20GB","gantry.dev/gpu-fraction":"0.5"}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		req := &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Create}
		req.Kind.Version, req.Kind.Kind = "v1", "Pod"
		req.Object.Raw = raw
		body, err := json.Marshal(admissionv1.AdmissionReview{Request: req})
		if err != nil {
			return
		}
		code, review := serve(PodDefaulter{}, body)
		if code != http.StatusOK || review == nil || review.Response == nil {
			t.Fatalf("HTTP %d for a well-formed AdmissionReview", code)
		}
		resp := review.Response
		var sent corev1.Pod
		var unreadable error
		if sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &sent) == nil {
			if _, unreadable = cache.AnnotatedDemand(&sent); unreadable == nil {
				_, unreadable = cache.ParseGPUs(sent.Annotations["gantry.dev/gpus"])
			}
		}
		switch {
		case unreadable != nil && resp.Allowed:
			t.Fatalf("pod with GPU annotations the scheduler refuses (%v) was admitted", unreadable)
		case unreadable != nil && (resp.Result == nil || resp.Result.Message != unreadable.Error()):
			t.Fatalf("refused with %+v, want the scheduler's words %q", resp.Result, unreadable)
		case unreadable != nil:
			return
		case !resp.Allowed:
			t.Fatalf("pod refused: %+v", resp.Result)
		}
		if len(resp.Patch) == 0 {
			return
		}
		patch, err := jsonpatch.DecodePatch(resp.Patch)
		if err != nil {
			t.Fatalf("unreadable patch %s: %v", resp.Patch, err)
		}
		patched, err := patch.Apply(raw)
		if err != nil {
			t.Fatalf("patch %s does not apply to %s: %v", resp.Patch, raw, err)
		}
		var before, after corev1.Pod
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &before); err != nil {
			t.Fatalf("a patch for a pod that does not decode: %v", err)
		}
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(patched, &after); err != nil {
			t.Fatalf("patched pod does not decode: %v\n%s", err, patched)
		}
		check := func(kind string, b, a []corev1.Container) {
			for i := range a {
				for name, req := range a[i].Resources.Requests {
					if !isExtendedResource(name) {
						continue
					}
					if lim, ok := a[i].Resources.Limits[name]; !ok || lim.Cmp(req) != 0 {
						t.Fatalf("%s %d: %s request %s, limit %v after the patch %s", kind, i, name, req.String(), a[i].Resources.Limits, resp.Patch)
					}
				}
				for name, lim := range b[i].Resources.Limits {
					if got := a[i].Resources.Limits[name]; got.Cmp(lim) != 0 {
						t.Fatalf("%s %d: the patch changed the user's limit %s from %s to %s", kind, i, name, lim.String(), got.String())
					}
				}
			}
		}
		check("container", before.Spec.Containers, after.Spec.Containers)
		check("init container", before.Spec.InitContainers, after.Spec.InitContainers)
	})
}

// FuzzQueueValidator posts any Queue (as an object and as an update) against an
// existing tree. It must answer every well-formed AdmissionReview, and a Queue it
// admits must leave a tree that fairshare.Validate says nothing about for that queue.
func FuzzQueueValidator(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"team-b"},"spec":{"parentQueue":"department-1","resources":{"gpu":{"quota":2,"limit":4,"overQuotaWeight":1}}}}`), "CREATE")
	f.Add([]byte(`{"metadata":{"name":"department-1"},"spec":{"parentQueue":"team-a"}}`), "UPDATE")
	f.Add([]byte(`{"metadata":{"name":"x"},"spec":{"resources":{"gpu":{"quota":1e308,"limit":-1},"memory":{"quota":1e308,"limit":1e308},"gpuModels":[{"model":"","quota":-2}]}}}`), "CREATE")
	f.Add([]byte(`{"metadata":{"name":"team-a"}}`), "DELETE")
	var queues []schedulingv1alpha1.Queue
	for _, doc := range strings.Split(seedTree, "\n---\n") {
		var q schedulingv1alpha1.Queue
		if err := yaml.UnmarshalStrict([]byte(doc), &q); err != nil {
			f.Fatal(err)
		}
		queues = append(queues, q)
	}
	v := NewQueueValidator(func(context.Context) ([]schedulingv1alpha1.Queue, error) { return queues, nil })
	f.Fuzz(func(t *testing.T, raw []byte, op string) {
		var name struct {
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		_ = json.Unmarshal(raw, &name)
		req := &admissionv1.AdmissionRequest{UID: "u", Operation: admissionv1.Operation(op), Name: name.Metadata.Name}
		req.Kind.Group, req.Kind.Version, req.Kind.Kind = schedulingv1alpha1.GroupName, "v1alpha1", "Queue"
		req.Object.Raw = raw
		body, err := json.Marshal(admissionv1.AdmissionReview{Request: req})
		if err != nil {
			return
		}
		code, review := serve(v, body)
		if code != http.StatusOK || review == nil || review.Response == nil {
			t.Fatalf("HTTP %d for a well-formed AdmissionReview", code)
		}
		if !review.Response.Allowed && (review.Response.Result == nil || review.Response.Result.Message == "") {
			t.Fatalf("refused without a message")
		}
	})
}
