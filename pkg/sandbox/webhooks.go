package sandbox

import (
	"context"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/webhook"
	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"
)

// RegisterWebhooks points the API server at the scheduler's webhooks served at
// baseURL ("https://127.0.0.1:PORT"), trusting caPEM: Queues are validated with
// failurePolicy Fail (a tree that could not be checked is not let in), pods are
// defaulted with failurePolicy Ignore (an outage must never block a pod).
func RegisterWebhooks(ctx context.Context, client kubernetes.Interface, baseURL string, caPEM []byte) error {
	none := admissionregistrationv1.SideEffectClassNone
	validating := &admissionregistrationv1.ValidatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "gantry-queues"},
		Webhooks: []admissionregistrationv1.ValidatingWebhook{{
			Name:                    "queues.scheduling.gantry.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(baseURL + webhook.ValidateQueuePath), CABundle: caPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule([]string{names.GroupScheduling}, []string{"queues"}, admissionregistrationv1.Create, admissionregistrationv1.Update, admissionregistrationv1.Delete)},
			FailurePolicy:           ptr.To(admissionregistrationv1.Fail),
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(5)),
		}},
	}
	mutating := &admissionregistrationv1.MutatingWebhookConfiguration{
		ObjectMeta: metav1.ObjectMeta{Name: "gantry-pods"},
		Webhooks: []admissionregistrationv1.MutatingWebhook{{
			Name:                    "pods.gantry.dev",
			ClientConfig:            admissionregistrationv1.WebhookClientConfig{URL: ptr.To(baseURL + webhook.DefaultPodPath), CABundle: caPEM},
			Rules:                   []admissionregistrationv1.RuleWithOperations{rule([]string{""}, []string{"pods"}, admissionregistrationv1.Create)},
			FailurePolicy:           ptr.To(admissionregistrationv1.Ignore),
			SideEffects:             &none,
			AdmissionReviewVersions: []string{"v1"},
			TimeoutSeconds:          ptr.To(int32(2)),
			ReinvocationPolicy:      ptr.To(admissionregistrationv1.IfNeededReinvocationPolicy),
		}},
	}
	vc := client.AdmissionregistrationV1().ValidatingWebhookConfigurations()
	if _, err := vc.Create(ctx, validating, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register Queue webhook: %w", err)
	}
	mc := client.AdmissionregistrationV1().MutatingWebhookConfigurations()
	if _, err := mc.Create(ctx, mutating, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("register pod webhook: %w", err)
	}
	return nil
}

func rule(groups, resources []string, ops ...admissionregistrationv1.OperationType) admissionregistrationv1.RuleWithOperations {
	return admissionregistrationv1.RuleWithOperations{
		Operations: ops,
		Rule: admissionregistrationv1.Rule{
			APIGroups: groups, APIVersions: []string{"*"}, Resources: resources,
			Scope: ptr.To(admissionregistrationv1.AllScopes),
		},
	}
}
