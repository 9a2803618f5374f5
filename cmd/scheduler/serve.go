package main

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"path/filepath"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	certutil "k8s.io/client-go/util/cert"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/metrics/filters"

	"github.com/gantry-dev/gantry/pkg/certs"
	"github.com/gantry-dev/gantry/pkg/httpserver"
	"github.com/gantry-dev/gantry/pkg/kube"
)

// metricsOptions say how /metrics is served.
type metricsOptions struct {
	addr string
	// secure serves HTTPS, each request authenticated (TokenReview) and authorized
	// (SubjectAccessReview: get on the non-resource URL /metrics) by the API server,
	// through controller-runtime's metrics filter. A loopback address is served over
	// plain HTTP either way: only a process in the pod (a proxy such as
	// kube-rbac-proxy) can reach it.
	secure bool
	// certDir holds tls.crt and tls.key (reloaded when they change); without them a
	// self-signed certificate is made at start, as kube-controller-manager does.
	certDir string
}

// serveMetrics serves reg on /metrics until ctx ends. It returns once the listener
// is open, with its address (nil when disabled).
func serveMetrics(ctx context.Context, o metricsOptions, restCfg *rest.Config, reg *prometheus.Registry) (net.Addr, error) {
	if o.addr == "" || o.addr == "0" {
		return nil, nil
	}
	var h http.Handler = promhttp.HandlerFor(reg, promhttp.HandlerOpts{})
	srv := httpserver.New(nil)
	if o.secure && !loopback(o.addr) {
		httpClient, err := rest.HTTPClientFor(restCfg)
		if err != nil {
			return nil, err
		}
		filter, err := filters.WithAuthenticationAndAuthorization(restCfg, httpClient)
		if err != nil {
			return nil, fmt.Errorf("metrics authentication: %w", err)
		}
		if h, err = filter(klog.NewKlogr().WithName("metrics"), h); err != nil {
			return nil, fmt.Errorf("metrics authentication: %w", err)
		}
		if srv.TLSConfig, err = metricsTLS(ctx, o.certDir); err != nil {
			return nil, err
		}
		klog.InfoS("Serving metrics over HTTPS to authorized clients (get on /metrics)", "address", o.addr)
	} else {
		klog.InfoS("Serving metrics over plain HTTP without authentication", "address", o.addr,
			"why", map[bool]string{true: "loopback address", false: "--metrics-secure=false"}[loopback(o.addr)])
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv.Handler = mux
	return listenAndServe(ctx, srv, o.addr, "metrics")
}

// metricsTLS is the certificate in certDir, reloaded when it changes, or a
// self-signed one.
func metricsTLS(ctx context.Context, certDir string) (*tls.Config, error) {
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

// serveProbes serves /healthz (the process answers: readiness), /livez (the
// scheduling loop has not stalled: liveness) and /readyz (this replica leads and
// its informers have synced).
func serveProbes(ctx context.Context, addr string, ready *atomic.Bool, live *kube.Liveness) error {
	if addr == "" || addr == "0" {
		return nil
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok")) })
	mux.HandleFunc("/livez", func(w http.ResponseWriter, _ *http.Request) {
		if err := live.Check(time.Now()); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, _ *http.Request) {
		if !ready.Load() {
			http.Error(w, "leading, informers not synced yet", http.StatusServiceUnavailable)
			return
		}
		_, _ = w.Write([]byte("ok"))
	})
	_, err := listenAndServe(ctx, httpserver.New(mux), addr, "probes")
	return err
}

func listenAndServe(ctx context.Context, srv *http.Server, addr, what string) (net.Addr, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s: listen %s: %w", what, addr, err)
	}
	httpserver.Serve(ctx, srv, ln, func(err error) { klog.ErrorS(err, "Server stopped", "server", what, "address", addr) })
	return ln.Addr(), nil
}

// loopback reports whether addr (host:port) listens on a loopback address only.
func loopback(addr string) bool {
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

// serveProfiles serves net/http/pprof on its own mux (never on the metrics address)
// and samples blocking and lock contention, which cost nothing while off.
func serveProfiles(addr string) error {
	if addr == "" {
		return nil
	}
	// One blocking event per 100 µs blocked, one contended lock in 10: enough for a
	// profile of a drain, little enough not to change it.
	runtime.SetBlockProfileRate(100_000)
	runtime.SetMutexProfileFraction(10)
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := httpserver.New(mux)
	srv.WriteTimeout = 10 * time.Minute // a CPU profile or trace streams for its ?seconds=
	klog.InfoS("Serving pprof profiles", "address", addr)
	_, err := listenAndServe(context.Background(), srv, addr, "pprof")
	return err
}
