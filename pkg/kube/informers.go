package kube

import (
	"context"
	"fmt"
	"strings"
	"sync"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"
	schedv1 "k8s.io/api/scheduling/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/apis/scheduling/convert"
	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/model"
)

// DriverName is Gantry's DRA driver and DeviceClass.
const DriverName = "gpu.gantry.dev"

var (
	queueGVR      = schema.GroupVersionResource{Group: "scheduling.gantry.dev", Version: "v1alpha1", Resource: "queues"}
	podGroupGVR   = schema.GroupVersionResource{Group: "scheduling.gantry.dev", Version: "v1alpha1", Resource: "podgroups"}
	gpuNodeGVR    = schema.GroupVersionResource{Group: "gpu.gantry.dev", Version: "v1alpha1", Resource: "gpunodes"}
	rayClusterGVR = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayclusters"}
	rayJobGVR     = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayjobs"}
	rayServiceGVR = schema.GroupVersionResource{Group: "ray.io", Version: "v1", Resource: "rayservices"}
)

// Informers feeds a Cache from the API server.
type Informers struct {
	core    informers.SharedInformerFactory
	dynamic dynamicinformer.DynamicSharedInformerFactory
	synced  []cache.InformerSynced
	Lookup  *ObjectLookup
}

// NewInformers registers every informer the scheduler needs. Kinds whose API is not
// served (KubeRay not installed, say) are skipped with a log line, so the scheduler
// works without them; it picks them up on restart.
func NewInformers(client kubernetes.Interface, dyn dynamic.Interface, c *Cache, lookup *ObjectLookup) (*Informers, error) {
	inf := &Informers{
		core:    informers.NewSharedInformerFactory(client, 0),
		dynamic: dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0),
		Lookup:  lookup,
	}
	pods := inf.core.Core().V1().Pods().Informer()
	if err := pods.SetTransform(slimPod); err != nil {
		return nil, err
	}
	podsReg, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.UpsertPod(obj.(*corev1.Pod)) },
		UpdateFunc: func(_, obj any) { c.UpsertPod(obj.(*corev1.Pod)) },
		DeleteFunc: func(obj any) {
			if pod, ok := unwrap(obj).(*corev1.Pod); ok {
				c.DeletePod(pod.Namespace, pod.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	nodes := inf.core.Core().V1().Nodes().Informer()
	if err := nodes.SetTransform(slimNode); err != nil {
		return nil, err
	}
	nodesReg, err := nodes.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { c.UpsertNode(obj.(*corev1.Node)) },
		UpdateFunc: func(_, obj any) { c.UpsertNode(obj.(*corev1.Node)) },
		DeleteFunc: func(obj any) {
			if n, ok := unwrap(obj).(*corev1.Node); ok {
				c.DeleteNode(n.Name)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	pcs := inf.core.Scheduling().V1().PriorityClasses().Informer()
	pcsReg, err := pcs.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { upsertPriorityClass(c, obj.(*schedv1.PriorityClass)) },
		UpdateFunc: func(_, obj any) { upsertPriorityClass(c, obj.(*schedv1.PriorityClass)) },
		DeleteFunc: func(obj any) {
			if pc, ok := unwrap(obj).(*schedv1.PriorityClass); ok {
				c.DeletePriorityClass(pc.Name)
				c.RegroupAll("")
			}
		},
	})
	if err != nil {
		return nil, err
	}
	// Wait for the handlers to have seen the first list, not only the informers:
	// a first cycle on a half-filled cache would report gangs as incomplete.
	inf.synced = append(inf.synced, podsReg.HasSynced, nodesReg.HasSynced, pcsReg.HasSynced)

	served := servedResources(client)
	if served[schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceslices"}] {
		slices := inf.core.Resource().V1().ResourceSlices().Informer()
		s := &sliceIndex{byNode: map[string]map[string]*resourceapi.ResourceSlice{}}
		reg, err := slices.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { s.upsert(c, obj.(*resourceapi.ResourceSlice)) },
			UpdateFunc: func(_, obj any) { s.upsert(c, obj.(*resourceapi.ResourceSlice)) },
			DeleteFunc: func(obj any) {
				if sl, ok := unwrap(obj).(*resourceapi.ResourceSlice); ok {
					s.remove(c, sl)
				}
			},
		})
		if err != nil {
			return nil, err
		}
		inf.synced = append(inf.synced, reg.HasSynced)
	}
	if served[schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "deviceclasses"}] {
		classes := inf.core.Resource().V1().DeviceClasses().Informer()
		reg, err := classes.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.UpsertDeviceClass(obj.(*resourceapi.DeviceClass)) },
			UpdateFunc: func(_, obj any) { c.UpsertDeviceClass(obj.(*resourceapi.DeviceClass)) },
			DeleteFunc: func(obj any) {
				if dc, ok := unwrap(obj).(*resourceapi.DeviceClass); ok {
					c.DeleteDeviceClass(dc.Name)
				}
			},
		})
		if err != nil {
			return nil, err
		}
		inf.synced = append(inf.synced, reg.HasSynced)
	}
	if served[schema.GroupVersionResource{Group: "resource.k8s.io", Version: "v1", Resource: "resourceclaims"}] {
		claims := inf.core.Resource().V1().ResourceClaims().Informer()
		reg, err := claims.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.UpsertClaim(obj.(*resourceapi.ResourceClaim)) },
			UpdateFunc: func(_, obj any) { c.UpsertClaim(obj.(*resourceapi.ResourceClaim)) },
			DeleteFunc: func(obj any) {
				if cl, ok := unwrap(obj).(*resourceapi.ResourceClaim); ok {
					c.DeleteClaim(cl.Namespace, cl.Name)
				}
			},
		})
		if err != nil {
			return nil, err
		}
		inf.synced = append(inf.synced, reg.HasSynced)
	}
	watch := func(gvr schema.GroupVersionResource, upsert func(*unstructured.Unstructured), remove func(*unstructured.Unstructured)) error {
		if !served[gvr] {
			klog.InfoS("API not served; not watching it", "resource", gvr.String())
			return nil
		}
		i := inf.dynamic.ForResource(gvr).Informer()
		reg, err := i.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { upsert(obj.(*unstructured.Unstructured)) },
			UpdateFunc: func(_, obj any) { upsert(obj.(*unstructured.Unstructured)) },
			DeleteFunc: func(obj any) {
				if u, ok := unwrap(obj).(*unstructured.Unstructured); ok {
					remove(u)
				}
			},
		})
		if err != nil {
			return err
		}
		inf.synced = append(inf.synced, reg.HasSynced)
		return nil
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
		watch(queueGVR, func(u *unstructured.Unstructured) { setQueues(u, true) }, func(u *unstructured.Unstructured) { setQueues(u, false) }),
		watch(gpuNodeGVR, func(u *unstructured.Unstructured) { upsertGPUNode(c, u) }, func(u *unstructured.Unstructured) { c.SetLive(u.GetName(), nil) }),
		watch(podGroupGVR, lookupUpsert[schedulingv1alpha1.PodGroup](c, lookup.podGroups), lookupRemove(c, lookup.podGroups)),
		watch(rayClusterGVR, lookupUpsert[rayv1.RayCluster](c, lookup.rayClusters), lookupRemove(c, lookup.rayClusters)),
		watch(rayJobGVR, lookupUpsert[rayv1.RayJob](c, lookup.rayJobs), lookupRemove(c, lookup.rayJobs)),
		watch(rayServiceGVR, lookupUpsert[rayv1.RayService](c, lookup.rayServices), lookupRemove(c, lookup.rayServices)),
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return inf, nil
}

