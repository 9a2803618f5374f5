package kube

import (
	"context"
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// The typed clients ask for protobuf and send it, take JSON where the server has
// nothing else, and leave the config they were given (the dynamic client's) as it was.
func TestTypedClientsSpeakProtobuf(t *testing.T) {
	cfg := &rest.Config{Host: "https://127.0.0.1:6443", QPS: 50, Burst: 100}
	p := Protobuf(cfg)
	if p.ContentType != runtime.ContentTypeProtobuf {
		t.Errorf("ContentType %q, want %q", p.ContentType, runtime.ContentTypeProtobuf)
	}
	if !strings.HasPrefix(p.AcceptContentTypes, runtime.ContentTypeProtobuf+",") || !strings.Contains(p.AcceptContentTypes, runtime.ContentTypeJSON) {
		t.Errorf("AcceptContentTypes %q: want protobuf first, then JSON", p.AcceptContentTypes)
	}
	if cfg.ContentType != "" || cfg.AcceptContentTypes != "" {
		t.Errorf("the config given was changed: %q, %q", cfg.ContentType, cfg.AcceptContentTypes)
	}
	if p.QPS != cfg.QPS || p.Burst != cfg.Burst || p.Host != cfg.Host {
		t.Errorf("the copy lost the rest of the config: %+v", p)
	}
}

// A client made from Uncompressed sends no Accept-Encoding, so the API server sends
// its watch events plain; one from the config as given asks for gzip, which is what
// the API server compresses every watch-list event for.
func TestUncompressedAsksForNoGzip(t *testing.T) {
	got := make(chan string, 1)
	// TLS, as every API server is: client-go gives a config without TLS Go's
	// default transport, which ignores DisableCompression.
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got <- r.Header.Get("Accept-Encoding")
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"kind":"Pod","apiVersion":"v1","metadata":{"name":"p"}}`))
	}))
	defer srv.Close()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	cfg := &rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAData: ca}}
	get := func(c *rest.Config) string {
		t.Helper()
		client, err := kubernetes.NewForConfig(c)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := client.CoreV1().Pods("ns").Get(context.Background(), "p", metav1.GetOptions{}); err != nil {
			t.Fatal(err)
		}
		return <-got
	}
	if enc := get(cfg); !strings.Contains(enc, "gzip") {
		t.Fatalf("the default client sent Accept-Encoding %q; the test expects gzip there", enc)
	}
	if enc := get(Uncompressed(cfg)); enc != "" {
		t.Errorf("Uncompressed client sent Accept-Encoding %q, want none", enc)
	}
	if cfg.DisableCompression {
		t.Error("Uncompressed changed the config it was given")
	}
}
