package deploy

import (
	"bytes"
	"context"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/certs"
)

// TestCertificatesSurviveReapply renders the chart with `helm template`, applies it to
// the real API server as `kubectl apply --server-side` and a GitOps tool do, runs the
// scheduler's certificate controller (pkg/certs) with what the chart tells it, and
// applies the same render again, then replaces the webhook configurations outright as
// `kubectl replace` does: the caBundle stays, or comes back, and the CA stays the same.
func TestCertificatesSurviveReapply(t *testing.T) {
	if env == nil {
		t.Skip("applies to a real control plane; not started with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	const ns = "gantry-certs"
	// Another release name than TestChartInstall's, and only the scheduler's
	// namespaced objects and webhook configurations: no CRDs, classes or agent.
	set := []string{"nodeAgent.enabled=false", "dashboards.enabled=false", "priorityClasses.create=false",
		"deviceClass.create=false", "defaultQueue.create=false"}
	args := []string{"template", "certs", chartRel, "--namespace", ns}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	dyn := dynamic.NewForConfigOrDie(env.Config)
	t.Cleanup(func() {
		// The Queue webhook (failurePolicy Fail, nobody serving it) must not outlive
		// the test: it would refuse every Queue of the other tests.
		for _, o := range objs {
			if r, ok := resourceOf(o); ok && o.GetNamespace() == "" && o.GetKind() != "CustomResourceDefinition" {
				_ = dyn.Resource(r).Delete(context.Background(), o.GetName(), metav1.DeleteOptions{})
			}
		}
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	// The CRDs stay, stamped as TestChartInstall's release's own, which Helm then
	// adopts. Deleting them made that test wait on the API server's CRD finalizer,
	// once for over two minutes (.ci/run), and then fail on the leftover.
	for _, o := range objs {
		if o.GetKind() == "CustomResourceDefinition" {
			ownedByRelease(o, "gantry", releaseNamespace)
		}
	}
	schedEnv := map[string]string{}
	for _, o := range objs {
		if o.GetKind() != "Deployment" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		envs, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
		for _, e := range envs {
			m := e.(map[string]any)
			if v, ok := m["value"].(string); ok {
				schedEnv[m["name"].(string)] = v
			}
		}
	}
	apply := func(round string) {
		t.Helper()
		for _, o := range objs {
			if o.GetKind() == "Service" && o.GetName() == schedEnv[certs.EnvService] {
				o = withoutSelector(o) // the test serves the webhooks (serveWebhooks)
			}
			r, ok := resourceOf(o)
			if !ok {
				t.Fatalf("no resource known for %s", o.GetKind())
			}
			body, err := o.MarshalJSON()
			if err != nil {
				t.Fatal(err)
			}
			var ri dynamic.ResourceInterface = dyn.Resource(r)
			if o.GetNamespace() != "" {
				ri = dyn.Resource(r).Namespace(o.GetNamespace())
			}
			force := true
			if _, err := ri.Patch(ctx, o.GetName(), types.ApplyPatchType, body, metav1.PatchOptions{FieldManager: "kubectl", Force: &force}); err != nil {
				t.Fatalf("%s: apply %s %s: %v", round, o.GetKind(), o.GetName(), err)
			}
		}
	}
	apply("first apply")
	opts := certs.Options{
		Namespace: ns, SecretName: schedEnv[certs.EnvSecret], ServiceName: schedEnv[certs.EnvService],
		ValidatingWebhooks: strings.Split(schedEnv[certs.EnvValidatingWebhooks], ","),
		MutatingWebhooks:   strings.Split(schedEnv[certs.EnvMutatingWebhooks], ","),
		CertDir:            t.TempDir(), ResyncInterval: 200 * time.Millisecond,
	}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	if err := certs.Start(runCtx, env.Client, opts); err != nil {
		t.Fatal(err)
	}
	secret, err := env.Client.CoreV1().Secrets(ns).Get(ctx, opts.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ca := secret.Data[certs.KeyCACert]
	serveWebhooks(runCtx, t, ns, opts.ServiceName, opts.CertDir)
	trusted := func(round string) {
		t.Helper()
		waitFor(ctx, t, round+": caBundle of the webhook configurations", func() error {
			return checkCABundles(ctx, opts, secret.Data[certs.KeyTLSCert])
		})
		waitFor(ctx, t, round+": the API server calls both webhooks", func() error { return webhooksAnswer(ctx) })
	}
	trusted("after the first apply")

	apply("second apply")
	if err := checkCABundles(ctx, opts, secret.Data[certs.KeyTLSCert]); err != nil {
		t.Errorf("a second server-side apply of the same render wiped the caBundle: %v", err)
	}
	if err := webhooksAnswer(ctx); err != nil {
		t.Errorf("after a second server-side apply of the same render: %v", err)
	}

	// `kubectl replace` (or a tool that updates the whole object) drops caBundle; the
	// controller puts it back on its next resync.
	vwc, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, opts.ValidatingWebhooks[0], metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	vwc.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, vwc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	trusted("after the caBundle was wiped")

	// A restarted scheduler (a new controller) keeps the CA.
	stop()
	if err := certs.Start(ctx, env.Client, opts); err != nil {
		t.Fatal(err)
	}
	after, err := env.Client.CoreV1().Secrets(ns).Get(ctx, opts.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after.Data[certs.KeyCACert], ca) {
		t.Error("a restart made a new CA")
	}
}

// checkCABundles verifies that every webhook of the named configurations trusts the
// serving certificate for the Service's DNS name.
func checkCABundles(ctx context.Context, opts certs.Options, servingPEM []byte) error {
	block, _ := pem.Decode(servingPEM)
	if block == nil {
		return fmt.Errorf("no serving certificate")
	}
	leaf, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return err
	}
	var bundles [][]byte
	for _, name := range opts.ValidatingWebhooks {
		c, err := env.Client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, w := range c.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
	}
	for _, name := range opts.MutatingWebhooks {
		c, err := env.Client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		for _, w := range c.Webhooks {
			bundles = append(bundles, w.ClientConfig.CABundle)
		}
	}
	for _, b := range bundles {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(b) {
			return fmt.Errorf("caBundle %q holds no certificate", b)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{DNSName: opts.DNSNames()[0], Roots: roots,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}); err != nil {
			return err
		}
	}
	return nil
}

// resourceOf maps the kinds the chart renders to their resources.
func resourceOf(o *unstructured.Unstructured) (schema.GroupVersionResource, bool) {
	gv, err := schema.ParseGroupVersion(o.GetAPIVersion())
	if err != nil {
		return schema.GroupVersionResource{}, false
	}
	plural := map[string]string{
		"ServiceAccount": "serviceaccounts", "ConfigMap": "configmaps", "Service": "services", "Secret": "secrets",
		"Deployment": "deployments", "PodDisruptionBudget": "poddisruptionbudgets",
		"ClusterRole": "clusterroles", "ClusterRoleBinding": "clusterrolebindings", "Role": "roles", "RoleBinding": "rolebindings",
		"ValidatingWebhookConfiguration": "validatingwebhookconfigurations", "MutatingWebhookConfiguration": "mutatingwebhookconfigurations",
		"CustomResourceDefinition": "customresourcedefinitions",
	}[o.GetKind()]
	return gv.WithResource(plural), plural != ""
}

// ownedByRelease stamps an object with the ownership metadata Helm checks before it
// adopts an existing object into a release.
func ownedByRelease(o *unstructured.Unstructured, release, namespace string) {
	labels := o.GetLabels()
	if labels == nil {
		labels = map[string]string{}
	}
	labels["app.kubernetes.io/managed-by"] = "Helm"
	o.SetLabels(labels)
	annotations := o.GetAnnotations()
	if annotations == nil {
		annotations = map[string]string{}
	}
	annotations["meta.helm.sh/release-name"] = release
	annotations["meta.helm.sh/release-namespace"] = namespace
	o.SetAnnotations(annotations)
}
