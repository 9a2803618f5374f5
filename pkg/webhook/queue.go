// Package webhook serves Gantry's validating admission webhook for Queues: a plain
// net/http handler for admission.k8s.io/v1 AdmissionReview requests, with no
// controller-runtime webhook server.
//
// It rejects what the CRD's schema and CEL rules cannot see because it needs the other
// Queues: a spec.parentQueue that names no existing queue, a parentQueue that closes a
// cycle, and deleting a queue that still has children. It re-checks the rules the CRD
// already enforces (quota and limit -1 or ≥ 0, limit ≥ quota) with fairshare.Validate,
// so that the message a user gets carries the values and the field to change.
//
// Fail closed for Queues, never block pods. Register it with failurePolicy: Fail, and
// only for queues.scheduling.gantry.dev (CREATE, UPDATE, DELETE): a Queue tree that
// could not be checked is not let in, and a webhook outage only delays queue edits.
// The handler allows every request for any other kind without looking at it, so even
// a misconfigured registration cannot block pods. Two concurrent edits that together
// form a cycle can both pass; the scheduler then leaves the queues of the cycle out
// (fairshare.Compute) and reports it on their status.
//
// It must not depend on the scheduler core beyond pkg/fairshare and pkg/model, nor
// hold a client: it reads existing Queues through the QueueLister it is given.
package webhook

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"

	admissionv1 "k8s.io/api/admission/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/apis/scheduling/convert"
	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/fairshare"
)

// maxRequestBytes bounds an AdmissionReview body; the apiserver's own request limit is
// 3 MiB.
const maxRequestBytes = 3 << 20

// QueueLister returns every Queue that exists now. An informer lister's view may lag
// a moment behind a Queue just created; a rejected child can then simply be applied
// again.
type QueueLister func(ctx context.Context) ([]schedulingv1alpha1.Queue, error)

// QueueValidator is the http.Handler of the Queue validating webhook.
type QueueValidator struct {
	listQueues QueueLister
}

// NewQueueValidator returns the handler; listQueues reads the existing Queues.
func NewQueueValidator(listQueues QueueLister) *QueueValidator {
	return &QueueValidator{listQueues: listQueues}
}

// ServeHTTP answers one AdmissionReview.
func (v *QueueValidator) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	serveReview(w, r, v.Review)
}

// serveReview decodes an AdmissionReview, lets review decide, and writes the answer.
func serveReview(w http.ResponseWriter, r *http.Request, review func(context.Context, *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse) {
	if r.Method != http.MethodPost {
		http.Error(w, "POST an admission.k8s.io/v1 AdmissionReview", http.StatusMethodNotAllowed)
		return
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err != nil {
		http.Error(w, fmt.Sprintf("read AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	var in admissionv1.AdmissionReview
	if err := json.Unmarshal(body, &in); err != nil {
		http.Error(w, fmt.Sprintf("decode AdmissionReview: %v", err), http.StatusBadRequest)
		return
	}
	if in.Request == nil {
		http.Error(w, "AdmissionReview has no request", http.StatusBadRequest)
		return
	}
	response := review(r.Context(), in.Request)
	response.UID = in.Request.UID
	out, err := json.Marshal(admissionv1.AdmissionReview{
		TypeMeta: metav1.TypeMeta{APIVersion: admissionv1.SchemeGroupVersion.String(), Kind: "AdmissionReview"},
		Response: response,
	})
	if err != nil {
		http.Error(w, fmt.Sprintf("encode AdmissionReview: %v", err), http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	_, _ = w.Write(out)
}

// Review decides one admission request. Requests for anything but a Queue are allowed
// unread.
func (v *QueueValidator) Review(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	if req.Kind.Group != schedulingv1alpha1.GroupName || req.Kind.Kind != "Queue" {
		return allow(nil)
	}
	switch req.Operation {
	case admissionv1.Create, admissionv1.Update:
		return v.reviewWrite(ctx, req)
	case admissionv1.Delete:
		return v.reviewDelete(ctx, req)
	}
	return allow(nil)
}

func (v *QueueValidator) reviewWrite(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	var queue schedulingv1alpha1.Queue
	if err := json.Unmarshal(req.Object.Raw, &queue); err != nil {
		return deny(http.StatusBadRequest, fmt.Sprintf("cannot read the Queue: %v", err))
	}
	existing, err := v.listQueues(ctx)
	if err != nil {
		return cannotCheck(err)
	}
	before := convert.Queues(existing)
	after := convert.Queues(existing)
	after[queue.Name] = convert.Queue(&queue)

	var verr *fairshare.ValidationError
	if err := fairshare.Validate(after); errors.As(err, &verr) {
		// Only problems this queue is part of: a tree broken elsewhere (say, while the
		// webhook was down) must not block unrelated edits.
		if problems := verr.About(queue.Name); len(problems) > 0 {
			msgs := make([]string, len(problems))
			for i, p := range problems {
				msgs[i] = p.Message
			}
			return deny(http.StatusUnprocessableEntity, strings.Join(msgs, "; "))
		}
	}
	return allow(newWarnings(fairshare.Warnings(before), fairshare.Warnings(after)))
}

func (v *QueueValidator) reviewDelete(ctx context.Context, req *admissionv1.AdmissionRequest) *admissionv1.AdmissionResponse {
	existing, err := v.listQueues(ctx)
	if err != nil {
		return cannotCheck(err)
	}
	var children []string
	for _, q := range existing {
		if q.Spec.ParentQueue == req.Name && q.Name != req.Name {
			children = append(children, q.Name)
		}
	}
	if len(children) == 0 {
		return allow(nil)
	}
	sort.Strings(children)
	return deny(http.StatusUnprocessableEntity, fmt.Sprintf(
		"queue %s still has child queues (%s): delete them or change their spec.parentQueue first",
		req.Name, strings.Join(children, ", ")))
}

// cannotCheck fails closed: a Queue that could not be checked against the others is
// not admitted.
func cannotCheck(err error) *admissionv1.AdmissionResponse {
	return deny(http.StatusServiceUnavailable, fmt.Sprintf(
		"cannot list the existing Queues to check spec.parentQueue (%v): try again in a moment", err))
}

func allow(warnings []string) *admissionv1.AdmissionResponse {
	return &admissionv1.AdmissionResponse{Allowed: true, Warnings: warnings}
}

func deny(code int32, message string) *admissionv1.AdmissionResponse {
	reason := metav1.StatusReasonInvalid
	switch code {
	case http.StatusBadRequest:
		reason = metav1.StatusReasonBadRequest
	case http.StatusServiceUnavailable:
		reason = metav1.StatusReasonServiceUnavailable
	}
	return &admissionv1.AdmissionResponse{
		Allowed: false,
		Result:  &metav1.Status{Status: metav1.StatusFailure, Code: code, Reason: reason, Message: message},
	}
}

// newWarnings returns the warnings of after that before did not have.
func newWarnings(before, after []string) []string {
	seen := map[string]bool{}
	for _, w := range before {
		seen[w] = true
	}
	var out []string
	for _, w := range after {
		if !seen[w] {
			out = append(out, w)
		}
	}
	return out
}
