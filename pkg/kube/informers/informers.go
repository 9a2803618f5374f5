// Package informers feeds the cache from the API server: one informer per kind, each
// through the one generic handler helper on, with pods and nodes slimmed to what the
// scheduler reads, and an ObjectLookup of the gang owners (RayCluster, RayJob,
// RayService, PodGroup) for pkg/gang. A custom resource not served at start (a CRD
// installed after the scheduler) is watched once discovery shows it (late.go).
//
// It translates nothing itself: every event goes to one cache method. It must not
// import the dispatcher or the reporters, and writes nothing to the API.
package informers

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedv1 "k8s.io/api/scheduling/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/apis/scheduling/convert"
	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	gcache "github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/pkg/podspec/volumebind"
)

// Informers feeds a cache.Cache from the API server.
type Informers struct {
	core    informers.SharedInformerFactory
	dynamic dynamicinformer.DynamicSharedInformerFactory
	client  kubernetes.Interface
	synced  []cache.InformerSynced
	Lookup  *ObjectLookup
	// Rediscover is how often discovery is asked again for the custom resources not
	// served at start (default DefaultRediscover); set it before Start.
	Rediscover time.Duration
	// late are the custom resources not served at start, watched once they are.
	late []lateWatch
	// waiting counts the pods of this scheduler without a node, for liveness.
	waiting *waiting
}

// DefaultRediscover is how often the API server is asked whether a custom resource
// that was not served (KubeRay's CRDs installed after the scheduler) is served now.
const DefaultRediscover = 10 * time.Second

// New registers every informer the scheduler needs. Custom resources whose API is
// not served at start (KubeRay not installed yet, say) are skipped with a log line,
// and watched once discovery shows them (late.go): no restart needed.
func New(client kubernetes.Interface, dyn dynamic.Interface, c *gcache.Cache, lookup *ObjectLookup) (*Informers, error) {
	inf := &Informers{
		core:       informers.NewSharedInformerFactory(client, 0),
		dynamic:    dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0),
		client:     client,
		Lookup:     lookup,
		Rediscover: DefaultRediscover,
		waiting:    &waiting{serves: c.Serves, pods: map[types.UID]struct{}{}},
	}
	pods := inf.core.Core().V1().Pods().Informer()
	if err := pods.SetTransform(slimPodOnce); err != nil {
		return nil, err
	}
	nodes := inf.core.Core().V1().Nodes().Informer()
	if err := nodes.SetTransform(slimNode); err != nil {
		return nil, err
	}
	// Wait for the handlers to have seen the first list, not only the informers:
	// a first cycle on a half-filled cache would report gangs as incomplete.
	add := func(reg cache.ResourceEventHandlerRegistration, err error) error {
		if err == nil {
			inf.synced = append(inf.synced, reg.HasSynced)
		}
		return err
	}
	errs := []error{
		// One handler for both, the waiting count first: each handler of an informer
		// is two goroutines woken for every event, and at 100 pods/s the second one
		// was four wake-ups a pod for a counter (issue 21). A cache stuck under its
		// lock still has the first pod that waits on it counted.
		add(on(pods,
			func(p *corev1.Pod) { inf.waiting.upsert(p); c.UpsertPod(p) },
			func(p *corev1.Pod) { inf.waiting.remove(p); c.DeletePod(p.Namespace, p.Name) })),
		add(on(nodes, c.UpsertNode, func(n *corev1.Node) { c.DeleteNode(n.Name) })),
		add(on(inf.core.Scheduling().V1().PriorityClasses().Informer(),
			func(pc *schedv1.PriorityClass) { upsertPriorityClass(c, pc) },
			func(pc *schedv1.PriorityClass) { c.DeletePriorityClass(pc.Name); c.RegroupAll("") })),
	}
	served := servedResources(client)
	dra := gvr.Resource
	if served[dra.WithResource("resourceslices")] {
		errs = append(errs, add(on(inf.core.Resource().V1().ResourceSlices().Informer(), c.UpsertSlice, c.DeleteSlice)))
	}
	if served[dra.WithResource("deviceclasses")] {
		errs = append(errs, add(on(inf.core.Resource().V1().DeviceClasses().Informer(), c.UpsertDeviceClass,
			func(dc *resourceapi.DeviceClass) { c.DeleteDeviceClass(dc.Name) })))
	}
	if served[dra.WithResource("resourceclaims")] {
		errs = append(errs, add(on(inf.core.Resource().V1().ResourceClaims().Informer(), c.UpsertClaim,
			func(cl *resourceapi.ResourceClaim) { c.DeleteClaim(cl.Namespace, cl.Name) })))
	}
	errs = append(errs, inf.watchStorage(c, add))
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	if err := inf.watchCustom(c, lookup, served, add); err != nil {
		return nil, err
	}
	return inf, nil
}

