package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/test/testenv"
)

// env is the control plane of the install test; nil with -short.
var env *testenv.Env

// update rewrites the chart's copies (CRDs, dashboards) from their sources instead of
// failing when they differ.
var update = flag.Bool("update", false, "copy deploy/crds and deploy/grafana into the chart instead of failing on drift")

func TestMain(m *testing.M) {
	// The chart brings its own CRDs (helm installs crds/); the control plane gets only
	// KubeRay's, so that the examples' Ray objects can be checked by the API server.
	crds := []string{}
	if bin, err := binDir(); err == nil {
		crds = append(crds, filepath.Join(bin, "kuberay-crds"))
	}
	os.Exit(testenv.RunMain(m, testenv.Options{Kwok: true, ControllerManager: true, CRDPaths: crds, AggregatorRouting: true}, &env))
}

const chartRel = "deploy/helm/gantry"

func repoRoot(t testing.TB) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return root
}

func repoPath(t testing.TB, rel string) string {
	return filepath.Join(repoRoot(t), filepath.FromSlash(rel))
}

// binDir is where `make tools` puts the pinned tools: $GANTRY_BIN_DIR, else bin/.
func binDir() (string, error) {
	if d := os.Getenv("GANTRY_BIN_DIR"); d != "" {
		return d, nil
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	return filepath.Join(root, "bin"), nil
}

// tool returns the path of a pinned tool, failing the test (never skipping it) when it
// has not been built.
func tool(t testing.TB, name string) string {
	t.Helper()
	dir, err := binDir()
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, name)
	if _, err := os.Stat(p); err != nil {
		t.Fatalf("%s not found: run `make tools` (it builds %s from hack/tools)", p, name)
	}
	return p
}

// helm runs the pinned helm with its cache, config and data in a temporary directory,
// so that nothing on the machine (repositories, plugins) changes what it does.
func helm(t testing.TB, args ...string) (string, error) {
	t.Helper()
	home := t.TempDir()
	cmd := exec.Command(tool(t, "helm"), args...)
	cmd.Dir = repoRoot(t)
	cmd.Env = append(os.Environ(),
		"HELM_CACHE_HOME="+filepath.Join(home, "cache"),
		"HELM_CONFIG_HOME="+filepath.Join(home, "config"),
		"HELM_DATA_HOME="+filepath.Join(home, "data"),
	)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	err := cmd.Run()
	if err != nil {
		return out.String(), fmt.Errorf("helm %s: %w\n%s", strings.Join(args, " "), err, out.String())
	}
	return out.String(), nil
}

// releaseNamespace is where the tests render and install the chart.
const releaseNamespace = "gantry-system"

// render runs `helm template` on the chart with the given --set values and returns
// the objects, CRDs included.
func render(t testing.TB, set ...string) []*unstructured.Unstructured {
	t.Helper()
	args := []string{"template", "gantry", chartRel, "--namespace", releaseNamespace, "--include-crds"}
	for _, s := range set {
		args = append(args, "--set", s)
	}
	out, err := helm(t, args...)
	if err != nil {
		t.Fatal(err)
	}
	objs, err := decodeObjects([]byte(out))
	if err != nil {
		t.Fatalf("helm template output: %v", err)
	}
	return objs
}

// decodeObjects splits a YAML stream into objects, leaving out empty documents.
func decodeObjects(data []byte) ([]*unstructured.Unstructured, error) {
	docs, err := splitYAML(data)
	if err != nil {
		return nil, err
	}
	var objs []*unstructured.Unstructured
	for _, doc := range docs {
		var m map[string]any
		if err := yaml.Unmarshal(doc, &m); err != nil {
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		objs = append(objs, &unstructured.Unstructured{Object: m})
	}
	return objs, nil
}

func splitYAML(data []byte) ([][]byte, error) {
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(data)))
	var docs [][]byte
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		if len(bytes.TrimSpace(doc)) > 0 {
			docs = append(docs, doc)
		}
	}
}

// find returns the rendered object of that kind and name, or fails the test.
func find(t testing.TB, objs []*unstructured.Unstructured, kind, name string) *unstructured.Unstructured {
	t.Helper()
	for _, o := range objs {
		if o.GetKind() == kind && o.GetName() == name {
			return o
		}
	}
	var have []string
	for _, o := range objs {
		have = append(have, o.GetKind()+"/"+o.GetName())
	}
	t.Fatalf("rendered chart has no %s %s; it has %s", kind, name, strings.Join(have, ", "))
	return nil
}

// into converts a rendered object to a typed one, failing on fields the type lacks.
func into(t testing.TB, o *unstructured.Unstructured, typed any) {
	t.Helper()
	b, err := o.MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	if err := yaml.UnmarshalStrict(b, typed); err != nil {
		t.Fatalf("%s %s: %v", o.GetKind(), o.GetName(), err)
	}
}
