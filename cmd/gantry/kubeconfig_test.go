package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
)

const twoContexts = `apiVersion: v1
kind: Config
current-context: a
clusters:
- name: a
  cluster: {server: "https://a.example:6443"}
- name: b
  cluster: {server: "https://b.example:6443"}
users:
- name: u
  user: {token: t}
contexts:
- name: a
  context: {cluster: a, user: u}
- name: b
  context: {cluster: b, user: u, namespace: team-b}
`

// The kubeconfig comes from $KUBECONFIG as kubectl reads it, --context picks another
// context, the context's namespace is the default, and -n wins over it.
func TestKubeconfigLikeKubectl(t *testing.T) {
	path := filepath.Join(t.TempDir(), "config")
	if err := os.WriteFile(path, []byte(twoContexts), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KUBECONFIG", path)
	for _, tc := range []struct {
		args         []string
		host, wantNS string
	}{
		{nil, "https://a.example:6443", "default"},
		{[]string{"--context", "b"}, "https://b.example:6443", "team-b"},
		{[]string{"--context=b", "-n", "other"}, "https://b.example:6443", "other"},
		{[]string{"--namespace", "x"}, "https://a.example:6443", "x"},
	} {
		k := &kubeFlags{}
		fs := pflag.NewFlagSet("test", pflag.ContinueOnError)
		k.addFlags(fs)
		if err := fs.Parse(tc.args); err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		cfg, ns, err := restConfig(k)
		if err != nil {
			t.Fatalf("%v: %v", tc.args, err)
		}
		if cfg.Host != tc.host || ns != tc.wantNS {
			t.Errorf("%v: server %s namespace %s, want %s %s", tc.args, cfg.Host, ns, tc.host, tc.wantNS)
		}
	}
	// --kubeconfig wins over $KUBECONFIG; an unknown context is an error that names it.
	k := &kubeFlags{kubeconfig: path}
	k.overrides.CurrentContext = "nope"
	if _, _, err := restConfig(k); err == nil || !strings.Contains(err.Error(), "nope") {
		t.Errorf("unknown context: %v", err)
	}
}

func TestVersionAndOutputFormats(t *testing.T) {
	var stdout, stderr bytes.Buffer
	root := newRoot(&stdout, &stderr)
	root.SetArgs([]string{"version", "-o", "json"})
	if err := root.Execute(); err != nil {
		t.Fatal(err)
	}
	var v versionInfo
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil || v.Version == "" || v.GoVersion == "" {
		t.Errorf("version -o json: %q %v", stdout.String(), err)
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"version", "-o", "table"}, &stderr); code != 2 || !strings.Contains(stderr.String(), "json or yaml") {
		t.Errorf("-o table: exit %d, %q", code, stderr.String())
	}
	stdout.Reset()
	root = newRoot(&stdout, &stderr)
	root.SetArgs([]string{"completion", "bash"})
	if err := root.Execute(); err != nil || !strings.Contains(stdout.String(), "__start_gantry") {
		t.Errorf("completion bash: %v, %d bytes", err, stdout.Len())
	}
}

// A gantry binary that imports Go's plugin package (kustomize, through cli-runtime) is
// linked with immediate binding and cannot start: go-nvml's symbols are unresolved
// until a driver is loaded.
func TestNoPluginPackage(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").CombinedOutput()
	if err != nil {
		t.Fatalf("go list: %v\n%s", err, out)
	}
	for _, p := range strings.Fields(string(out)) {
		if p == "plugin" {
			t.Fatal("cmd/gantry imports package plugin; the binary would die at start on go-nvml's unresolved symbols")
		}
	}
}
