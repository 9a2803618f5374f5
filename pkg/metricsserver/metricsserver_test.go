package metricsserver

import (
	"context"
	"crypto/tls"
	"io"
	"net/http"
	"strings"
	"testing"

	"k8s.io/client-go/rest"
)

func TestLoopback(t *testing.T) {
	for addr, want := range map[string]bool{"127.0.0.1:8080": true, "[::1]:8080": true, "localhost:8080": true,
		":8080": false, "0.0.0.0:8080": false, "10.0.0.1:8080": false, "bad": false} {
		if got := Loopback(addr); got != want {
			t.Errorf("Loopback(%q) = %v, want %v", addr, got, want)
		}
	}
}

// A secure endpoint refuses a caller without a token before any TokenReview (so
// no API server is needed), and does not answer plain HTTP; the loopback one
// answers plain HTTP; "0" serves nothing; secure without a client config is a
// clear error.
func TestServe(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { _, _ = io.WriteString(w, "series 1\n") })
	cfg := &rest.Config{Host: "https://127.0.0.1:1"}

	addr, err := Serve(ctx, Options{Addr: "0.0.0.0:0", Secure: true}, cfg, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	port := addr.String()[strings.LastIndex(addr.String(), ":"):]
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := client.Get("https://127.0.0.1" + port + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("secure /metrics without a token: %s, want 401", resp.Status)
	}
	if resp, err := http.Get("http://127.0.0.1" + port + "/metrics"); err == nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusOK {
			t.Error("the secure endpoint answered plain HTTP")
		}
	}

	addr, err = Serve(ctx, Options{Addr: "127.0.0.1:0", Secure: true}, nil, h, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err = http.Get("http://" + addr.String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "series 1\n" {
		t.Errorf("loopback /metrics: %s %q", resp.Status, body)
	}

	if addr, err := Serve(ctx, Options{Addr: "0"}, nil, h, nil); addr != nil || err != nil {
		t.Errorf("disabled: %v, %v; want nothing served", addr, err)
	}
	if _, err := Serve(ctx, Options{Addr: ":0", Secure: true}, nil, h, nil); err == nil || !strings.Contains(err.Error(), "client configuration") {
		t.Errorf("secure without a client config: %v", err)
	}
}
