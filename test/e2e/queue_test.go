package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/testenv"
)

// The seed's queues.yaml applies with only its apiVersion changed, and each kind of
// bad Queue is refused with a message that says what to change.
func TestQueuesValidateOnTheAPIServer(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	applySeed(t, "", "queues.yaml")
	queue := func(name, parent, gpu string) string {
		s := "apiVersion: scheduling.gantry.dev/v1alpha1\nkind: Queue\nmetadata:\n  name: " + name + "\nspec:\n"
		if parent != "" {
			s += "  parentQueue: " + parent + "\n"
		}
		if gpu != "" {
			s += "  resources:\n    gpu: " + gpu + "\n"
		}
		return s
	}
	// A cycle needs two queues that exist first.
	if _, err := testenv.Apply(ctx, env.Config, "", []byte(queue("cyc-a", "", "")+"---\n"+queue("cyc-b", "cyc-a", ""))); err != nil {
		t.Fatalf("apply cyc-a, cyc-b: %v", err)
	}
	tests := []struct {
		name, manifest, want string
	}{
		{"unknown parent", queue("orphan", "no-such-queue", ""), "no-such-queue"},
		{"cycle", queue("cyc-a", "cyc-b", ""), "cycle"},
		{"self parent", queue("selfish", "selfish", ""), "parentQueue"},
		{"negative quota", queue("neg", "", "{quota: -2, limit: -1, overQuotaWeight: 1}"), "quota"},
		{"limit below quota", queue("tight", "", "{quota: 4, limit: 2, overQuotaWeight: 1}"), "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := testenv.Apply(ctx, env.Config, "", []byte(tt.manifest))
			if err == nil {
				t.Fatalf("the API server accepted a Queue with %s", tt.name)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}

// Pods sent to a queue that does not exist, or to a parent queue, wait with a
// condition that names the queue and what to change; they are not put in a default.
func TestPodsInUnknownOrParentQueueWaitWithAReason(t *testing.T) {
	requireEnv(t)
	applySeed(t, "", "queues.yaml")
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 2, "NVIDIA-A10G", 23028))
	createPods(t,
		newPod(ns, "unknown", withGPUs(1), onTestNodes(t), withLabels(names.LabelQueue, "no-such-queue")),
		newPod(ns, "parent", withGPUs(1), onTestNodes(t), withLabels("kai.scheduler/queue", "department-1")),
	)
	got := waitPods(t, ns, 30*time.Second, "both explained", func(ps []corev1.Pod) bool {
		return unschedulableMessage(ps, "unknown") != "" && unschedulableMessage(ps, "parent") != ""
	})
	if msg := unschedulableMessage(got, "unknown"); !strings.Contains(msg, "no-such-queue") {
		t.Errorf("unknown queue message %q does not name the queue", msg)
	}
	if msg := unschedulableMessage(got, "parent"); !strings.Contains(msg, "department-1") || !strings.Contains(msg, "team-a") && !strings.Contains(msg, "leaf") {
		t.Errorf("parent queue message %q does not say to use a leaf queue", msg)
	}
	if bound(got) != 0 {
		t.Errorf("%d pods bound; pods in an unusable queue must wait", bound(got))
	}
}
