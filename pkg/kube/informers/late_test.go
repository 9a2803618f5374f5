package informers_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"

	gcache "github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/kube/informers"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/testenv"
)

// env is a control plane with Gantry's CRDs and not KubeRay's.
var env *testenv.Env

func TestMain(m *testing.M) { os.Exit(testenv.RunMain(m, testenv.Options{}, &env)) }

// KubeRay's CRDs installed after the informers started (test/chaos fault
// kuberay-crds-late) are watched without a restart: a RayCluster created then
// reaches the lookup that pkg/gang groups Ray pods with.
func TestCRDInstalledLateIsWatched(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	lookup := informers.NewObjectLookup()
	c := gcache.New([]string{"gantry-scheduler"}, lookup, "")
	inf, err := informers.New(env.Client, dyn, c, lookup)
	if err != nil {
		t.Fatal(err)
	}
	inf.Rediscover = 100 * time.Millisecond
	if err := inf.Start(ctx); err != nil {
		t.Fatal(err)
	}

	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	if err := testenv.InstallCRDs(ctx, env.Config, filepath.Join(bin, "kuberay-crds")); err != nil {
		t.Fatal(err)
	}
	rc := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gvr.RayCluster.GroupVersion().String(), "kind": "RayCluster",
		"metadata": map[string]any{"name": "late", "namespace": "default"},
		"spec": map[string]any{"headGroupSpec": map[string]any{"rayStartParams": map[string]any{},
			"template": map[string]any{"spec": map[string]any{"containers": []any{map[string]any{"name": "ray-head", "image": "rayproject/ray"}}}}}},
	}}
	// The CRD is Established; the API server may still need a moment to serve it.
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := dyn.Resource(gvr.RayCluster).Namespace("default").Create(ctx, rc, metav1.CreateOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatalf("create a RayCluster after installing KubeRay's CRDs: %v", err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
		return lookup.RayCluster("default", "late") != nil, nil
	}); err != nil {
		t.Fatal("the RayCluster created after its CRD was installed never reached the lookup: the informer was not started late")
	}
}
