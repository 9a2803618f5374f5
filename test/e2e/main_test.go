// Package e2e runs gantry-scheduler against a real kube-apiserver, etcd, kwok (the
// kubelets of fake GPU nodes), kube-controller-manager and the KubeRay operator.
package e2e

import (
	"context"
	"os"
	"testing"

	"github.com/gantry-dev/gantry/pkg/kube"
	"github.com/gantry-dev/gantry/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{Kwok: true, ControllerManager: true, KubeRay: true}, &env, startScheduler))
}

// startScheduler runs the scheduler in this process for the whole package, serving
// gantry-scheduler and kai-scheduler pods as the seed's KubeRay install stamps them.
func startScheduler(ctx context.Context, e *testenv.Env) error {
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
