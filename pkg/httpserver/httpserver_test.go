package httpserver

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestEveryServerHasTimeouts scans the product's Go files (everything but tests,
// test/ and hack/) for an http.Server literal outside this package, and for net/http's
// package-level servers (ListenAndServe, ListenAndServeTLS, Serve, ServeTLS), which
// have no timeouts.
func TestEveryServerHasTimeouts(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root not found from the test's directory: %v", err)
	}
	self, _ := filepath.Abs(".")
	var bad []string
	fset := token.NewFileSet()
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			if path == self || rel == "test" || rel == "hack" || d.Name() == "testdata" || d.Name() == "vendor" ||
				(path != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_"))) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		httpName := ""
		for _, imp := range f.Imports {
			if imp.Path.Value == `"net/http"` {
				httpName = "http"
				if imp.Name != nil {
					httpName = imp.Name.Name
				}
			}
		}
		if httpName == "" {
			return nil
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.CompositeLit:
				if isSel(n.Type, httpName, "Server") {
					bad = append(bad, fset.Position(n.Pos()).String()+": http.Server{...}: use httpserver.New")
				}
			case *ast.CallExpr:
				for _, fn := range []string{"ListenAndServe", "ListenAndServeTLS", "Serve", "ServeTLS"} {
					if isSel(n.Fun, httpName, fn) {
						bad = append(bad, fset.Position(n.Pos()).String()+": http."+fn+" has no timeouts: use httpserver.New")
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(bad) > 0 {
		t.Errorf("servers without Gantry's timeouts:\n%s", strings.Join(bad, "\n"))
	}
}

func isSel(e ast.Expr, pkg, name string) bool {
	if u, ok := e.(*ast.UnaryExpr); ok {
		e = u.X
	}
	s, ok := e.(*ast.SelectorExpr)
	if !ok || s.Sel.Name != name {
		return false
	}
	id, ok := s.X.(*ast.Ident)
	return ok && id.Name == pkg
}

func TestNewSetsEveryTimeout(t *testing.T) {
	s := New(nil)
	if s.ReadHeaderTimeout == 0 || s.ReadTimeout == 0 || s.WriteTimeout == 0 || s.IdleTimeout == 0 || s.MaxHeaderBytes == 0 {
		t.Errorf("server without a limit: %+v", s)
	}
}
