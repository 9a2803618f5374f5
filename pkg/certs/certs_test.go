package certs

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
)

const ns = "gantry-system"

func webhookConfigs() []runtime.Object {
	svc := &admissionregistrationv1.ServiceReference{Namespace: ns, Name: "gantry-scheduler-webhook"}
	return []runtime.Object{
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "gantry-scheduler-queues"},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "queues.scheduling.gantry.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc}}},
		},
		&admissionregistrationv1.MutatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "gantry-scheduler-pods"},
			Webhooks:   []admissionregistrationv1.MutatingWebhook{{Name: "pods.scheduling.gantry.dev", ClientConfig: admissionregistrationv1.WebhookClientConfig{Service: svc}}},
		},
		// Someone else's: must be left alone.
		&admissionregistrationv1.ValidatingWebhookConfiguration{
			ObjectMeta: metav1.ObjectMeta{Name: "other"},
			Webhooks:   []admissionregistrationv1.ValidatingWebhook{{Name: "other.example.com", ClientConfig: admissionregistrationv1.WebhookClientConfig{CABundle: []byte("theirs")}}},
		},
	}
}

type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

func newController(t *testing.T, client *fake.Clientset, c *clock) *controller {
	t.Helper()
	opts := Options{
		Namespace: ns, SecretName: "gantry-scheduler-webhook-tls", ServiceName: "gantry-scheduler-webhook",
		ValidatingWebhooks: []string{"gantry-scheduler-queues", "not-installed"},
		MutatingWebhooks:   []string{"gantry-scheduler-pods"},
		CertDir:            t.TempDir(),
		CAValidity:         300 * 24 * time.Hour,
		CertValidity:       30 * 24 * time.Hour,
		Now:                c.now,
	}
	if err := opts.complete(); err != nil {
		t.Fatal(err)
	}
	return &controller{client: client, opts: opts}
}

