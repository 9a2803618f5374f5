package testenv

import (
	"context"
	"flag"
	"fmt"
	"os"
	"testing"
	"time"
)

// RunMain starts one control plane for all tests of a package, runs them, and stops
// it. Use it from TestMain:
//
//	func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{}, &env)) }
//
// With `go test -short` the control plane is not started, *env stays nil and the
// tests are expected to skip themselves.
func RunMain(m *testing.M, opts Options, env **Env) (code int) {
	flag.Parse()
	if testing.Short() {
		return m.Run()
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	e, err := Start(ctx, opts)
	cancel()
	if err != nil {
		fmt.Fprintf(os.Stderr, "testenv: %v\n", err)
		return 1
	}
	*env = e
	defer func() {
		// A panicking test still takes its control plane down; PDEATHSIG covers a
		// hard crash.
		if r := recover(); r != nil {
			_ = e.Stop()
			panic(r)
		}
		if err := e.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stop: %v\n", err)
			if code == 0 {
				code = 1
			}
		}
	}()
	return m.Run()
}
