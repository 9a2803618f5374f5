package main

import (
	"context"
	"fmt"
	"net"
	"net/http"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/gantry-dev/gantry/pkg/httpserver"
	"github.com/gantry-dev/gantry/pkg/metricsserver"
)

// registration is the kubelet's verdict on the DRA plugin (agent.Agent).
type registration interface{ Registered() error }

// serveMetrics serves reg on /metrics (pkg/metricsserver: HTTPS, each caller
// authenticated and authorized by the API server, unless the address is
// loopback or --metrics-secure=false). onError gets a server that stops.
func serveMetrics(ctx context.Context, o *options, restCfg *rest.Config, reg prometheus.Gatherer, onError func(error)) (net.Addr, error) {
	// certwatcher (--metrics-cert-dir) logs through controller-runtime's logger.
	ctrllog.SetLogger(klog.NewKlogr())
	return metricsserver.Serve(ctx,
		metricsserver.Options{Addr: o.metricsAddr, Secure: o.metricsSecure, CertDir: o.metricsCertDir, Component: "node-agent metrics"},
		restCfg, promhttp.HandlerFor(reg, promhttp.HandlerOpts{}), onError)
}

// serveProbes serves /healthz (liveness) and /readyz (readiness) in plain HTTP
// for the kubelet: both answer 200 only while the kubelet has accepted the DRA
// plugin's registration. Apart from /metrics, so that probes need no token.
func serveProbes(ctx context.Context, addr string, reg registration, onError func(error)) (net.Addr, error) {
	if addr == "" || addr == "0" {
		return nil, nil
	}
	registered := func(w http.ResponseWriter, _ *http.Request) {
		if err := reg.Registered(); err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		fmt.Fprintln(w, "ok")
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/healthz", registered)
	mux.HandleFunc("/readyz", registered)
	klog.InfoS("Serving probes", "address", addr)
	return metricsserver.Listen(ctx, httpserver.New(mux), addr, "node-agent probes", onError)
}
