package cache

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// checkOrder fails t when the cache's order of pending gangs differs from one built
// afresh from every gang of its snapshot.
func checkOrder(t *testing.T, c *Cache, when string) {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	all := *c.snap
	all.PendingGangs = nil // from every gang, not from the index kept beside the order
	if d := c.order.Diff(scheduler.OrderOf(&all)); d != "" {
		t.Fatalf("%s: the cache's order of pending gangs is stale: %s", when, d)
	}
	kept, _ := c.order.Shares(c.snap)
	fresh, _ := (&scheduler.Scheduler{}).Shares(c.snap)
	for q := range c.snap.Queues {
		a, b := kept.Queue(q), fresh.Queue(q)
		for _, r := range []model.ResourceName{model.ResourceGPU, model.ResourceCPU, model.ResourceMemory} {
			x, y := *a.Resources[r], *b.Resources[r]
			if x != y {
				t.Fatalf("%s: queue %s, %s: kept charges %+v, against %+v from every pod", when, q, r, x, y)
			}
		}
	}
}

// The order a cycle takes the pending gangs in is kept by the cache, change by
// change: arrivals, binds assumed and forgotten, evictions and nominations, the
// informer's echoes, deletions, a member that finished and a new priority.
func TestOrderKeptWithTheSnapshot(t *testing.T) {
	c, s := gpuCluster(t, 2, "a", "b")
	c.snap.DefaultQueue = "default"
	c.SetQueues(map[string]*model.Queue{"default": {Name: "default", Resources: map[model.ResourceName]model.QueueResource{
		model.ResourceGPU: {Quota: 2, Limit: model.Unlimited, OverQuotaWeight: 1}}}})
	train := gpuPod("train", 2, 10, "a")
	train.Status.Phase = corev1.PodRunning
	c.UpsertPod(train)
	c.UpsertPod(gpuPod("serve", 2, 200, ""))
	c.UpsertPod(member("job-0", ""))
	c.UpsertPod(member("job-1", ""))
	for i, prio := range []int32{0, 50, 50, 300} {
		c.UpsertPod(gpuPod("single-"+string(rune('a'+i)), 1, prio, ""))
	}
	checkOrder(t, c, "after the arrivals")

	d := cycle(c, s)
	checkOrder(t, c, "after the first cycle")
	if len(d.Batches) == 0 {
		t.Fatal("the first cycle bound nothing; the test needs binds to check")
	}
	bound := d.Batches[0].Reqs[0].Pod
	echo := c.apiPods[bound.ID].DeepCopy()
	echo.Spec.NodeName = bound.Node
	c.UpsertPod(echo)
	checkOrder(t, c, "after a bind's echo")
	if len(d.Batches) > 1 {
		c.Forget(d.Batches[1].Reqs[0].Pod.ID)
		checkOrder(t, c, "after a bind failed")
	}
	c.DeletePod("ns", "single-a")
	checkOrder(t, c, "after a pending pod was deleted")
	c.DeleteNode("b")
	checkOrder(t, c, "after a node was deleted")
	nominated := gpuPod("single-b", 1, 50, "")
	nominated.Status.NominatedNodeName = "b"
	c.UpsertPod(nominated)
	checkOrder(t, c, "after a nomination seen by the informer")
	done := member("job-0", "b")
	done.Status.Phase = corev1.PodSucceeded
	c.UpsertPod(done)
	checkOrder(t, c, "after a member finished")
	c.UpsertPod(gpuPod("single-c", 1, 400, ""))
	checkOrder(t, c, "after a new priority")
	c.UnmarkTerminating("ns/train")
	commitAt(c, s, time.Unix(3000, 0))
	checkOrder(t, c, "after the second cycle")
}

// Cache.Shares, what the status reporter writes to Queue status, is the shares from
// every pod (Scheduler.Shares) though it reads only the kept charges, and lists every
// queue.
func TestSharesFromKeptChargesAreSharesFromEveryPod(t *testing.T) {
	c, s := gpuCluster(t, 4, "a", "b")
	c.snap.DefaultQueue = "default"
	c.SetQueues(map[string]*model.Queue{
		"default": {Name: "default", Resources: map[model.ResourceName]model.QueueResource{
			model.ResourceGPU: {Quota: 2, Limit: model.Unlimited, OverQuotaWeight: 1}}},
		"other": {Name: "other", Resources: map[model.ResourceName]model.QueueResource{
			model.ResourceGPU: {Quota: 6, Limit: model.Unlimited, OverQuotaWeight: 1}}},
	})
	running := gpuPod("running", 2, 10, "a")
	running.Status.Phase = corev1.PodRunning
	c.UpsertPod(running)
	c.UpsertPod(gpuPod("waiting", 3, 10, ""))
	c.UpsertPod(gpuPod("later", 1, 10, ""))
	cycle(c, s)
	shares, queues, err := c.Shares()
	if err != nil {
		t.Fatal(err)
	}
	var fresh *fairshare.Shares
	c.View(func(snap *model.Snapshot) { fresh, err = s.Shares(snap) })
	if err != nil {
		t.Fatal(err)
	}
	if len(queues) != 2 {
		t.Fatalf("queues %v, want default and other", queues)
	}
	for _, q := range queues {
		for _, r := range []model.ResourceName{model.ResourceGPU, model.ResourceCPU, model.ResourceMemory} {
			got, want := *shares.Queue(q).Resources[r], *fresh.Queue(q).Resources[r]
			if got != want {
				t.Errorf("queue %s, %s: %+v from the kept charges, %+v from every pod", q, r, got, want)
			}
		}
	}
	if a := shares.Queue("default").Resources[model.ResourceGPU].Allocated; a != 6 {
		t.Errorf("default queue allocated %v GPUs, want 6 (2 running, 4 bound by the cycle)", a)
	}
}