// watchStorage watches what pods' constraints are translated with: claims, volumes,
// storage classes and CSINodes (read through their listers by podspec), and
// namespaces' labels. A change translates the pods it may concern again.
func (inf *Informers) watchStorage(c *gcache.Cache, add func(cache.ResourceEventHandlerRegistration, error) error) error {
	core, storage := inf.core.Core().V1(), inf.core.Storage().V1()
	c.SetVolumeLookup(volumebind.Listers{
		Claims: core.PersistentVolumeClaims().Lister(), Volumes: core.PersistentVolumes().Lister(),
		Classes: storage.StorageClasses().Lister(), CSINodes: storage.CSINodes().Lister(),
	})
	all := func(any) { c.VolumesChanged("") }
	return errors.Join(
		add(on(core.PersistentVolumeClaims().Informer(),
			func(pvc *corev1.PersistentVolumeClaim) { c.VolumesChanged(pvc.Namespace) },
			func(pvc *corev1.PersistentVolumeClaim) { c.VolumesChanged(pvc.Namespace) })),
		add(on(core.PersistentVolumes().Informer(), all, all)),
		add(on(storage.StorageClasses().Informer(), all, all)),
		add(on(storage.CSINodes().Informer(), c.UpsertCSINode, c.DeleteCSINode)),
		add(on(core.Namespaces().Informer(), c.UpsertNamespace, c.DeleteNamespace)),
	)
}

// watchCustom watches Gantry's and KubeRay's resources that the API server serves:
// Queues, GPUNodes, and the gang owners the ObjectLookup holds.
func (inf *Informers) watchCustom(c *gcache.Cache, lookup *ObjectLookup, served map[schema.GroupVersionResource]bool,
	add func(cache.ResourceEventHandlerRegistration, error) error) error {
	watch := func(gvr schema.GroupVersionResource, upsert func(*unstructured.Unstructured), remove func(*unstructured.Unstructured)) error {
		if !served[gvr] {
			klog.InfoS("API not served; watching it once it is", "resource", gvr.String())
			inf.late = append(inf.late, lateWatch{gvr: gvr, upsert: upsert, remove: remove})
			return nil
		}
		return add(on(inf.dynamic.ForResource(gvr).Informer(), upsert, remove))
	}
	queues := map[string]*model.Queue{}
	var queuesMu sync.Mutex
	setQueues := func(u *unstructured.Unstructured, present bool) {
		queuesMu.Lock()
		defer queuesMu.Unlock()
		if present {
			q := &schedulingv1alpha1.Queue{}
			if err := fromUnstructured(u, q); err != nil {
				klog.ErrorS(err, "Read Queue", "queue", u.GetName())
				return
			}
			queues[q.Name] = convert.Queue(q)
		} else {
			delete(queues, u.GetName())
		}
		cp := make(map[string]*model.Queue, len(queues))
		for k, v := range queues {
			cp[k] = v
		}
		c.SetQueues(cp)
	}
	errs := []error{
		watch(gvr.Queue, func(u *unstructured.Unstructured) { setQueues(u, true) }, func(u *unstructured.Unstructured) { setQueues(u, false) }),
		watch(gvr.GPUNode, func(u *unstructured.Unstructured) { upsertGPUNode(c, u) }, func(u *unstructured.Unstructured) { c.SetLive(u.GetName(), nil) }),
		watch(gvr.PodGroup, lookupUpsert[schedulingv1alpha1.PodGroup](c, lookup.podGroups), lookupRemove(c, lookup.podGroups)),
		watch(gvr.RayCluster, lookupUpsert[rayv1.RayCluster](c, lookup.rayClusters), lookupRemove(c, lookup.rayClusters)),
		watch(gvr.RayJob, lookupUpsert[rayv1.RayJob](c, lookup.rayJobs), lookupRemove(c, lookup.rayJobs)),
		watch(gvr.RayService, lookupUpsert[rayv1.RayService](c, lookup.rayServices), lookupRemove(c, lookup.rayServices)),
	}
	return errors.Join(errs...)
}

