package soak

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/test/testenv"
)

var (
	rayClusterGVR = gvr.RayCluster
	queueGVR      = gvr.Queue
)

// churn is the soak's work, each kind in its own loop.
type churn struct {
	t   *testing.T
	dyn dynamic.Interface
	mu  sync.Mutex
	rng *rand.Rand
	seq atomic.Int64

	trainCreated, bursts, created, deleted, scaled, edits atomic.Int64
}

func (c *churn) intN(n int) int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.rng.IntN(n)
}

func (c *churn) counts() string {
	return fmt.Sprintf("%d training gangs created, %d inference bursts, %d Ray clusters created, %d deleted, %d scaled, %d queue edits",
		c.trainCreated.Load(), c.bursts.Load(), c.created.Load(), c.deleted.Load(), c.scaled.Load(), c.edits.Load())
}

func every(ctx context.Context, d time.Duration, f func(context.Context)) {
	tick := time.NewTicker(d)
	defer tick.Stop()
	for {
		f(ctx)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

func gangPod(name, group string, size, gpus int, class, queue, pool string) *corev1.Pod {
	q := *resource.NewQuantity(int64(gpus), resource.DecimalSI)
	zero := int64(0)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name,
			Labels:      map[string]string{names.LabelQueue: queue, "soak-group": group},
			Annotations: map[string]string{names.AnnotationPodGroup: group, names.AnnotationMinMember: fmt.Sprint(size)}},
		Spec: corev1.PodSpec{
			SchedulerName: "gantry-scheduler", PriorityClassName: class, NodeSelector: map[string]string{"soak-pool": pool},
			TerminationGracePeriodSeconds: &zero,
			Tolerations:                   []corev1.Toleration{{Key: "kwok.x-k8s.io/node", Operator: corev1.TolerationOpExists}},
			Containers: []corev1.Container{{Name: "main", Image: "busybox", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("1"), corev1.ResourceMemory: resource.MustParse("4Gi"), "nvidia.com/gpu": q},
				Limits:   corev1.ResourceList{"nvidia.com/gpu": q},
			}}},
		},
	}
}

func (c *churn) createGang(ctx context.Context, prefix string, size, gpus int, class, queue string) string {
	group := fmt.Sprintf("%s-%d", prefix, c.seq.Add(1))
	for i := 0; i < size; i++ {
		p := gangPod(fmt.Sprintf("%s-%d", group, i), group, size, gpus, class, queue, "contended")
		if _, err := env.Client.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil && ctx.Err() == nil {
			c.t.Logf("soak: create %s: %v", p.Name, err)
		}
	}
	return group
}

// training keeps trainGangs training gangs on the contended pool, replacing those
// that inference evicted.
func (c *churn) training(ctx context.Context) {
	every(ctx, 2*time.Second, func(ctx context.Context) {
		pods, err := env.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{LabelSelector: names.LabelQueue + "=soak-train"})
		if err != nil {
			return
		}
		groups := map[string]int{}
		for _, p := range pods.Items {
			if p.DeletionTimestamp == nil {
				groups[p.Labels["soak-group"]]++
			}
		}
		// A gang that lost members to preemption is deleted whole, as a job controller
		// would restart it.
		for g, n := range groups {
			if n < trainGangSize {
				_ = env.Client.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "soak-group=" + g})
				delete(groups, g)
			}
		}
		for i := len(groups); i < trainGangs && ctx.Err() == nil; i++ {
			c.createGang(ctx, "train", trainGangSize, 1, "train", "soak-train")
			c.trainCreated.Add(1)
		}
	})
}

