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
//
// Each setup function runs after the control plane is up, with a context that ends
// before the control plane stops (for components a package runs in-process, such
// as the scheduler).
func RunMain(m *testing.M, opts Options, env **Env, setup ...func(context.Context, *Env) error) (code int) {
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
	runCtx, stopRun := context.WithCancel(context.Background())
	defer func() {
		stopRun()
		// Give in-process components a moment to notice before the API server goes.
		time.Sleep(100 * time.Millisecond)
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
	for _, f := range setup {
		if err := f(runCtx, e); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: setup: %v\n", err)
			return 1
		}
	}
	return m.Run()
}
