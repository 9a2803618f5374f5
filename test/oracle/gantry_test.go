package oracle

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gantry-dev/gantry/pkg/gang"
	gcache "github.com/gantry-dev/gantry/pkg/kube/cache"
	ginformers "github.com/gantry-dev/gantry/pkg/kube/informers"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/podspec/volumebind"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// gantry is gantry-scheduler's production path over one world, short of the API
// server: objects pass the informers' transforms into pkg/kube/cache, which
// translates them (pkg/podspec) into the core's snapshot; the volume lookup is
// volumebind.Listers over informers, as pkg/kube/informers wires it; a cycle is
// Cache.Prepare with the core's scheduler, then Cache.Commit.
type gantry struct {
	cache *gcache.Cache
	sched *scheduler.Scheduler
	now   time.Time
}

func newGantry(ctx context.Context, w *world) (*gantry, error) {
	var objs []runtime.Object
	for _, o := range w.pvs {
		objs = append(objs, o)
	}
	for _, o := range w.pvcs {
		objs = append(objs, o)
	}
	for _, o := range w.classes {
		objs = append(objs, o)
	}
	for _, o := range w.csiNodes {
		objs = append(objs, o)
	}
	factory := informers.NewSharedInformerFactory(fake.NewClientset(objs...), 0)
	core, storage := factory.Core().V1(), factory.Storage().V1()
	listers := volumebind.Listers{
		Claims: core.PersistentVolumeClaims().Lister(), Volumes: core.PersistentVolumes().Lister(),
		Classes: storage.StorageClasses().Lister(), CSINodes: storage.CSINodes().Lister(),
	}
	factory.Start(ctx.Done())
	factory.WaitForCacheSync(ctx.Done())

	c := gcache.New([]string{ourScheduler}, &gang.StaticLookup{}, "")
	c.SetVolumeLookup(listers)
	for _, ns := range w.namespaces {
		c.UpsertNamespace(ns)
	}
	for _, n := range w.nodes {
		c.UpsertNode(ginformers.SlimNode(n))
	}
	for _, n := range w.csiNodes {
		c.UpsertCSINode(n)
	}
	for _, p := range w.running {
		c.UpsertPod(ginformers.SlimPod(p))
	}
	s, err := scheduler.New("", scheduler.Config{})
	if err != nil {
		return nil, err
	}
	return &gantry{cache: c, sched: s, now: time.Unix(2000, 0)}, nil
}

// outcome is what one cycle decided for an item: the node of each member (in the
// item's order) when it is bound, else the pending reason.
type outcome struct {
	nodes   []string
	pending string
}

// schedule adds the item's pods and runs one cycle; bound members stay in the
// cache as bound (as the informers would show them), a pending item is removed so
// that it does not weigh on the next.
func (g *gantry) schedule(item []*corev1.Pod) (outcome, error) {
	for _, p := range item {
		g.cache.UpsertPod(ginformers.SlimPod(p))
	}
	g.now = g.now.Add(time.Minute)
	prep := g.cache.Prepare(context.Background(), g.now, g.sched.ScheduleSkipping)
	d := g.cache.Commit(prep.Plan, g.now)
	where := map[model.PodID]string{}
	for _, b := range d.Batches {
		for _, r := range b.Reqs {
			where[r.Placement.Pod] = r.Placement.Node
		}
	}
	var out outcome
	for _, p := range item {
		node, ok := where[gang.PodID(p)]
		if !ok {
			break
		}
		out.nodes = append(out.nodes, node)
	}
	switch {
	case len(out.nodes) == len(item):
		for i, p := range item {
			b := p.DeepCopy()
			b.Spec.NodeName, b.Status.Phase = out.nodes[i], corev1.PodRunning
			g.cache.UpsertPod(ginformers.SlimPod(b))
		}
		return out, nil
	case len(where) > 0:
		return out, fmt.Errorf("a gang of %d was bound in part: %v", len(item), where)
	}
	out.nodes = nil
	for _, pd := range d.Pending {
		out.pending += pd.Reason
	}
	if out.pending == "" {
		out.pending = "(no pending reason given)"
	}
	for _, p := range item {
		g.cache.DeletePod(p.Namespace, p.Name)
	}
	return out, nil
}
