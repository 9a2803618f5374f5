package invariant

import (
	"context"
	"os"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gantry-dev/gantry/test/testenv"
)

var env *testenv.Env

func TestMain(m *testing.M) {
	os.Exit(testenv.RunMain(m, testenv.Options{ControllerManager: true}, &env))
}

// startIn creates namespace ns and starts a checker limited to it.
func startIn(ctx context.Context, t *testing.T, ns string) *Checker {
	t.Helper()
	if err := env.CreateNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Config{RestConfig: env.Config, Rules: Rules{Namespaces: []string{ns}}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// The checker end to end through a real API server: pods written straight onto one
// GPU of a node, and a pod preempted twice, are reported.
func TestWatchReportsFromTheAPI(t *testing.T) {
	if env == nil {
		t.Skip("integration test: needs the control plane (not started with -short)")
	}
	ctx := context.Background()
	const ns = "invariant-watch"
	c := startIn(ctx, t, ns)
	defer c.Stop()

	gpu := corev1.ResourceList{resourceGPU: resource.MustParse("1")}
	n := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "invariant-n"}, Status: corev1.NodeStatus{Capacity: gpu, Allocatable: gpu}}
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, n, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := env.Client.CoreV1().Nodes().UpdateStatus(ctx, n, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	var uid string
	for _, name := range []string{"a", "b"} {
		p := &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Annotations: map[string]string{annotationGPUs: "0"}},
			Spec:       corev1.PodSpec{NodeName: "invariant-n", Containers: []corev1.Container{{Name: "c", Image: "busybox"}}},
		}
		created, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		uid = string(created.UID)
	}
	for _, name := range []string{"e1", "e2"} {
		e := &corev1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Reason: "Preempted", Message: "for a test", Count: 1,
			InvolvedObject: corev1.ObjectReference{Kind: "Pod", Namespace: ns, Name: "b", UID: types.UID(uid)}, Type: corev1.EventTypeNormal}
		if _, err := env.Client.CoreV1().Events(ns).Create(ctx, e, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]bool{"GPUOvercommit node invariant-n gpu 0": false, "DoubleEviction pod " + ns + "/b": false}
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		for _, v := range c.Violations() {
			if _, ok := want[string(v.Kind)+" "+v.Subject]; ok {
				want[string(v.Kind)+" "+v.Subject] = true
			}
		}
		for _, seen := range want {
			if !seen {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("not reported: %v; reported: %v", want, c.Violations())
	}
}
