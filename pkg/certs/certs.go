// Package certs keeps the scheduler's webhook serving certificate without Helm's
// lookup or genCA, so that Argo CD, Flux and `helm template | kubectl apply` installs
// keep one CA across syncs.
//
// Each scheduler replica runs the same small controller (Run or Start):
//
//   - It keeps a self-signed CA and a serving certificate for the webhook Service in one
//     Secret of its namespace (ca.crt, ca.key, tls.crt, tls.key), creating the Secret when
//     it is missing. Replicas race only through the API server's optimistic concurrency:
//     the first write wins, the others read it back.
//   - It writes tls.crt and tls.key into CertDir, where the webhook server reads them
//     through controller-runtime's certwatcher (ServingTLSConfig), so a rotated
//     certificate is served without a restart.
//   - It sets caBundle on every webhook of the named ValidatingWebhookConfigurations and
//     MutatingWebhookConfigurations, and sets it again when a GitOps sync or a
//     `kubectl replace` wiped it.
//   - It renews the serving certificate once less than a third of its lifetime is left,
//     and the CA likewise; the old CA stays in caBundle while it is valid, so that a
//     replica still serving the old certificate is trusted during the rollover.
//
// The chart's RBAC lets it get, create and update that one Secret (create cannot be
// limited by name) and get and update its own webhook configurations only.
package certs

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"
)

// Options say which Secret, Service and webhook configurations the certificate is for.
type Options struct {
	// Namespace of the Secret and the Service.
	Namespace string
	// SecretName is the Secret holding the CA and the serving certificate.
	SecretName string
	// ServiceName is the webhook Service; the certificate names it as
	// NAME, NAME.NAMESPACE, NAME.NAMESPACE.svc and NAME.NAMESPACE.svc.cluster.local.
	ServiceName string
	// ValidatingWebhooks and MutatingWebhooks name the configurations whose webhooks
	// get the CA as caBundle. A configuration that does not exist (webhooks disabled,
	// or not applied yet) is skipped and looked at again on the next resync.
	ValidatingWebhooks []string
	MutatingWebhooks   []string
	// CertDir receives tls.crt and tls.key for the webhook server; empty writes none.
	CertDir string
	// CAValidity and CertValidity default to 10 years and 1 year.
	CAValidity   time.Duration
	CertValidity time.Duration
	// ResyncInterval is how often the Secret and the caBundles are checked again even
	// when nothing is due; default 1 minute.
	ResyncInterval time.Duration
	// Now is the clock; tests set it.
	Now func() time.Time
}

// Defaults of Options.
const (
	DefaultCAValidity     = 10 * 365 * 24 * time.Hour
	DefaultCertValidity   = 365 * 24 * time.Hour
	DefaultResyncInterval = time.Minute
)

