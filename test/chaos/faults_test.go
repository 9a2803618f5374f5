package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiextensionsclient "k8s.io/apiextensions-apiserver/pkg/client/clientset/clientset"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gantry-dev/gantry/test/testenv"
)

// fault is one kind of round: it creates the round's work, injects its fault at a
// random moment, and may say what the settled round must look like (wantBound live
// pods all bound; 0 to only require the invariants).
type fault struct {
	name string
	run  func(ctx context.Context, h *harness, ns string) (wantBound int, err error)
	// kuberay is true for a fault whose work is Ray clusters (the operator must run).
	kuberay bool
	// dra is true for a fault on the DRA node (its node agent must run).
	dra bool
	// settled, if set, checks the round's namespace once it has settled.
	settled func(ctx context.Context, ns string) error
}

var faults = []fault{
	{name: "kill-scheduler-between-binds", run: killBetweenBinds},
	{name: "kill-scheduler-during-evictions", run: killDuringEvictions},
	{name: "leader-handover", run: leaderHandover},
	{name: "restart-apiserver", run: func(ctx context.Context, h *harness, ns string) (int, error) {
		return h.restartUnderWork(ctx, ns, "kube-apiserver")
	}},
	{name: "restart-etcd", run: func(ctx context.Context, h *harness, ns string) (int, error) {
		return h.restartUnderWork(ctx, ns, "etcd")
	}},
	{name: "delete-node-under-gang", run: deleteNodeUnderGang, kuberay: true},
	{name: "restart-kuberay", run: restartKubeRay, kuberay: true},
	{name: "webhook-down", run: webhookDown},
	{name: "kuberay-crds-late", run: lateRayCRDs, kuberay: true},
	{name: "kill-scheduler-between-claim-and-binding", run: killBetweenClaimAndBinding, dra: true, settled: claimsConsistent},
	{name: "kill-node-agent-during-prepare", run: killAgentDuringPrepare, dra: true, settled: claimsConsistent},
}

// jitter is a random pause of up to max.
func jitter(rng *rand.Rand, max time.Duration) time.Duration {
	return time.Duration(rng.Int64N(int64(max) + 1))
}

// killBetweenBinds SIGKILLs the scheduler once a gang is partly bound (or, if binds
// are too quick to catch, at a random moment of the work) and restarts it.
func killBetweenBinds(ctx context.Context, h *harness, ns string) (int, error) {
	if err := createMixedWork(ctx, h.rng, ns); err != nil {
		return 0, err
	}
	n := 0
	ps, _ := waitPods(ctx, ns, 2*time.Second+jitter(h.rng, 3*time.Second), func(ps []corev1.Pod) bool {
		n = 0
		for _, p := range ps {
			if p.Spec.NodeName != "" {
				n++
			}
		}
		return n > 0 && n < len(ps)
	})
	h.logf("SIGKILL the scheduler with %d of %d pods bound", n, len(ps))
	return 0, h.restartScheduler(ctx, jitter(h.rng, 2*time.Second))
}

// killDuringEvictions fills every GPU with training gangs whose pods linger when
// evicted, starts an inference gang that must preempt, SIGKILLs the scheduler once
// the first victim is terminating, restarts it, and lets the victims go. The
// inference gang must end up whole, each victim evicted once.
func killDuringEvictions(ctx context.Context, h *harness, ns string) (int, error) {
	for i := 0; i < nodeCount; i++ {
		if err := createGang(ctx, ns, fmt.Sprintf("train-%d", i), "", "train", gpusPerNode, 1, true); err != nil {
			return 0, err
		}
	}
	if ps, err := waitPods(ctx, ns, 60*time.Second, allBound(nodeCount*gpusPerNode)); err != nil {
		return 0, fmt.Errorf("training gangs not bound: %w%s", err, describe(ps))
	}
	if err := createGang(ctx, ns, "serve", "", "inference", 2, 2, false); err != nil {
		return 0, err
	}
	if _, err := waitPods(ctx, ns, 30*time.Second, func(ps []corev1.Pod) bool {
		for _, p := range ps {
			if p.DeletionTimestamp != nil {
				return true
			}
		}
		return false
	}); err != nil {
		return 0, fmt.Errorf("no victim evicted: %w", err)
	}
	time.Sleep(jitter(h.rng, 500*time.Millisecond))
	h.logf("SIGKILL the scheduler during evictions")
	if err := h.restartScheduler(ctx, jitter(h.rng, time.Second)); err != nil {
		return 0, err
	}
	time.Sleep(jitter(h.rng, 2*time.Second))
	release(ctx, ns)
	return 0, nil
}

