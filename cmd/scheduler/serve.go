package main

import (
	"context"
	"net"
	"net/http"
	"net/http/pprof"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/httpserver"
	"github.com/gantry-dev/gantry/pkg/kube"
	"github.com/gantry-dev/gantry/pkg/metricsserver"
)

// metricsOptions say how /metrics is served (pkg/metricsserver: HTTPS with the API
// server authenticating and authorizing each caller, plain HTTP on loopback).
type metricsOptions struct {
	addr    string
	secure  bool
	certDir string
}

// serveMetrics serves reg on /metrics until ctx ends. It returns once the listener
// is open, with its address (nil when disabled).
func serveMetrics(ctx context.Context, o metricsOptions, restCfg *rest.Config, reg *prometheus.Registry) (net.Addr, error) {
	return metricsserver.Serve(ctx, metricsserver.Options{Addr: o.addr, Secure: o.secure, CertDir: o.certDir},
		restCfg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), nil)
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
	return metricsserver.Listen(ctx, srv, addr, what, nil)
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