func (o *Options) complete() error {
	var missing []string
	for name, v := range map[string]string{"Namespace": o.Namespace, "SecretName": o.SecretName, "ServiceName": o.ServiceName} {
		if v == "" {
			missing = append(missing, name)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("certs: options lack %s (the chart sets them through the %s environment variables)",
			strings.Join(missing, ", "), EnvPrefix+"*")
	}
	if o.CAValidity <= 0 {
		o.CAValidity = DefaultCAValidity
	}
	if o.CertValidity <= 0 {
		o.CertValidity = DefaultCertValidity
	}
	if o.CertValidity > o.CAValidity {
		return fmt.Errorf("certs: CertValidity %s is longer than CAValidity %s", o.CertValidity, o.CAValidity)
	}
	if o.ResyncInterval <= 0 {
		o.ResyncInterval = DefaultResyncInterval
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return nil
}

// DNSNames are the names the serving certificate covers.
func (o Options) DNSNames() []string {
	s, ns := o.ServiceName, o.Namespace
	return []string{s + "." + ns + ".svc", s, s + "." + ns, s + "." + ns + ".svc.cluster.local"}
}

// Start makes sure the certificate is in CertDir and in the webhook configurations
// before it returns, retrying until that succeeds or ctx ends, then keeps it fresh in
// the background until ctx ends. Start the webhook server after it returns: the
// certwatcher needs the files to exist.
func Start(ctx context.Context, client kubernetes.Interface, opts Options) error {
	if err := opts.complete(); err != nil {
		return err
	}
	c := &controller{client: client, opts: opts}
	next, err := c.syncUntilDone(ctx)
	if err != nil {
		return err
	}
	go c.loop(ctx, next)
	return nil
}

// Run is Start in the foreground: it returns only when ctx ends (nil) or the options
// are wrong.
func Run(ctx context.Context, client kubernetes.Interface, opts Options) error {
	if err := opts.complete(); err != nil {
		return err
	}
	c := &controller{client: client, opts: opts}
	c.loop(ctx, opts.Now())
	return nil
}

type controller struct {
	client kubernetes.Interface
	opts   Options
}

// syncUntilDone syncs, retrying with backoff, until one sync succeeds.
func (c *controller) syncUntilDone(ctx context.Context) (time.Time, error) {
	backoff := time.Second
	for {
		next, err := c.sync(ctx)
		if err == nil {
			return next, nil
		}
		klog.FromContext(ctx).Error(err, "Webhook certificate not ready; retrying", "secret", c.opts.Namespace+"/"+c.opts.SecretName, "in", backoff)
		select {
		case <-ctx.Done():
			return time.Time{}, fmt.Errorf("webhook certificate: %w (last error: %v)", ctx.Err(), err)
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, c.opts.ResyncInterval)
	}
}

// loop syncs at next, then at every resync or renewal, until ctx ends.
func (c *controller) loop(ctx context.Context, next time.Time) {
	for {
		wait := min(max(next.Sub(c.opts.Now()), 0), c.opts.ResyncInterval)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		n, err := c.syncUntilDone(ctx)
		if err != nil {
			return
		}
		next = n
	}
}

// sync brings the Secret, CertDir and the caBundles up to date once, and returns when
// the next renewal is due.
func (c *controller) sync(ctx context.Context) (time.Time, error) {
	b, err := c.ensureSecret(ctx)
	if err != nil {
		return time.Time{}, err
	}
	if err := c.writeFiles(b); err != nil {
		return time.Time{}, err
	}
	if err := c.injectCABundle(ctx, b.caPEM); err != nil {
		return time.Time{}, err
	}
	next := renewAt(b.cert)
	if ca := renewAt(b.caCert[0]); ca.Before(next) {
		next = ca
	}
	return next, nil
}

// ensureSecret reads the Secret and renews what is missing, broken or due, writing it
// back. It returns the bundle now stored.
func (c *controller) ensureSecret(ctx context.Context) (*bundle, error) {
	secrets := c.client.CoreV1().Secrets(c.opts.Namespace)
	secret, err := secrets.Get(ctx, c.opts.SecretName, metav1.GetOptions{})
	exists := err == nil
	if apierrors.IsNotFound(err) {
		secret = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{
				Name: c.opts.SecretName, Namespace: c.opts.Namespace,
				Labels: map[string]string{"app.kubernetes.io/managed-by": "gantry-scheduler", "app.kubernetes.io/part-of": "gantry"},
			},
			Type: corev1.SecretTypeTLS,
		}
	} else if err != nil {
		return nil, fmt.Errorf("get Secret %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
	}
	b, changed, err := c.renew(parseBundle(secret.Data))
	if err != nil || !changed {
		return b, err
	}
	secret.Data = b.data()
	if !exists {
		_, err = secrets.Create(ctx, secret, metav1.CreateOptions{})
	} else {
		_, err = secrets.Update(ctx, secret, metav1.UpdateOptions{})
	}
	if err != nil {
		// AlreadyExists or Conflict: another replica wrote first; the retry reads its.
		return nil, fmt.Errorf("write Secret %s/%s: %w", c.opts.Namespace, c.opts.SecretName, err)
	}
	klog.FromContext(ctx).Info("Wrote webhook certificate", "secret", c.opts.Namespace+"/"+c.opts.SecretName,
		"notAfter", b.cert.NotAfter, "caNotAfter", b.caCert[0].NotAfter)
	return b, nil
}

// renew returns b with a new CA and/or serving certificate where needed, and whether
// anything changed.
func (c *controller) renew(b *bundle) (*bundle, bool, error) {
	now := c.opts.Now()
	changed := false
	if b.caKey == nil || !now.Before(renewAt(b.caCert[0])) {
		nb, err := newCA(c.opts.ServiceName+"-ca", now, c.opts.CAValidity, b.caCert)
		if err != nil {
			return nil, false, err
		}
		b, changed = nb, true
	}
	names := c.opts.DNSNames()
	if changed || !b.servingValid(names, now) || !now.Before(renewAt(b.cert)) {
		if err := b.issue(names, now, c.opts.CertValidity); err != nil {
			return nil, false, err
		}
		changed = true
	}
	return b, changed, nil
}

// writeFiles puts tls.crt and tls.key into CertDir when they differ, each through a
// rename so that the server never reads half a file. The key is written first: the
// certwatcher reloads on the certificate's change and refuses a pair that does not
// match, keeping the old one until both are there.
func (c *controller) writeFiles(b *bundle) error {
	if c.opts.CertDir == "" {
		return nil
	}
	if err := os.MkdirAll(c.opts.CertDir, 0o755); err != nil {
		return err
	}
	for _, f := range []struct {
		name string
		data []byte
		mode os.FileMode
	}{{KeyTLSKey, b.keyPEM, 0o600}, {KeyTLSCert, b.certPEM, 0o644}, {KeyCACert, b.caPEM, 0o644}} {
		path := filepath.Join(c.opts.CertDir, f.name)
		if old, err := os.ReadFile(path); err == nil && bytes.Equal(old, f.data) {
			continue
		}
		tmp := path + ".tmp"
		if err := os.WriteFile(tmp, f.data, f.mode); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
		if err := os.Rename(tmp, path); err != nil {
			return fmt.Errorf("write %s: %w", path, err)
		}
	}
	return nil
}

// injectCABundle sets caBundle on every webhook of the named configurations.
func (c *controller) injectCABundle(ctx context.Context, ca []byte) error {
	ar := c.client.AdmissionregistrationV1()
	vwcs, mwcs := ar.ValidatingWebhookConfigurations(), ar.MutatingWebhookConfigurations()
	errs := injectInto(ctx, ca, "ValidatingWebhookConfiguration", c.opts.ValidatingWebhooks,
		func(name string) (*admissionregistrationv1.ValidatingWebhookConfiguration, error) {
			return vwcs.Get(ctx, name, metav1.GetOptions{})
		},
		func(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) []*[]byte {
			out := make([]*[]byte, len(cfg.Webhooks))
			for i := range cfg.Webhooks {
				out[i] = &cfg.Webhooks[i].ClientConfig.CABundle
			}
			return out
		},
		func(cfg *admissionregistrationv1.ValidatingWebhookConfiguration) error {
			_, err := vwcs.Update(ctx, cfg, metav1.UpdateOptions{})
			return err
		})
	errs = append(errs, injectInto(ctx, ca, "MutatingWebhookConfiguration", c.opts.MutatingWebhooks,
		func(name string) (*admissionregistrationv1.MutatingWebhookConfiguration, error) {
			return mwcs.Get(ctx, name, metav1.GetOptions{})
		},
		func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) []*[]byte {
			out := make([]*[]byte, len(cfg.Webhooks))
			for i := range cfg.Webhooks {
				out[i] = &cfg.Webhooks[i].ClientConfig.CABundle
			}
			return out
		},
		func(cfg *admissionregistrationv1.MutatingWebhookConfiguration) error {
			_, err := mwcs.Update(ctx, cfg, metav1.UpdateOptions{})
			return err
		})...)
	return errors.Join(errs...)
}

// injectInto sets ca in every caBundle of the named configurations of one kind,
// updating only those that change; a configuration that does not exist is skipped.
func injectInto[T any](ctx context.Context, ca []byte, kind string, names []string,
	get func(string) (T, error), bundles func(T) []*[]byte, update func(T) error) []error {
	var errs []error
	for _, name := range names {
		cfg, err := get(name)
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			errs = append(errs, fmt.Errorf("get %s %s: %w", kind, name, err))
			continue
		}
		changed := false
		for _, b := range bundles(cfg) {
			if !bytes.Equal(*b, ca) {
				*b, changed = ca, true
			}
		}
		if changed {
			if err := update(cfg); err != nil {
				errs = append(errs, fmt.Errorf("set caBundle of %s %s: %w", kind, name, err))
			}
		}
	}
	return errs
}
