package deploy

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/certs"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
)

// TestWebhooksAnswerAfterHelmInstall installs the chart with `helm install` itself
// (TestCertificatesSurviveReapply covers `helm template | kubectl apply`) and shows
// the API server calling the Queue webhook and the pod webhook after the install,
// after a `helm upgrade` with the same values, and after `helm uninstall` and a
// second `helm install`.
//
// kwok's pods run nothing, so the release runs no scheduler replica
// (scheduler.replicas=0) and the test plays its part with the scheduler's own code:
// pkg/certs, configured from the environment of the Deployment helm installed, and
// pkg/webhook serving with the certificate pkg/certs wrote, behind the release's
// webhook Service (serveWebhooks adds the endpoint).
func TestWebhooksAnswerAfterHelmInstall(t *testing.T) {
	if env == nil {
		t.Skip("installs on a real control plane; not started with -short")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	// Another release and namespace than TestChartInstall's; only the scheduler's
	// objects, so that nothing cluster-wide is shared with that release but the CRDs.
	const release, ns = "hooks", "gantry-hooks"
	args := []string{release, chartRel, "--namespace", ns, "--create-namespace", "--kubeconfig", env.Kubeconfig, "--timeout", "2m"}
	for _, s := range []string{"crds.install=false", "nodeAgent.enabled=false", "dashboards.enabled=false",
		"priorityClasses.create=false", "deviceClass.create=false", "defaultQueue.create=false", "scheduler.replicas=0"} {
		args = append(args, "--set", s)
	}
	applyChartCRDs(ctx, t)
	t.Cleanup(func() {
		// The release's Queue webhook (failurePolicy Fail) must not outlive the test.
		if out, err := helm(t, "uninstall", release, "--namespace", ns, "--kubeconfig", env.Kubeconfig, "--ignore-not-found", "--wait"); err != nil {
			t.Errorf("cleanup: %v\n%s", err, out)
		}
		_ = env.Client.CoreV1().Namespaces().Delete(context.Background(), ns, metav1.DeleteOptions{})
	})
	if out, err := helm(t, append([]string{"install"}, args...)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}

	opts := certOptionsOf(ctx, t, ns)
	opts.CertDir, opts.ResyncInterval = t.TempDir(), 200*time.Millisecond
	serveCtx, stopServing := context.WithCancel(ctx)
	defer stopServing()
	// The first "scheduler": its certificate controller runs until the upgrade below.
	certCtx, stopCerts := context.WithCancel(serveCtx)
	if err := certs.Start(certCtx, env.Client, opts); err != nil {
		t.Fatal(err)
	}
	secret, err := env.Client.CoreV1().Secrets(ns).Get(ctx, opts.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	serveWebhooks(serveCtx, t, ns, opts.ServiceName, opts.CertDir)
	answering := func(round string) {
		t.Helper()
		waitFor(ctx, t, round+": caBundle of the webhook configurations", func() error {
			return checkCABundles(ctx, opts, secret.Data[certs.KeyTLSCert])
		})
		waitFor(ctx, t, round+": the API server calls both webhooks", func() error { return webhooksAnswer(ctx) })
	}
	answering("after helm install")

	// With the certificate controller stopped, nothing would put back a caBundle that
	// the upgrade wiped: it must keep what the controller wrote.
	stopCerts()
	if out, err := helm(t, append([]string{"upgrade"}, args...)...); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if err := checkCABundles(ctx, opts, secret.Data[certs.KeyTLSCert]); err != nil {
		t.Errorf("helm upgrade with the same values wiped the caBundle: %v", err)
	}
	answering("after helm upgrade")

	// Uninstall and install again, with a new "scheduler": it finds the CA in the
	// Secret it left behind and writes it into the new webhook configurations.
	if out, err := helm(t, "uninstall", release, "--namespace", ns, "--kubeconfig", env.Kubeconfig, "--wait"); err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	if out, err := helm(t, append([]string{"install"}, args...)...); err != nil {
		t.Fatalf("second install: %v\n%s", err, out)
	}
	if err := certs.Start(serveCtx, env.Client, opts); err != nil {
		t.Fatal(err)
	}
	after, err := env.Client.CoreV1().Secrets(ns).Get(ctx, opts.SecretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(after.Data[certs.KeyCACert], secret.Data[certs.KeyCACert]) {
		t.Error("a second install made a new CA")
	}
	secret = after
	answering("after helm uninstall and a second helm install")
}

// certOptionsOf reads the certificate controller's options from the environment of
// the release's scheduler Deployment in ns, as the scheduler reads them (pkg/certs).
func certOptionsOf(ctx context.Context, t *testing.T, ns string) certs.Options {
	t.Helper()
	list, err := env.Client.AppsV1().Deployments(ns).List(ctx, metav1.ListOptions{LabelSelector: "app.kubernetes.io/component=scheduler"})
	if err != nil {
		t.Fatal(err)
	}
	if len(list.Items) != 1 {
		t.Fatalf("%d scheduler Deployments in %s, want 1", len(list.Items), ns)
	}
	vars := envOf(list.Items[0])
	if vars[certs.EnvMode] != certs.ModeSelf {
		t.Fatalf("%s=%q, want %q (the chart's default)", certs.EnvMode, vars[certs.EnvMode], certs.ModeSelf)
	}
	return certs.Options{
		Namespace: ns, SecretName: vars[certs.EnvSecret], ServiceName: vars[certs.EnvService],
		ValidatingWebhooks: strings.Split(vars[certs.EnvValidatingWebhooks], ","),
		MutatingWebhooks:   strings.Split(vars[certs.EnvMutatingWebhooks], ","),
	}
}

// envOf returns the literal environment variables of a Deployment's first container.
func envOf(d appsv1.Deployment) map[string]string {
	vars := map[string]string{}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		if e.ValueFrom == nil {
			vars[e.Name] = e.Value
		}
	}
	return vars
}

// applyChartCRDs applies the chart's CRDs stamped as TestChartInstall's release's own
// (Helm adopts them there), for releases installed with crds.install=false.
func applyChartCRDs(ctx context.Context, t *testing.T) {
	t.Helper()
	dyn := dynamic.NewForConfigOrDie(env.Config)
	n := 0
	for _, o := range render(t) {
		if o.GetKind() != "CustomResourceDefinition" {
			continue
		}
		ownedByRelease(o, "gantry", releaseNamespace)
		r, _ := resourceOf(o)
		body, err := o.MarshalJSON()
		if err != nil {
			t.Fatal(err)
		}
		force := true
		if _, err := dyn.Resource(r).Patch(ctx, o.GetName(), types.ApplyPatchType, body,
			metav1.PatchOptions{FieldManager: "kubectl", Force: &force}); err != nil {
			t.Fatalf("apply CRD %s: %v", o.GetName(), err)
		}
		n++
	}
	if n == 0 {
		t.Fatal("the chart rendered no CRD")
	}
	waitFor(ctx, t, "the Queue CRD established", func() error {
		_, err := dynamic.NewForConfigOrDie(env.Config).Resource(gvr.Queue).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
}
