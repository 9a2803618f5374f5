package names_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// gantryKey matches a string that is a label or annotation key of Gantry's own domain
// ("gantry.dev/queue"), or starts with one ("gantry.dev/queue=team-a", a selector).
// Prose that mentions a name in passing (an error message's advice) is not a name
// and is not matched; neither is "scheduling.gantry.dev/v1alpha1", an apiVersion.
var gantryKey = regexp.MustCompile(`^gantry\.dev/`)

// TestNoRetypedNames scans every Go file of the module, tests included, and fails on
// a string literal that is a gantry.dev/ key outside pkg/names. A retyped name is
// one that can drift from the one the scheduler reads.
func TestNoRetypedNames(t *testing.T) {
	root := moduleRoot(t)
	self := filepath.Join(root, "pkg", "names")
	fset := token.NewFileSet()
	var bad []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path == self || name == "vendor" || name == "testdata" || (path != root && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_"))) {
				return filepath.SkipDir
			}
			if path != root {
				if _, err := os.Stat(filepath.Join(path, "go.mod")); err == nil {
					return filepath.SkipDir // another module (hack/tools/...)
				}
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			lit, ok := n.(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			v, err := strconv.Unquote(lit.Value)
			if err == nil && gantryKey.MatchString(v) {
				rel, _ := filepath.Rel(root, path)
				bad = append(bad, rel+":"+strconv.Itoa(fset.Position(lit.Pos()).Line)+": "+lit.Value)
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("%d string literals spell a gantry.dev/ name; use the constant in pkg/names (add one there if it is new; a name only a test uses belongs to another domain, such as example.com/):\n%s",
			len(bad), strings.Join(bad, "\n"))
	}
}

func TestGantryKeyPattern(t *testing.T) {
	for v, want := range map[string]bool{
		"gantry.dev/queue":               true,
		"gantry.dev/queue=team-a":        true,
		"set gantry.dev/gpus on the pod": false,
		"scheduling.gantry.dev/v1alpha1": false,
		"gpu.gantry.dev/unhealthy":       false,
		"github.com/gantry-dev/gantry":   false,
	} {
		if got := gantryKey.MatchString(v); got != want {
			t.Errorf("%q: matched %v, want %v", v, got, want)
		}
	}
}

func moduleRoot(t *testing.T) string {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("go.mod not found above the test's directory")
		}
		dir = parent
	}
}

// TestImportRules holds the rules of doc.go: pkg/names imports nothing, so the core
// may import it; the core imports neither pkg/names/gvr nor a client.
func TestImportRules(t *testing.T) {
	root := moduleRoot(t)
	for path, imp := range directImports(t, filepath.Join(root, "pkg", "names")) {
		t.Errorf("%s imports %s: pkg/names holds plain constants and imports nothing", path, imp)
	}
	forbidden := []string{"github.com/gantry-dev/gantry/pkg/names/gvr", "k8s.io/client-go", "github.com/gantry-dev/gantry/pkg/kube"}
	for _, core := range []string{"model", "placement", "fairshare", "preempt", "scheduler", "gang"} {
		for path, imp := range directImports(t, filepath.Join(root, "pkg", core)) {
			for _, f := range forbidden {
				if imp == f || strings.HasPrefix(imp, f+"/") {
					t.Errorf("%s imports %s: the core is Kubernetes-agnostic (DESIGN.md)", path, imp)
				}
			}
		}
	}
}

// directImports returns every import of the non-test Go files of dir, keyed by
// "file (import)".
func directImports(t *testing.T, dir string) map[string]string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	fset := token.NewFileSet()
	for _, e := range entries {
		if e.IsDir() || !strings.HasSuffix(e.Name(), ".go") || strings.HasSuffix(e.Name(), "_test.go") {
			continue
		}
		path := filepath.Join(dir, e.Name())
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			t.Fatal(err)
		}
		for _, imp := range f.Imports {
			v, _ := strconv.Unquote(imp.Path.Value)
			out[path+" ("+v+")"] = v
		}
	}
	return out
}
