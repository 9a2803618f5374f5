package certs

import (
	"context"
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"sigs.k8s.io/controller-runtime/pkg/certwatcher"
)

// EnvPrefix starts the names of the environment variables the chart sets on the
// scheduler (templates/scheduler.yaml), read by OptionsFromEnv.
const EnvPrefix = "GANTRY_CERT_"

// Environment variables of OptionsFromEnv.
const (
	// EnvMode is "self" (this package keeps the certificate) or "external" (cert-manager
	// or another tool writes the Secret, mounted into the cert dir; the server only
	// reloads it).
	EnvMode               = EnvPrefix + "MODE"
	EnvNamespace          = EnvPrefix + "NAMESPACE"
	EnvSecret             = EnvPrefix + "SECRET"
	EnvService            = EnvPrefix + "SERVICE"
	EnvValidatingWebhooks = EnvPrefix + "VALIDATING_WEBHOOKS" // comma-separated names
	EnvMutatingWebhooks   = EnvPrefix + "MUTATING_WEBHOOKS"   // comma-separated names
)

// Modes of EnvMode.
const (
	ModeSelf     = "self"
	ModeExternal = "external"
)

// OptionsFromEnv reads the Options the chart passes in the environment, with certDir
// (the scheduler's --webhook-cert-dir) as CertDir. selfManaged is false when EnvMode
// is "external" or unset: then nothing is to be run, and the server only watches the
// files in certDir.
func OptionsFromEnv(certDir string) (opts Options, selfManaged bool, err error) {
	switch mode := os.Getenv(EnvMode); mode {
	case "", ModeExternal:
		return Options{CertDir: certDir}, false, nil
	case ModeSelf:
	default:
		return Options{}, false, fmt.Errorf("%s=%q: want %q or %q", EnvMode, mode, ModeSelf, ModeExternal)
	}
	opts = Options{
		Namespace:          os.Getenv(EnvNamespace),
		SecretName:         os.Getenv(EnvSecret),
		ServiceName:        os.Getenv(EnvService),
		ValidatingWebhooks: splitList(os.Getenv(EnvValidatingWebhooks)),
		MutatingWebhooks:   splitList(os.Getenv(EnvMutatingWebhooks)),
		CertDir:            certDir,
	}
	if err := opts.complete(); err != nil {
		return Options{}, false, err
	}
	return opts, true, nil
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// ServingTLSConfig returns a TLS config that serves certDir/tls.crt and certDir/tls.key
// and picks up a new pair when the files change (controller-runtime's certwatcher:
// file events, and a poll every 10 s for the symlink swaps of a mounted Secret). The
// watcher runs until ctx ends. The files must exist: call it after Start.
func ServingTLSConfig(ctx context.Context, certDir string) (*tls.Config, error) {
	w, err := certwatcher.New(filepath.Join(certDir, KeyTLSCert), filepath.Join(certDir, KeyTLSKey))
	if err != nil {
		return nil, fmt.Errorf("webhook certificate in %s: %w", certDir, err)
	}
	go func() { _ = w.Start(ctx) }()
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: w.GetCertificate}, nil
}