// inferenceBursts starts inference gangs that must preempt training, every 30 s, and
// ends them 15 s later.
func (c *churn) inferenceBursts(ctx context.Context) {
	every(ctx, 30*time.Second, func(ctx context.Context) {
		var groups []string
		for i := 0; i < inferenceGangs; i++ {
			groups = append(groups, c.createGang(ctx, "serve", inferencePods, inferenceGPUs, "inference", "default"))
		}
		c.bursts.Add(1)
		select {
		case <-ctx.Done():
		case <-time.After(15 * time.Second):
		}
		for _, g := range groups {
			_ = env.Client.CoreV1().Pods(ns).DeleteCollection(context.Background(), metav1.DeleteOptions{}, metav1.ListOptions{LabelSelector: "soak-group=" + g})
		}
	})
}

// rayClusters keeps about rayClusterCount Ray clusters on the ray pool: each step
// creates one, deletes one, or scales one's workers.
func (c *churn) rayClusters(ctx context.Context) {
	every(ctx, time.Second, func(ctx context.Context) {
		list, err := c.dyn.Resource(rayClusterGVR).Namespace(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return
		}
		n := len(list.Items)
		switch r := c.intN(3); {
		case n < rayClusterCount/2 || (r == 0 && n < rayClusterCount):
			name := fmt.Sprintf("rc-%d", c.seq.Add(1))
			if _, err := testenv.Apply(ctx, env.Config, ns, []byte(rayCluster(name, 1+c.intN(4)))); err == nil {
				c.created.Add(1)
			}
		case r == 1 && n > 0:
			name := list.Items[c.intN(n)].GetName()
			if c.dyn.Resource(rayClusterGVR).Namespace(ns).Delete(ctx, name, metav1.DeleteOptions{}) == nil {
				c.deleted.Add(1)
			}
		case n > 0:
			name := list.Items[c.intN(n)].GetName()
			w := 1 + c.intN(6)
			patch := fmt.Sprintf(`[{"op":"replace","path":"/spec/workerGroupSpecs/0/replicas","value":%d},{"op":"replace","path":"/spec/workerGroupSpecs/0/minReplicas","value":%d},{"op":"replace","path":"/spec/workerGroupSpecs/0/maxReplicas","value":%d}]`, w, w, w)
			if _, err := c.dyn.Resource(rayClusterGVR).Namespace(ns).Patch(ctx, name, types.JSONPatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
				c.scaled.Add(1)
			}
		}
	})
}

// queueEdits moves the training queue's quota and limit every 20 s.
func (c *churn) queueEdits(ctx context.Context) {
	every(ctx, 20*time.Second, func(ctx context.Context) {
		quota, limit := 50+c.intN(100), 3000+c.intN(2000)
		patch := fmt.Sprintf(`{"spec":{"resources":{"gpu":{"quota":%d,"limit":%d,"overQuotaWeight":%d}}}}`, quota, limit, 1+c.intN(3))
		if _, err := c.dyn.Resource(queueGVR).Patch(ctx, "soak-train", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
			c.edits.Add(1)
		}
	})
}

func rayCluster(name string, workers int) string {
	return fmt.Sprintf(`
apiVersion: ray.io/v1
kind: RayCluster
metadata:
  name: %s
  labels: {kai.scheduler/queue: default, priorityClassName: build}
spec:
  headGroupSpec:
    template:
      spec:
        nodeSelector: {soak-pool: ray}
        tolerations: [{key: kwok.x-k8s.io/node, operator: Exists}]
        containers:
        - name: ray-head
          image: rayproject/ray:2.46.0
          resources: {requests: {cpu: "1", memory: 2Gi}, limits: {cpu: "1", memory: 2Gi}}
  workerGroupSpecs:
  - groupName: worker
    replicas: %d
    minReplicas: %d
    maxReplicas: %d
    template:
      spec:
        nodeSelector: {soak-pool: ray}
        tolerations: [{key: kwok.x-k8s.io/node, operator: Exists}]
        containers:
        - name: ray-worker
          image: rayproject/ray:2.46.0
          resources: {requests: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}, limits: {cpu: "1", memory: 1Gi, nvidia.com/gpu: "1"}}
`, name, workers, workers, workers)
}
