package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	admissionv1 "k8s.io/api/admission/v1"
	"sigs.k8s.io/yaml"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
)

// existing parses Queue manifests (YAML, separated by ---) as the lister's answer.
func existing(t *testing.T, manifests string) QueueLister {
	t.Helper()
	var queues []schedulingv1alpha1.Queue
	for _, doc := range strings.Split(manifests, "\n---\n") {
		if strings.TrimSpace(doc) == "" {
			continue
		}
		var q schedulingv1alpha1.Queue
		if err := yaml.UnmarshalStrict([]byte(doc), &q); err != nil {
			t.Fatalf("parse existing queue: %v", err)
		}
		queues = append(queues, q)
	}
	return func(context.Context) ([]schedulingv1alpha1.Queue, error) { return queues, nil }
}

func failingLister(context.Context) ([]schedulingv1alpha1.Queue, error) {
	return nil, errors.New("connection refused")
}

const seedTree = `
apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata: {name: department-1}
spec:
  resources:
    gpu: {quota: 8, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  parentQueue: department-1
  resources:
    gpu: {quota: 4, limit: -1, overQuotaWeight: 1}
---
apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata: {name: orphan}
spec:
  parentQueue: gone
`

// queueReview is an AdmissionReview as the apiserver sends it for a Queue.
func queueReview(operation, name, object string) string {
	obj := "null"
	if object != "" {
		obj = object
	}
	return `{
  "apiVersion": "admission.k8s.io/v1",
  "kind": "AdmissionReview",
  "request": {
    "uid": "705ab4f5-6393-11e8-b7cc-42010a800002",
    "kind": {"group": "scheduling.gantry.dev", "version": "v1alpha1", "kind": "Queue"},
    "resource": {"group": "scheduling.gantry.dev", "version": "v1alpha1", "resource": "queues"},
    "name": "` + name + `",
    "operation": "` + operation + `",
    "userInfo": {"username": "admin"},
    "object": ` + obj + `
  }
}`
}

func queueJSON(name, parent, resources string) string {
	spec := `{}`
	switch {
	case parent != "" && resources != "":
		spec = `{"parentQueue": "` + parent + `", "resources": ` + resources + `}`
	case parent != "":
		spec = `{"parentQueue": "` + parent + `"}`
	case resources != "":
		spec = `{"resources": ` + resources + `}`
	}
	return `{"apiVersion": "scheduling.gantry.dev/v1alpha1", "kind": "Queue", "metadata": {"name": "` + name + `"}, "spec": ` + spec + `}`
}

const podReview = `{
  "apiVersion": "admission.k8s.io/v1",
  "kind": "AdmissionReview",
  "request": {
    "uid": "11111111-2222-3333-4444-555555555555",
    "kind": {"group": "", "version": "v1", "kind": "Pod"},
    "resource": {"group": "", "version": "v1", "resource": "pods"},
    "namespace": "default", "name": "p", "operation": "CREATE",
    "userInfo": {"username": "admin"},
    "object": {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "labels": {"gantry.dev/queue": "nowhere"}}}
  }
}`

func post(t *testing.T, handler http.Handler, body string) *admissionv1.AdmissionReview {
	t.Helper()
	rec := httptest.NewRecorder()
	handler.ServeHTTP(rec, httptest.NewRequest(http.MethodPost, "/validate-queue", strings.NewReader(body)))
	if rec.Code != http.StatusOK {
		t.Fatalf("HTTP %d: %s", rec.Code, rec.Body)
	}
	var review admissionv1.AdmissionReview
	if err := json.Unmarshal(rec.Body.Bytes(), &review); err != nil {
		t.Fatalf("decode response: %v", err)
	}
	if review.APIVersion != "admission.k8s.io/v1" || review.Kind != "AdmissionReview" || review.Response == nil {
		t.Fatalf("malformed AdmissionReview response: %s", rec.Body)
	}
	return &review
}

