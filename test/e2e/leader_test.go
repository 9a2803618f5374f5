package e2e

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gantry-dev/gantry/test/invariant"
	"github.com/gantry-dev/gantry/test/testenv"
)

// Two gantry-scheduler replicas with leader election: one holds the Lease and
// schedules; when it dies, the other takes over and schedules what arrives next.
func TestLeaderElectionFailover(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	bin, err := testenv.BinDir()
	if err != nil {
		t.Fatal(err)
	}
	const sched = "ha-scheduler"
	if err := env.CreateNamespace(ctx, "gantry-system"); err != nil {
		t.Fatal(err)
	}
	ns := namespace(t)
	createNodes(t, gpuNode(ns+"-a", 4, "NVIDIA-A10G", 23028))
	invariant.Watch(t, invariant.Config{RestConfig: env.Config, Rules: invariant.Rules{SchedulerNames: []string{sched}, Namespaces: []string{ns}}})
	pids := map[string]int{}
	for _, replica := range []string{"ha-0", "ha-1"} {
		pid, err := env.StartProcess(replica, filepath.Join(bin, "gantry-scheduler"), false,
			"--kubeconfig="+env.Kubeconfig,
			"--scheduler-name="+sched,
			"--leader-elect=true",
			"--leader-elect-name="+sched,
			"--metrics-bind-address=0",
			"--health-probe-bind-address=0",
		)
		if err != nil {
			t.Fatal(err)
		}
		pids[replica] = pid
	}
	defer func() {
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
		}
	}()
	holder := func() string {
		l, err := env.Client.CoordinationV1().Leases("gantry-system").Get(ctx, sched, metav1.GetOptions{})
		if err != nil || l.Spec.HolderIdentity == nil {
			return ""
		}
		return *l.Spec.HolderIdentity
	}
	var first string
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		first = holder()
		return first != "", nil
	}); err != nil {
		t.Fatal("no replica took the Lease")
	}
	createPods(t, newPod(ns, "before", withGPUs(1), withScheduler(sched), onTestNodes(t)))
	waitPods(t, ns, 30*time.Second, "pod bound by the leader", func(ps []corev1.Pod) bool { return bound(ps) == 1 })

	// Kill the leader (its identity ends in its pid) without releasing the Lease.
	var leader string
	for replica, pid := range pids {
		if len(first) > 0 && strings.HasSuffix(first, fmt.Sprintf("_%d", pid)) {
			leader = replica
		}
	}
	if leader == "" {
		t.Fatalf("Lease holder %q is neither replica %v", first, pids)
	}
	_ = syscall.Kill(-pids[leader], syscall.SIGKILL)
	delete(pids, leader)
	createPods(t, newPod(ns, "after", withGPUs(1), withScheduler(sched), onTestNodes(t)))
	waitPods(t, ns, 60*time.Second, "pod bound by the new leader", func(ps []corev1.Pod) bool { return bound(ps) == 2 })
	if h := holder(); h == first || h == "" {
		t.Errorf("Lease holder after failover = %q, want the other replica (was %q)", h, first)
	}
}
