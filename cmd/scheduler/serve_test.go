package main

import (
	"context"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
)

// /metrics on a non-loopback address refuses a caller without a token (HTTPS,
// authenticated by the API server); on a loopback address it answers in plain HTTP.
// No API server is needed: a request without credentials is refused before any
// TokenReview.
func TestMetricsNeedAuthenticationUnlessOnLoopback(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "gantry_test_total", Help: "test"}))
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}

	addr, err := serveMetrics(ctx, metricsOptions{addr: ":0", secure: true}, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	url := "https://127.0.0.1:" + strconv.Itoa(addr.(*net.TCPAddr).Port) + "/metrics"
	resp, err := client.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("GET /metrics without a token: %s, want 401 Unauthorized", resp.Status)
	}
	if resp, err := http.Get("http://127.0.0.1:" + strconv.Itoa(addr.(*net.TCPAddr).Port) + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the secure metrics endpoint answered plain HTTP")
		}
	}

	addr, err = serveMetrics(ctx, metricsOptions{addr: "127.0.0.1:0", secure: true}, cfg, reg)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "gantry_test_total") {
		t.Errorf("loopback /metrics: %s %q, want 200 with the series", resp.Status, body)
	}
}