func TestQueueValidator(t *testing.T) {
	tests := []struct {
		name   string
		lister QueueLister
		review string
		// wantDenied is a substring of the denial message; empty when allowed.
		wantDenied  string
		wantWarning string
	}{
		{
			name:   "a new leaf under an existing parent",
			review: queueReview("CREATE", "team-b", queueJSON("team-b", "department-1", `{"gpu": {"quota": 2, "limit": 4, "overQuotaWeight": 1}}`)),
		},
		{
			name:       "an unknown parent",
			review:     queueReview("CREATE", "team-b", queueJSON("team-b", "department-9", "")),
			wantDenied: "queue team-b names parent department-9, which does not exist: create queue department-9 first, or change spec.parentQueue",
		},
		{
			name:       "a queue naming itself",
			review:     queueReview("CREATE", "team-b", queueJSON("team-b", "team-b", "")),
			wantDenied: "queue team-b names itself as its parent",
		},
		{
			name:       "an update that closes a cycle",
			review:     queueReview("UPDATE", "department-1", queueJSON("department-1", "team-a", "")),
			wantDenied: "queues department-1 → team-a → department-1 form a cycle through spec.parentQueue",
		},
		{
			name:       "a limit below its quota, with the values",
			review:     queueReview("CREATE", "team-b", queueJSON("team-b", "department-1", `{"gpu": {"quota": 4, "limit": 2, "overQuotaWeight": 1}}`)),
			wantDenied: "queue team-b: GPU limit 2 is below its quota 4: raise spec.resources.gpu.limit to at least 4",
		},
		{
			name:       "a negative quota other than -1",
			review:     queueReview("CREATE", "team-b", queueJSON("team-b", "", `{"memory": {"quota": -5, "limit": -1, "overQuotaWeight": 1}}`)),
			wantDenied: "queue team-b: memory quota is -5 MB: set spec.resources.memory.quota to -1 (unlimited), 0 or a positive amount",
		},
		{
			name:        "children's quotas above the parent's: allowed, with a warning",
			review:      queueReview("CREATE", "team-b", queueJSON("team-b", "department-1", `{"gpu": {"quota": 6, "limit": -1, "overQuotaWeight": 1}}`)),
			wantWarning: "the GPU quotas of the children of queue department-1 add up to 10, more than its quota 8",
		},
		{
			name:   "a queue broken elsewhere does not block an unrelated edit",
			review: queueReview("UPDATE", "team-a", queueJSON("team-a", "department-1", `{"gpu": {"quota": 3, "limit": -1, "overQuotaWeight": 1}}`)),
		},
		{
			name:       "fail closed for Queues when the others cannot be listed",
			lister:     failingLister,
			review:     queueReview("CREATE", "team-b", queueJSON("team-b", "department-1", "")),
			wantDenied: "cannot list the existing Queues to check spec.parentQueue (connection refused): try again in a moment",
		},
		{
			name:       "deleting a parent that still has children",
			review:     queueReview("DELETE", "department-1", ""),
			wantDenied: "queue department-1 still has child queues (team-a): delete them or change their spec.parentQueue first",
		},
		{
			name:   "deleting a leaf",
			review: queueReview("DELETE", "team-a", ""),
		},
		{
			name:   "pods are never blocked, even when the Queues cannot be listed",
			lister: failingLister,
			review: podReview,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			lister := tt.lister
			if lister == nil {
				lister = existing(t, seedTree)
			}
			review := post(t, NewQueueValidator(lister), tt.review)
			resp := review.Response
			var sent admissionv1.AdmissionReview
			if err := json.Unmarshal([]byte(tt.review), &sent); err != nil {
				t.Fatal(err)
			}
			if resp.UID != sent.Request.UID {
				t.Errorf("response uid %q, want the request's %q", resp.UID, sent.Request.UID)
			}
			if tt.wantDenied == "" {
				if !resp.Allowed {
					t.Fatalf("denied: %s", resp.Result.Message)
				}
			} else {
				if resp.Allowed {
					t.Fatalf("allowed, want denied with %q", tt.wantDenied)
				}
				if resp.Result == nil || !strings.Contains(resp.Result.Message, tt.wantDenied) {
					t.Errorf("denial = %+v\nwant a message containing %q", resp.Result, tt.wantDenied)
				}
			}
			if tt.wantWarning != "" && !strings.Contains(strings.Join(resp.Warnings, "\n"), tt.wantWarning) {
				t.Errorf("warnings = %q, want one containing %q", resp.Warnings, tt.wantWarning)
			}
			if tt.wantWarning == "" && len(resp.Warnings) > 0 {
				t.Errorf("unexpected warnings %q", resp.Warnings)
			}
		})
	}
}

func TestQueueValidatorRejectsMalformedRequests(t *testing.T) {
	handler := NewQueueValidator(existing(t, seedTree))
	for _, tc := range []struct {
		name, method, body string
		wantCode           int
	}{
		{"GET", http.MethodGet, "", http.StatusMethodNotAllowed},
		{"not JSON", http.MethodPost, "{", http.StatusBadRequest},
		{"no request", http.MethodPost, `{"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview"}`, http.StatusBadRequest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := httptest.NewRecorder()
			handler.ServeHTTP(rec, httptest.NewRequest(tc.method, "/validate-queue", strings.NewReader(tc.body)))
			if rec.Code != tc.wantCode {
				t.Errorf("HTTP %d, want %d", rec.Code, tc.wantCode)
			}
		})
	}
}