func secretData(t *testing.T, client *fake.Clientset) map[string][]byte {
	t.Helper()
	s, err := client.CoreV1().Secrets(ns).Get(context.Background(), "gantry-scheduler-webhook-tls", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return s.Data
}

// checkServing verifies that the webhook configurations' caBundle trusts the
// certificate in CertDir for the Service's DNS name at time at.
func checkServing(t *testing.T, client *fake.Clientset, c *controller, at time.Time) {
	t.Helper()
	ctx := context.Background()
	v, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "gantry-scheduler-queues", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	m, err := client.AdmissionregistrationV1().MutatingWebhookConfigurations().Get(ctx, "gantry-scheduler-pods", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	other, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "other", metav1.GetOptions{})
	if string(other.Webhooks[0].ClientConfig.CABundle) != "theirs" {
		t.Error("the caBundle of a configuration not named in Options was changed")
	}
	pair, err := tls.LoadX509KeyPair(filepath.Join(c.opts.CertDir, "tls.crt"), filepath.Join(c.opts.CertDir, "tls.key"))
	if err != nil {
		t.Fatalf("cert dir: %v", err)
	}
	leaf, _ := x509.ParseCertificate(pair.Certificate[0])
	for _, bundle := range [][]byte{v.Webhooks[0].ClientConfig.CABundle, m.Webhooks[0].ClientConfig.CABundle} {
		roots := x509.NewCertPool()
		if !roots.AppendCertsFromPEM(bundle) {
			t.Fatalf("caBundle %q holds no certificate", bundle)
		}
		if _, err := leaf.Verify(x509.VerifyOptions{
			DNSName: "gantry-scheduler-webhook.gantry-system.svc", Roots: roots, CurrentTime: at,
			KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		}); err != nil {
			t.Errorf("the API server would not trust the served certificate at %s: %v", at, err)
		}
	}
}

func TestCreatesSecretFilesAndCABundles(t *testing.T) {
	client := fake.NewClientset(webhookConfigs()...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newController(t, client, clk)
	next, err := c.sync(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	data := secretData(t, client)
	for _, k := range []string{KeyCACert, KeyCAKey, KeyTLSCert, KeyTLSKey} {
		if len(data[k]) == 0 {
			t.Errorf("Secret lacks %s", k)
		}
	}
	checkServing(t, client, c, clk.t)
	// Renewal is due with a third of the serving certificate's 30 days left.
	if want := clk.t.Add(20 * 24 * time.Hour); next.Sub(want).Abs() > 2*time.Hour {
		t.Errorf("next renewal at %s, want about %s", next, want)
	}
	fi, err := os.Stat(filepath.Join(c.opts.CertDir, "tls.key"))
	if err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("tls.key mode %v, %v; want 0600", fi.Mode(), err)
	}
}

func TestSecondSyncChangesNothing(t *testing.T) {
	client := fake.NewClientset(webhookConfigs()...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newController(t, client, clk)
	if _, err := c.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	before := secretData(t, client)
	client.ClearActions()
	clk.t = clk.t.Add(24 * time.Hour)
	if _, err := c.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, a := range client.Actions() {
		if a.GetVerb() != "get" {
			t.Errorf("a sync with nothing due did %s %s", a.GetVerb(), a.GetResource().Resource)
		}
	}
	if !bytes.Equal(before[KeyTLSCert], secretData(t, client)[KeyTLSCert]) {
		t.Error("certificate changed although nothing was due")
	}
}

// A second replica (or a restart) finds the Secret and uses it: one CA for all.
func TestReplicasShareOneCA(t *testing.T) {
	client := fake.NewClientset(webhookConfigs()...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	a, b := newController(t, client, clk), newController(t, client, clk)
	if _, err := a.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := b.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	ca, _ := os.ReadFile(filepath.Join(a.opts.CertDir, "tls.crt"))
	cb, _ := os.ReadFile(filepath.Join(b.opts.CertDir, "tls.crt"))
	if !bytes.Equal(ca, cb) {
		t.Error("two replicas serve different certificates")
	}
}

// A GitOps sync re-applies the webhook configurations without caBundle; the next sync
// puts it back.
func TestCABundleRestoredAfterWipe(t *testing.T) {
	client := fake.NewClientset(webhookConfigs()...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newController(t, client, clk)
	ctx := context.Background()
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	ca := secretData(t, client)[KeyCACert]
	v, _ := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Get(ctx, "gantry-scheduler-queues", metav1.GetOptions{})
	v.Webhooks[0].ClientConfig.CABundle = nil
	if _, err := client.AdmissionregistrationV1().ValidatingWebhookConfigurations().Update(ctx, v, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	checkServing(t, client, c, clk.t)
	if !bytes.Equal(ca, secretData(t, client)[KeyCACert]) {
		t.Error("the CA changed; restoring caBundle must not make a new CA")
	}
}

func TestServingCertRenewedBeforeExpiry(t *testing.T) {
	client := fake.NewClientset(webhookConfigs()...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newController(t, client, clk)
	ctx := context.Background()
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	first := secretData(t, client)
	clk.t = clk.t.Add(21 * 24 * time.Hour) // 9 of 30 days left
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	second := secretData(t, client)
	if bytes.Equal(first[KeyTLSCert], second[KeyTLSCert]) {
		t.Fatal("serving certificate not renewed with less than a third of its lifetime left")
	}
	if !bytes.Equal(first[KeyCACert], second[KeyCACert]) {
		t.Error("CA changed although it was not due")
	}
	files, _ := os.ReadFile(filepath.Join(c.opts.CertDir, "tls.crt"))
	if !bytes.Equal(files, second[KeyTLSCert]) {
		t.Error("cert dir still holds the old certificate")
	}
	// Past the old certificate's expiry the new one is still trusted.
	checkServing(t, client, c, clk.t.Add(10*24*time.Hour))
}

func TestCARolloverKeepsOldCATrusted(t *testing.T) {
	client := fake.NewClientset(webhookConfigs()...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newController(t, client, clk)
	ctx := context.Background()
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	oldCA := parseCerts(secretData(t, client)[KeyCACert])[0]
	clk.t = clk.t.Add(201 * 24 * time.Hour) // 99 of 300 days of the CA left
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	cas := parseCerts(secretData(t, client)[KeyCACert])
	if len(cas) != 2 || cas[0].Equal(oldCA) || !cas[1].Equal(oldCA) {
		t.Fatalf("after the CA's renewal ca.crt holds %d certificates; want the new CA, then the old one", len(cas))
	}
	checkServing(t, client, c, clk.t)
	// Once the old CA has expired, the next renewal drops it.
	clk.t = oldCA.NotAfter.Add(time.Hour)
	b, _, err := c.renew(parseBundle(secretData(t, client)))
	if err != nil {
		t.Fatal(err)
	}
	if b.caKey == nil {
		t.Fatal("CA lost")
	}
}

// A Secret someone broke (a key that does not match, or garbage) is replaced, not
// served.
func TestBrokenSecretReplaced(t *testing.T) {
	objs := append(webhookConfigs(), &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: "gantry-scheduler-webhook-tls", Namespace: ns},
		Data:       map[string][]byte{KeyCACert: []byte("not a certificate"), KeyTLSCert: []byte("x"), KeyTLSKey: []byte("y")},
	})
	client := fake.NewClientset(objs...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newController(t, client, clk)
	if _, err := c.sync(context.Background()); err != nil {
		t.Fatal(err)
	}
	checkServing(t, client, c, clk.t)
}

// A certificate for another Service name (the release was renamed) is reissued.
func TestCertificateForOtherServiceReissued(t *testing.T) {
	client := fake.NewClientset(webhookConfigs()...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newController(t, client, clk)
	ctx := context.Background()
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	c.opts.ServiceName = "renamed-webhook"
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	leaf := parseCerts(secretData(t, client)[KeyTLSCert])[0]
	if err := leaf.VerifyHostname("renamed-webhook.gantry-system.svc"); err != nil {
		t.Error(err)
	}
}

// Two replicas that both find no Secret: the second Create fails, and its retry reads
// the winner's Secret.
func TestCreateRaceResolvedByRetry(t *testing.T) {
	client := fake.NewClientset(webhookConfigs()...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	winner, loser := newController(t, client, clk), newController(t, client, clk)
	raced := false
	client.PrependReactor("create", "secrets", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if raced {
			return false, nil, nil
		}
		raced = true
		// The winner writes between the loser's get and create (through the tracker: the
		// fake client is locked while a reactor runs).
		b, _, err := winner.renew(parseBundle(nil))
		if err != nil {
			t.Error(err)
		}
		secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "gantry-scheduler-webhook-tls", Namespace: ns}, Data: b.data()}
		if err := client.Tracker().Create(corev1.SchemeGroupVersion.WithResource("secrets"), secret, ns); err != nil {
			t.Error(err)
		}
		return true, nil, apierrors.NewAlreadyExists(schema.GroupResource{Resource: "secrets"}, "gantry-scheduler-webhook-tls")
	})
	if _, err := loser.sync(context.Background()); !apierrors.IsAlreadyExists(errors.Unwrap(err)) {
		t.Fatalf("first sync of the loser: %v, want AlreadyExists", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := loser.syncUntilDone(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := winner.sync(ctx); err != nil {
		t.Fatal(err)
	}
	a, _ := os.ReadFile(filepath.Join(winner.opts.CertDir, "tls.crt"))
	b, _ := os.ReadFile(filepath.Join(loser.opts.CertDir, "tls.crt"))
	if !bytes.Equal(a, b) {
		t.Error("after the race the replicas serve different certificates")
	}
}

func TestOptionsFromEnv(t *testing.T) {
	t.Setenv(EnvMode, "")
	if _, self, err := OptionsFromEnv("/d"); err != nil || self {
		t.Errorf("no mode: self=%v err=%v, want external", self, err)
	}
	t.Setenv(EnvMode, "bogus")
	if _, _, err := OptionsFromEnv("/d"); err == nil {
		t.Error("a bogus mode was accepted")
	}
	t.Setenv(EnvMode, ModeSelf)
	if _, _, err := OptionsFromEnv("/d"); err == nil {
		t.Error("self mode without a Secret name was accepted")
	}
	t.Setenv(EnvNamespace, ns)
	t.Setenv(EnvSecret, "s")
	t.Setenv(EnvService, "svc")
	t.Setenv(EnvValidatingWebhooks, "a, b")
	t.Setenv(EnvMutatingWebhooks, "c")
	o, self, err := OptionsFromEnv("/d")
	if err != nil || !self || o.CertDir != "/d" || len(o.ValidatingWebhooks) != 2 || o.ValidatingWebhooks[1] != "b" || o.MutatingWebhooks[0] != "c" {
		t.Errorf("got %+v %v %v", o, self, err)
	}
}

// The server side: a TLS server using ServingTLSConfig serves the renewed certificate
// once Start's loop has written it, without a restart.
func TestServingTLSConfigReloads(t *testing.T) {
	client := fake.NewClientset(webhookConfigs()...)
	clk := &clock{time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)}
	c := newController(t, client, clk)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	cfg, err := ServingTLSConfig(ctx, c.opts.CertDir)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}), ReadHeaderTimeout: time.Second}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Close()
	served := func() []byte {
		conn, err := tls.Dial("tcp", ln.Addr().String(), &tls.Config{InsecureSkipVerify: true}) //nolint:gosec // reads the served certificate only
		if err != nil {
			t.Fatal(err)
		}
		defer conn.Close()
		return conn.ConnectionState().PeerCertificates[0].Raw
	}
	first := served()
	if !bytes.Equal(first, parseCerts(secretData(t, client)[KeyTLSCert])[0].Raw) {
		t.Fatal("the server does not serve the certificate in the cert dir")
	}
	clk.t = clk.t.Add(25 * 24 * time.Hour)
	if _, err := c.sync(ctx); err != nil {
		t.Fatal(err)
	}
	want := parseCerts(secretData(t, client)[KeyTLSCert])[0].Raw
	if bytes.Equal(first, want) {
		t.Fatal("the certificate was not renewed")
	}
	// certwatcher reloads on the file event (or its 10 s poll); wait for it, bounded.
	deadline := time.Now().Add(30 * time.Second)
	for !bytes.Equal(served(), want) {
		if time.Now().After(deadline) {
			t.Fatal("the server still serves the old certificate 30 s after the files changed")
		}
		time.Sleep(100 * time.Millisecond)
	}
}
