package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	jsonpatch "github.com/evanphx/json-patch/v5"
	admissionv1 "k8s.io/api/admission/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/webhook"
)

// The ResourceClaimTemplates the pod webhook creates for annotation shares do not
// outlive the pods that use them: the scheduler records each such pod as an owner
// of its template, and kube-controller-manager's garbage collector deletes the
// template once the last of them is gone (it keeps it, minus the dead pod's
// reference, while another remains). A pod admitted against a template that was
// collected before its claim was generated gets the template back, owned by it, and
// its claim. Pods here use a scheduler nobody runs: templates and claims are
// kube-controller-manager's business, not placement's.
func TestShareTemplatesAreCollectedWithTheirPods(t *testing.T) {
	ns := namespace(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	sizes := func(context.Context) ([]int64, error) { return []int64{80 << 30}, nil }
	defaulter := webhook.PodDefaulter{Templates: webhook.DynamicTemplateEnsurer(dyn), Sizes: sizes}
	go webhook.RunTemplateOwners(ctx, dyn, defaulter.TemplateFor)

	// Two pods of one shape share one template, owned by both.
	a := admitShare(t, defaulter, ns, "a", names.AnnotationGPUMemory, "10Gi")
	b := admitShare(t, defaulter, ns, "b", names.AnnotationGPUMemory, "10Gi")
	tmpl := webhook.ShareTemplateName(10 << 30)
	waitTemplate(t, ns, tmpl, "owned by a and b", func(tm *resourceapi.ResourceClaimTemplate) bool {
		return ownerUIDs(tm, a.UID, b.UID)
	})
	waitPods(t, ns, 2*time.Minute, "both claims generated from the template", func(ps []corev1.Pod) bool {
		return generatedClaims(ps) == 2
	})
	deletePod(t, a)
	waitTemplate(t, ns, tmpl, "kept for b, a's reference pruned", func(tm *resourceapi.ResourceClaimTemplate) bool {
		return ownerUIDs(tm, b.UID)
	})
	deletePod(t, b)
	waitTemplateGone(t, ns, tmpl)

	// A pod whose template was collected before its claim was generated (admitted
	// through a webhook that found the template still there): here the template is
	// never made at admission.
	noCreate := webhook.PodDefaulter{Templates: func(context.Context, *resourceapi.ResourceClaimTemplate) error { return nil }, Sizes: sizes}
	c := admitShare(t, noCreate, ns, "c", names.AnnotationGPUFraction, "0.5")
	frac := webhook.FractionTemplateName(500, []int64{80 << 30})
	t.Cleanup(func() {
		_ = env.Client.ResourceV1().ResourceClaimTemplates(ns).Delete(context.Background(), frac, metav1.DeleteOptions{})
	})
	waitTemplate(t, ns, frac, "made again, owned by c", func(tm *resourceapi.ResourceClaimTemplate) bool {
		return ownerUIDs(tm, c.UID)
	})
	waitPods(t, ns, 2*time.Minute, "c's claim generated from the template made again", func(ps []corev1.Pod) bool {
		return generatedClaims(ps) == 1
	})
	deletePod(t, c)
	waitTemplateGone(t, ns, frac)
}

// admitShare creates a pod with a share annotation as the API server would with the
// pod webhook d in front of it (d's patch applied), and returns it as created.
func admitShare(t *testing.T, d webhook.PodDefaulter, ns, name, key, value string) *corev1.Pod {
	t.Helper()
	pod := newPod(ns, name, withScheduler("no-such-scheduler"), withAnnotations(key, value))
	raw, err := json.Marshal(pod)
	if err != nil {
		t.Fatal(err)
	}
	resp := d.Review(context.Background(), &admissionv1.AdmissionRequest{
		UID:  types.UID("review-" + name),
		Kind: metav1.GroupVersionKind{Version: "v1", Kind: "Pod"}, Operation: admissionv1.Create,
		Namespace: ns, Object: runtime.RawExtension{Raw: raw},
	})
	if !resp.Allowed || resp.Patch == nil {
		t.Fatalf("webhook: allowed %v, no patch; result %v, warnings %v", resp.Allowed, resp.Result, resp.Warnings)
	}
	p, err := jsonpatch.DecodePatch(resp.Patch)
	if err != nil {
		t.Fatal(err)
	}
	if raw, err = p.Apply(raw); err != nil {
		t.Fatal(err)
	}
	var patched corev1.Pod
	if err := json.Unmarshal(raw, &patched); err != nil {
		t.Fatal(err)
	}
	created, err := env.Client.CoreV1().Pods(ns).Create(context.Background(), &patched, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create pod %s/%s: %v", ns, name, err)
	}
	return created
}

func deletePod(t *testing.T, p *corev1.Pod) {
	t.Helper()
	zero := int64(0)
	if err := env.Client.CoreV1().Pods(p.Namespace).Delete(context.Background(), p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil {
		t.Fatal(err)
	}
}

// ownerUIDs reports whether the template's owners are exactly these pods.
func ownerUIDs(tm *resourceapi.ResourceClaimTemplate, uids ...types.UID) bool {
	var got []types.UID
	for _, r := range tm.OwnerReferences {
		if r.Kind != "Pod" || r.APIVersion != "v1" {
			return false
		}
		got = append(got, r.UID)
	}
	slices.Sort(got)
	slices.Sort(uids)
	return slices.Equal(got, uids)
}

func generatedClaims(ps []corev1.Pod) int {
	n := 0
	for _, p := range ps {
		for _, s := range p.Status.ResourceClaimStatuses {
			if s.Name == webhook.ShareClaimRef && s.ResourceClaimName != nil {
				n++
			}
		}
	}
	return n
}

// waitTemplate polls the template until it exists and cond holds for it, or fails
// after a generous deadline.
func waitTemplate(t *testing.T, ns, name, what string, cond func(*resourceapi.ResourceClaimTemplate) bool) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		tm, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() == nil {
				last = err.Error()
			}
			return false, nil
		}
		last = fmt.Sprintf("owners %v", tm.OwnerReferences)
		return cond(tm), nil
	})
	if err != nil {
		t.Fatalf("template %s/%s %s: not reached; last seen: %s", ns, name, what, last)
	}
}

func waitTemplateGone(t *testing.T, ns, name string) {
	t.Helper()
	var last string
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		tm, err := env.Client.ResourceV1().ResourceClaimTemplates(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return true, nil
		}
		if err == nil {
			last = fmt.Sprintf("owners %v", tm.OwnerReferences)
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("template %s/%s not collected once its pods were gone; last seen: %s", ns, name, last)
	}
}
