package main

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

type fakeRegistration struct{ ok atomic.Bool }

func (f *fakeRegistration) Registered() error {
	if !f.ok.Load() {
		return errors.New("the kubelet has not registered the plugin yet")
	}
	return nil
}

func get(t *testing.T, c *http.Client, url string) (int, string) {
	t.Helper()
	resp, err := c.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// With the chart's flags (a non-loopback address, --metrics-secure by default),
// /metrics refuses a caller without a token, over HTTPS, while the probes answer
// plain HTTP without one and follow the plugin's registration.
func TestMetricsAuthenticatedProbesFollowRegistration(t *testing.T) {
	o, err := parseFlags([]string{"--metrics-bind-address=0.0.0.0:0", "--health-probe-bind-address=0.0.0.0:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	if !o.metricsSecure {
		t.Fatal("--metrics-secure is off by default")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fail := func(err error) { t.Errorf("server stopped: %v", err) }
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "agent_test_total", Help: "test"}))
	maddr, err := serveMetrics(ctx, o, &rest.Config{Host: "https://127.0.0.1:1"}, reg, fail)
	if err != nil {
		t.Fatal(err)
	}
	insecure := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	mport := maddr.String()[strings.LastIndex(maddr.String(), ":"):]
	if code, body := get(t, insecure, "https://127.0.0.1"+mport+"/metrics"); code != http.StatusUnauthorized {
		t.Errorf("/metrics without a token: %d %q, want 401", code, body)
	}

	health := &fakeRegistration{}
	paddr, err := serveProbes(ctx, o.probeAddr, health, fail)
	if err != nil {
		t.Fatal(err)
	}
	pport := paddr.String()[strings.LastIndex(paddr.String(), ":"):]
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, http.DefaultClient, "http://127.0.0.1"+pport+path); code != http.StatusServiceUnavailable || !strings.Contains(body, "not registered") {
			t.Errorf("%s before registration: %d %q, want 503 saying why", path, code, body)
		}
	}
	health.ok.Store(true)
	for _, path := range []string{"/healthz", "/readyz"} {
		if code, body := get(t, http.DefaultClient, "http://127.0.0.1"+pport+path); code != http.StatusOK {
			t.Errorf("%s once registered: %d %q, want 200", path, code, body)
		}
	}
}

// On loopback (the sandbox, the test harnesses, or behind a proxy) /metrics is
// plain HTTP without a token.
func TestLoopbackMetricsArePlain(t *testing.T) {
	o, err := parseFlags([]string{"--metrics-bind-address=127.0.0.1:0"}, io.Discard)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "agent_test_total", Help: "test"}))
	addr, err := serveMetrics(ctx, o, nil, reg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get(t, http.DefaultClient, "http://"+addr.String()+"/metrics"); code != http.StatusOK || !strings.Contains(body, "agent_test_total") {
		t.Errorf("loopback /metrics: %d %q", code, body)
	}
}
