package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/pkg/kube"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/testenv"
)

// The chart's defaultQueue.create=false (scheduler config createDefaultQueue:
// false): the scheduler does not create the queue its config names; a pod with no
// queue label waits with a reason naming that queue instead of running outside
// every quota; once the admin creates the queue, the pod is scheduled and charged
// to it.
func TestDefaultQueueLeftToTheAdmin(t *testing.T) {
	requireEnv(t)
	const scheduler, queue = "gantry-gitops", "gitops-default"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	errc := make(chan error, 1)
	ready := make(chan struct{})
	go func() {
		errc <- kube.Run(ctx, kube.Options{
			RestConfig: env.Config, SchedulerNames: []string{scheduler},
			Config: kube.Config{DefaultQueue: queue, CreateDefaultQueue: ptr.To(false)},
			Ready:  func() { close(ready) },
		})
	}()
	select {
	case <-ready:
	case err := <-errc:
		t.Fatalf("second scheduler: %v", err)
	}
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 2, "NVIDIA-A10G", 23028))
	createPods(t, newPod(ns, "unlabelled", withGPUs(1), onTestNodes(t), withScheduler(scheduler)))
	got := waitPods(t, ns, 60*time.Second, "the unlabelled pod explained", func(ps []corev1.Pod) bool {
		return unschedulableMessage(ps, "unlabelled") != ""
	})
	if msg := unschedulableMessage(got, "unlabelled"); !strings.Contains(msg, queue) || !strings.Contains(msg, "does not exist") {
		t.Errorf("message %q does not say that queue %s does not exist", msg, queue)
	}
	if bound(got) != 0 {
		t.Error("a pod with no queue ran while the default queue does not exist")
	}
	dyn, err := dynamic.NewForConfig(env.Config)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := dyn.Resource(gvr.Queue).Get(ctx, queue, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Fatalf("Queue %s: %v; the scheduler must not create it with createDefaultQueue: false", queue, err)
	}

	manifest := "apiVersion: scheduling.gantry.dev/v1alpha1\nkind: Queue\nmetadata:\n  name: " + queue +
		"\nspec:\n  resources:\n    gpu: {quota: -1, limit: -1, overQuotaWeight: 1}\n"
	if _, err := testenv.Apply(ctx, env.Config, "", []byte(manifest)); err != nil {
		t.Fatalf("create Queue %s: %v", queue, err)
	}
	t.Cleanup(func() { _ = dyn.Resource(gvr.Queue).Delete(context.Background(), queue, metav1.DeleteOptions{}) })
	waitPods(t, ns, 60*time.Second, "the unlabelled pod bound once its queue exists", func(ps []corev1.Pod) bool {
		return bound(ps) == 1
	})
	cancel()
	if err := <-errc; err != nil && ctx.Err() == nil {
		t.Errorf("second scheduler: %v", err)
	}
}
