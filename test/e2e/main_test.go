// Package e2e runs gantry-scheduler against a real kube-apiserver, etcd, kwok (the
// kubelets of fake GPU nodes), kube-controller-manager and the KubeRay operator.
package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/kube"
	"github.com/gantry-dev/gantry/pkg/sandbox"
	"github.com/gantry-dev/gantry/pkg/webhook"
	"github.com/gantry-dev/gantry/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{Kwok: true, ControllerManager: true, KubeRay: true}, &env, startScheduler))
}

// startScheduler runs the scheduler in this process for the whole package, serving
// gantry-scheduler and kai-scheduler pods as the seed's KubeRay install stamps them,
// with its Queue and pod webhooks registered.
func startScheduler(ctx context.Context, e *testenv.Env) error {
	if err := startWebhooks(ctx, e); err != nil {
		return err
	}
	ready := make(chan struct{})
	errc := make(chan error, 1)
	go func() {
		errc <- kube.Run(ctx, kube.Options{
			RestConfig:     e.Config,
			SchedulerNames: []string{"gantry-scheduler", "kai-scheduler"},
			Ready:          func() { close(ready) },
		})
	}()
	select {
	case <-ready:
		return nil
	case err := <-errc:
		return err
	}
}

func startWebhooks(ctx context.Context, e *testenv.Env) error {
	port, err := testenv.FreePort()
	if err != nil {
		return err
	}
	certDir := filepath.Join(e.Dir, "webhook")
	caPEM, err := e.ServingCert(certDir)
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(e.Config)
	if err != nil {
		return err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if err := webhook.Serve(ctx, addr, certDir, dyn); err != nil {
		return err
	}
	return sandbox.RegisterWebhooks(ctx, e.Client, "https://"+addr, caPEM)
}