// Start starts the informers and waits for their first lists.
func (inf *Informers) Start(ctx context.Context) error {
	inf.core.Start(ctx.Done())
	inf.dynamic.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.synced...) {
		return fmt.Errorf("informers did not sync")
	}
	return nil
}

func unwrap(obj any) any {
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		return d.Obj
	}
	return obj
}

func fromUnstructured(u *unstructured.Unstructured, into any) error {
	return runtime.DefaultUnstructuredConverter.FromUnstructured(u.UnstructuredContent(), into)
}

// servedResources asks discovery which of the resources the scheduler may watch the
// API server serves.
func servedResources(client kubernetes.Interface) map[schema.GroupVersionResource]bool {
	out := map[schema.GroupVersionResource]bool{}
	for _, gv := range []schema.GroupVersion{
		{Group: "scheduling.gantry.dev", Version: "v1alpha1"}, {Group: "gpu.gantry.dev", Version: "v1alpha1"},
		{Group: "ray.io", Version: "v1"}, {Group: "resource.k8s.io", Version: "v1"},
	} {
		list, err := client.Discovery().ServerResourcesForGroupVersion(gv.String())
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

func upsertPriorityClass(c *Cache, pc *schedv1.PriorityClass) {
	var preemptible *bool
	// The label wins over the annotation: it is applied last.
	for _, m := range []map[string]string{pc.Annotations, pc.Labels} {
		switch m[LabelPreemptible] {
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

func upsertGPUNode(c *Cache, u *unstructured.Unstructured) {
	gn := &gpuv1alpha1.GPUNode{}
	if err := fromUnstructured(u, gn); err != nil {
		klog.ErrorS(err, "Read GPUNode", "node", u.GetName())
		return
	}
	live := map[string]liveGPU{}
	for _, g := range gn.Status.GPUs {
		l := liveGPU{freeBytes: model.UnknownBytes, healthy: g.Health != gpuv1alpha1.Unhealthy}
		if g.MemoryFree != nil {
			l.freeBytes = g.MemoryFree.Value()
		}
		live[g.UUID] = l
	}
	c.SetLive(gn.Name, live)
}

// sliceIndex turns the gpu.gantry.dev ResourceSlices of each node into its GPU
// inventory.
type sliceIndex struct {
	mu     sync.Mutex
	byNode map[string]map[string]*resourceapi.ResourceSlice
}

func (s *sliceIndex) upsert(c *Cache, sl *resourceapi.ResourceSlice) {
	c.UpsertSlice(sl) // every driver's, for the structured allocator
	if sl.Spec.Driver != DriverName || sl.Spec.NodeName == nil {
		return
	}
	node := *sl.Spec.NodeName
	s.mu.Lock()
	if s.byNode[node] == nil {
		s.byNode[node] = map[string]*resourceapi.ResourceSlice{}
	}
	s.byNode[node][sl.Name] = sl
	gpus := gpusFromSlices(s.byNode[node])
	s.mu.Unlock()
	c.SetInventory(node, gpus)
}

func (s *sliceIndex) remove(c *Cache, sl *resourceapi.ResourceSlice) {
	c.DeleteSlice(sl.Name)
	if sl.Spec.Driver != DriverName || sl.Spec.NodeName == nil {
		return
	}
	node := *sl.Spec.NodeName
	s.mu.Lock()
	delete(s.byNode[node], sl.Name)
	var gpus []model.GPU
	if len(s.byNode[node]) > 0 {
		gpus = gpusFromSlices(s.byNode[node])
	} else {
		delete(s.byNode, node)
	}
	s.mu.Unlock()
	c.SetInventory(node, gpus)
}

// gpusFromSlices reads the node agent's devices: index, uuid, productName and the
// memory capacity; a device with a NoSchedule or NoExecute taint is unhealthy.
func gpusFromSlices(slices map[string]*resourceapi.ResourceSlice) []model.GPU {
	var gpus []model.GPU
	for _, sl := range slices {
		for _, d := range sl.Spec.Devices {
			g := model.GPU{Index: -1, LiveFreeBytes: model.UnknownBytes, Healthy: true}
			if a, ok := d.Attributes["index"]; ok && a.IntValue != nil {
				g.Index = int(*a.IntValue)
			}
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				g.UUID = *a.StringValue
			}
			if a, ok := d.Attributes["productName"]; ok && a.StringValue != nil {
				g.Model = model.CanonicalGPUModel(*a.StringValue)
			}
			if cpt, ok := d.Capacity["memory"]; ok {
				g.MemoryBytes = cpt.Value.Value()
			}
			for _, t := range d.Taints {
				if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
					g.Healthy = false
				}
			}
			if g.Index >= 0 {
				gpus = append(gpus, g)
			}
		}
	}
	sortGPUs(gpus)
	return gpus
}

func sortGPUs(gpus []model.GPU) {
	for i := 1; i < len(gpus); i++ {
		for j := i; j > 0 && gpus[j].Index < gpus[j-1].Index; j-- {
			gpus[j], gpus[j-1] = gpus[j-1], gpus[j]
		}
	}
}