// Start starts the informers and waits for their first lists. The custom resources
// not served yet are watched in the background once they are, until ctx ends.
func (inf *Informers) Start(ctx context.Context) error {
	inf.core.Start(ctx.Done())
	inf.dynamic.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.synced...) {
		return fmt.Errorf("informers did not sync")
	}
	if len(inf.late) > 0 {
		go inf.watchLate(ctx)
	}
	return nil
}

// on registers the one handler every informer uses: adds and updates go to upsert,
// deletes (tombstones unwrapped) to remove; objects of another type are ignored.
func on[T any](i cache.SharedIndexInformer, upsert, remove func(T)) (cache.ResourceEventHandlerRegistration, error) {
	return i.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		UpdateFunc: func(_, obj any) {
			if o, ok := obj.(T); ok {
				upsert(o)
			}
		},
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if o, ok := obj.(T); ok {
				remove(o)
			}
		},
	})
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), into)
}

// servedResources asks discovery which of the resources the scheduler may watch the
// API server serves.
func servedResources(client kubernetes.Interface, gvs ...schema.GroupVersion) map[schema.GroupVersionResource]bool {
	if len(gvs) == 0 {
		gvs = []schema.GroupVersion{gvr.Queue.GroupVersion(), gvr.GPUNode.GroupVersion(), gvr.RayCluster.GroupVersion(), gvr.Resource}
	}
	out := map[schema.GroupVersionResource]bool{}
	for _, gv := range gvs {
		list, err := serverResources(client, gv)
		if err != nil {
			continue
		}
		for _, r := range list.APIResources {
			if !strings.Contains(r.Name, "/") {
				out[gv.WithResource(r.Name)] = true
			}
		}
	}
	return out
}

// serverResources asks discovery for one group and version. A group not served
// answers NotFound at once; any other error (an API server slow to answer, under
// load or restarting) is asked again a few times before the group is taken as not
// served: resource.k8s.io is asked only at start, and a scheduler that missed it
// would not watch ResourceClaims until restarted.
func serverResources(client kubernetes.Interface, gv schema.GroupVersion) (*metav1.APIResourceList, error) {
	wait := 250 * time.Millisecond
	for attempt := 1; ; attempt++ {
		list, err := client.Discovery().ServerResourcesForGroupVersion(gv.String())
		if err == nil || apierrors.IsNotFound(err) || attempt == 5 {
			if err != nil && !apierrors.IsNotFound(err) {
				klog.ErrorS(err, "Discovery failed; taking the API as not served", "groupVersion", gv.String())
			}
			return list, err
		}
		time.Sleep(wait)
		wait *= 2
	}
}

func upsertPriorityClass(c *gcache.Cache, pc *schedv1.PriorityClass) {
	var preemptible *bool
	// The label wins over the annotation: it is applied last.
	for _, m := range []map[string]string{pc.Annotations, pc.Labels} {
		switch m[names.LabelPreemptible] {
		case "true":
			t := true
			preemptible = &t
		case "false":
			f := false
			preemptible = &f
		}
	}
	c.UpsertPriorityClass(pc.Name, pc.Value, preemptible)
	c.RegroupAll("")
}

func upsertGPUNode(c *gcache.Cache, u *unstructured.Unstructured) {
	gn := &gpuv1alpha1.GPUNode{}
	if err := fromUnstructured(u, gn); err != nil {
		klog.ErrorS(err, "Read GPUNode", "node", u.GetName())
		return
	}
	c.SetLive(gn.Name, liveGPUs(gn))
}

// liveGPUs reads a GPUNode's measurements. Free memory of a GPUNode whose agent
// says its readings are Stale is not live, and is left unknown.
func liveGPUs(gn *gpuv1alpha1.GPUNode) map[string]gcache.LiveGPU {
	stale := meta.IsStatusConditionTrue(gn.Status.Conditions, gpuv1alpha1.GPUNodeConditionStale)
	live := map[string]gcache.LiveGPU{}
	for _, g := range gn.Status.GPUs {
		l := gcache.LiveGPU{FreeBytes: model.UnknownBytes, Healthy: g.Health != gpuv1alpha1.Unhealthy, SampledAt: gn.Status.SampleTime.Time}
		if g.MemoryFree != nil && !stale {
			l.FreeBytes = g.MemoryFree.Value()
		}
		live[g.UUID] = l
	}
	return live
}
