package kube

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
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