// leaderHandover runs two replicas with leader election, SIGKILLs the leader at a
// random moment of the work, and leaves the standby to finish it.
func leaderHandover(ctx context.Context, h *harness, ns string) (int, error) {
	if err := h.stopSchedulers(); err != nil {
		return 0, err
	}
	h.electing = true
	for i := 0; i < 2; i++ {
		s, err := StartScheduler(ctx, env, schedulerBin, true, nil)
		if err != nil {
			return 0, err
		}
		h.replicas = append(h.replicas, s)
	}
	var leader *Scheduler
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		leader = leaderOf(ctx, env, h.replicas)
		return leader != nil, nil
	}); err != nil {
		return 0, errNoLeader
	}
	first, second := 2+h.rng.IntN(3), 2+h.rng.IntN(3)
	if err := createGang(ctx, ns, "before", "", "train", first, 1, false); err != nil {
		return 0, err
	}
	time.Sleep(jitter(h.rng, 3*time.Second))
	h.logf("SIGKILL the leader %s", leader.Name)
	if err := kill(leader.PID); err != nil {
		return 0, err
	}
	for i, r := range h.replicas {
		if r == leader {
			h.replicas = append(h.replicas[:i], h.replicas[i+1:]...)
			break
		}
	}
	// Work that only the standby, once it holds the Lease, can schedule.
	if err := createGang(ctx, ns, "after", "", "train", second, 1, false); err != nil {
		return 0, err
	}
	return first + second, nil
}

// restartUnderWork restarts a control-plane component at a random moment of the work.
func (h *harness) restartUnderWork(ctx context.Context, ns, component string) (int, error) {
	if err := createMixedWork(ctx, h.rng, ns); err != nil {
		return 0, err
	}
	time.Sleep(jitter(h.rng, 2*time.Second))
	if err := restart(env, component, jitter(h.rng, 2*time.Second)); err != nil {
		return 0, err
	}
	return 0, waitAPIServer(ctx, env, 90*time.Second)
}

// deleteNodeUnderGang deletes a node under a running Ray cluster, removes its pods as
// the pod garbage collector would, and gives the capacity back by creating the node
// again: the cluster must be whole again.
func deleteNodeUnderGang(ctx context.Context, h *harness, ns string) (int, error) {
	workers := 3 + h.rng.IntN(3)
	if err := createRayCluster(ctx, ns, "rc", workers, "train"); err != nil {
		return 0, err
	}
	ps, err := waitPods(ctx, ns, 90*time.Second, allBound(workers+1))
	if err != nil {
		return 0, fmt.Errorf("ray cluster not bound: %w%s", err, describe(ps))
	}
	victim := ps[h.rng.IntN(len(ps))].Spec.NodeName
	if err := env.Client.CoreV1().Nodes().Delete(ctx, victim, metav1.DeleteOptions{}); err != nil {
		return 0, err
	}
	time.Sleep(jitter(h.rng, 3*time.Second))
	zero := int64(0)
	for _, p := range ps {
		if p.Spec.NodeName == victim {
			_ = env.Client.CoreV1().Pods(ns).Delete(ctx, p.Name, metav1.DeleteOptions{GracePeriodSeconds: &zero})
		}
	}
	time.Sleep(jitter(h.rng, 3*time.Second))
	if _, err := env.Client.CoreV1().Nodes().Create(ctx, gpuNode(victim), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return 0, err
	}
	return workers + 1, nil
}

// restartKubeRay restarts the KubeRay operator while it creates a Ray cluster.
func restartKubeRay(ctx context.Context, h *harness, ns string) (int, error) {
	workers := 2 + h.rng.IntN(3)
	if err := createRayCluster(ctx, ns, "rc", workers, "train"); err != nil {
		return 0, err
	}
	time.Sleep(jitter(h.rng, 3*time.Second))
	if err := restart(env, "kuberay-operator", jitter(h.rng, 2*time.Second)); err != nil {
		return 0, err
	}
	return workers + 1, nil
}

