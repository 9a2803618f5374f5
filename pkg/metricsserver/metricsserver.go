// Package metricsserver serves a component's /metrics the way Kubernetes'
// own components do: over HTTPS, each request authenticated (TokenReview) and
// authorized (SubjectAccessReview: get on the non-resource URL /metrics) by the
// API server, through controller-runtime's metrics filter. The scheduler and the
// node agent both use it, so that the two endpoints behave the same and one
// ClusterRole (the chart's <release>-metrics-reader) lets Prometheus read both.
//
// A loopback address is always served over plain HTTP without authentication:
// only a process in the same pod (or on the same host, for a host-network pod)
// can reach it. That is the documented proxy option: bind to 127.0.0.1 and put
// kube-rbac-proxy, or any proxy of your own, in front. The sandbox and the test
// harnesses bind to loopback and read the series without a token.
package metricsserver

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/gantry-dev/gantry/pkg/certs"
	"github.com/gantry-dev/gantry/pkg/httpserver"
)

// Options say how /metrics is served.
type Options struct {
	// Addr is host:port; "" or "0" disables the endpoint.
	Addr string
	// Secure serves HTTPS to authenticated and authorized callers only. Ignored
	// (plain HTTP) on a loopback Addr.
	Secure bool
	// CertDir holds tls.crt and tls.key (reloaded when they change); without them
	// a self-signed certificate is made at start, as kube-controller-manager does.
	CertDir string
	// Component names the server in logs ("metrics" when empty).
	Component string
}

// Disabled reports whether o serves nothing.
func (o Options) Disabled() bool { return o.Addr == "" || o.Addr == "0" }

// Serve serves h on /metrics until ctx ends. It returns once the listener is
// open, with its address (nil when disabled). onError gets the error the server
// stops with, other than being closed; nil logs it.
func Serve(ctx context.Context, o Options, restCfg *rest.Config, h http.Handler, onError func(error)) (net.Addr, error) {
	if o.Disabled() {
		return nil, nil
	}
	what := o.Component
	if what == "" {
		what = "metrics"
	}
	srv := httpserver.New(nil)
	if o.Secure && !Loopback(o.Addr) {
		if restCfg == nil {
			return nil, fmt.Errorf("%s: serving authenticated metrics needs a Kubernetes client configuration", what)
		}
		httpClient, err := rest.HTTPClientFor(restCfg)
		if err != nil {
			return nil, err
		}
		filter, err := filters.WithAuthenticationAndAuthorization(restCfg, httpClient)
		if err != nil {
			return nil, fmt.Errorf("%s authentication: %w", what, err)
		}
		if h, err = filter(klog.NewKlogr().WithName(what), h); err != nil {
			return nil, fmt.Errorf("%s authentication: %w", what, err)
		}
		if srv.TLSConfig, err = serverTLS(ctx, o.CertDir); err != nil {
			return nil, err
		}
		klog.InfoS("Serving metrics over HTTPS to authorized clients (get on /metrics)", "server", what, "address", o.Addr)
	} else {
		klog.InfoS("Serving metrics over plain HTTP without authentication", "server", what, "address", o.Addr,
			"why", map[bool]string{true: "loopback address", false: "--metrics-secure=false"}[Loopback(o.Addr)])
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv.Handler = mux
	return Listen(ctx, srv, o.Addr, what, onError)
}

// Listen opens addr and serves srv on it in the background until ctx ends.
func Listen(ctx context.Context, srv *http.Server, addr, what string, onError func(error)) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen %s: %w", what, addr, err)
	}
	if onError == nil {
		onError = func(err error) { klog.ErrorS(err, "Server stopped", "server", what, "address", addr) }
	}
	httpserver.Serve(ctx, srv, ln, onError)
	return ln.Addr(), nil
}

// serverTLS is the certificate in certDir, reloaded when it changes, or a
// self-signed one.
func serverTLS(ctx context.Context, certDir string) (*tls.Config, error) {
	if certDir != "" {
		if _, err := os.Stat(filepath.Join(certDir, "tls.crt")); err == nil {
			return certs.ServingTLSConfig(ctx, certDir)
		}
	}
	host, _ := os.Hostname()
	crt, key, err := certutil.GenerateSelfSignedCertKey(host, nil, []string{"localhost"})
	if err != nil {
		return nil, fmt.Errorf("metrics certificate: %w", err)
	}
	pair, err := tls.X509KeyPair(crt, key)
	if err != nil {
		return nil, fmt.Errorf("metrics certificate: %w", err)
	}
	return &tls.Config{Certificates: []tls.Certificate{pair}, MinVersion: tls.VersionTLS12}, nil
}

// Loopback reports whether addr (host:port) listens on a loopback address only.
func Loopback(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	if host == "localhost" {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