// webhookDown takes the webhook server down: pods must still be admitted (the pod
// webhook fails open), Queue edits refused (the Queue webhook fails closed), and
// both work again once it is back.
func webhookDown(ctx context.Context, h *harness, ns string) (int, error) {
	c, pid, err := capture(env, webhookName)
	if err != nil {
		return 0, err
	}
	if err := kill(pid); err != nil {
		return 0, err
	}
	if err := createMixedWork(ctx, h.rng, ns); err != nil {
		return 0, fmt.Errorf("pods refused while the webhook was down (it must fail open): %w", err)
	}
	q := []byte("apiVersion: scheduling.gantry.dev/v1alpha1\nkind: Queue\nmetadata: {name: chaos-while-down}\nspec: {parentQueue: default}\n")
	if _, err := testenv.Apply(ctx, env.Config, "", q); err == nil {
		return 0, fmt.Errorf("a Queue was admitted while its validating webhook was down (it must fail closed)")
	}
	time.Sleep(jitter(h.rng, 2*time.Second))
	if _, err := env.StartProcess(c.name, c.args[0], false, c.args[1:]...); err != nil {
		return 0, err
	}
	return 0, nil
}

// lateRayCRDs removes KubeRay (operator and CRDs), restarts the scheduler without
// them, installs them again and creates a Ray cluster: the running scheduler must
// become ready without them and schedule the cluster without another restart.
func lateRayCRDs(ctx context.Context, h *harness, ns string) (int, error) {
	op, pid, err := capture(env, "kuberay-operator")
	if err != nil {
		return 0, err
	}
	if err := kill(pid); err != nil {
		return 0, err
	}
	// Whatever happens, KubeRay comes back for the rounds after this one: restore
	// is tried again (by the deferred call) until it has worked once.
	restored := false
	restore := func() error {
		if restored {
			return nil
		}
		bin, err := testenv.BinDir()
		if err != nil {
			return err
		}
		// Not the round's context: a round that ran out of time must still leave
		// KubeRay running, or every later Ray round fails on a dead operator.
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		// InstallCRDs waits 30 s for each CRD to be established; under load that can
		// run out, so it is tried again (an existing CRD is updated in place).
		var installErr error
		if err := wait.PollUntilContextCancel(ctx, time.Second, true, func(ctx context.Context) (bool, error) {
			installErr = testenv.InstallCRDs(ctx, env.Config, filepath.Join(bin, "kuberay-crds"))
			return installErr == nil, nil
		}); err != nil {
			return fmt.Errorf("KubeRay's CRDs not back: %w (last: %v)", err, installErr)
		}
		if _, err = env.StartProcess(op.name, op.args[0], false, op.args[1:]...); err == nil {
			restored = true
		}
		return err
	}
	defer func() { _ = restore() }()
	// Each step's time is logged: these rounds take 2-3 minutes on a loaded machine,
	// and once the scheduler was not ready in 90 s (seed 1803, round 12).
	t0 := time.Now()
	if err := removeRayCRDs(ctx); err != nil {
		return 0, err
	}
	h.logf("KubeRay's CRDs gone after %s", time.Since(t0).Round(time.Millisecond))
	if err := h.stopSchedulers(); err != nil {
		return 0, err
	}
	started := make(chan error, 1)
	go func() {
		s, err := StartScheduler(ctx, env, schedulerBin, false, nil)
		if err == nil {
			h.replicas = []*Scheduler{s}
		}
		started <- err
	}()
	time.Sleep(jitter(h.rng, 3*time.Second))
	if err := restore(); err != nil {
		return 0, err
	}
	h.logf("CRDs back and KubeRay restarted at %s", time.Since(t0).Round(time.Millisecond))
	if err := <-started; err != nil {
		return 0, fmt.Errorf("scheduler started while KubeRay's CRDs were missing: %w", err)
	}
	h.logf("scheduler ready at %s", time.Since(t0).Round(time.Millisecond))
	workers := 1 + h.rng.IntN(3)
	if err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return createRayCluster(ctx, ns, "rc", workers, "train") == nil, nil
	}); err != nil {
		return 0, fmt.Errorf("RayCluster not created after the CRDs came back: %w", err)
	}
	return workers + 1, nil
}

func removeRayCRDs(ctx context.Context) error {
	ext, err := apiextensionsclient.NewForConfig(env.Config)
	if err != nil {
		return err
	}
	crds := []string{"rayclusters.ray.io", "rayjobs.ray.io", "rayservices.ray.io"}
	for _, name := range crds {
		if err := ext.ApiextensionsV1().CustomResourceDefinitions().Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return err
		}
	}
	// All of them gone, not only the first: a CRD still terminating when it is
	// installed again is updated in place, never established, and KubeRay does not
	// come back (seed 1801, round 23: "CRD rayjobs.ray.io not established").
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, name := range crds {
			if _, err := ext.ApiextensionsV1().CustomResourceDefinitions().Get(ctx, name, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
				return false, nil
			}
		}
		return true, nil
	})
}
