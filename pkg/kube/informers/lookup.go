package informers

import (
	"sync"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/klog/v2"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	gcache "github.com/gantry-dev/gantry/pkg/kube/cache"
)

// ObjectLookup is gang.Lookup over the objects the informers have seen. It is safe
// for concurrent use.
type ObjectLookup struct {
	rayClusters *objectMap[rayv1.RayCluster]
	rayJobs     *objectMap[rayv1.RayJob]
	rayServices *objectMap[rayv1.RayService]
	podGroups   *objectMap[schedulingv1alpha1.PodGroup]
}

// NewObjectLookup returns an empty lookup.
func NewObjectLookup() *ObjectLookup {
	return &ObjectLookup{
		rayClusters: newObjectMap[rayv1.RayCluster](),
		rayJobs:     newObjectMap[rayv1.RayJob](),
		rayServices: newObjectMap[rayv1.RayService](),
		podGroups:   newObjectMap[schedulingv1alpha1.PodGroup](),
	}
}

func (l *ObjectLookup) RayCluster(ns, name string) *rayv1.RayCluster {
	return l.rayClusters.get(ns, name)
}
func (l *ObjectLookup) RayJob(ns, name string) *rayv1.RayJob { return l.rayJobs.get(ns, name) }
func (l *ObjectLookup) RayService(ns, name string) *rayv1.RayService {
	return l.rayServices.get(ns, name)
}
func (l *ObjectLookup) PodGroup(ns, name string) *schedulingv1alpha1.PodGroup {
	return l.podGroups.get(ns, name)
}

type objectMap[T any] struct {
	mu   sync.RWMutex
	objs map[string]*T
}

func newObjectMap[T any]() *objectMap[T] { return &objectMap[T]{objs: map[string]*T{}} }

func (m *objectMap[T]) get(ns, name string) *T {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.objs[ns+"/"+name]
}

func (m *objectMap[T]) set(ns, name string, obj *T) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if obj == nil {
		delete(m.objs, ns+"/"+name)
	} else {
		m.objs[ns+"/"+name] = obj
	}
}

// lookupUpsert converts a watched object to its typed form, stores it, and regroups
// the gangs of its namespace (an owner's spec decides a gang's size and queue).
func lookupUpsert[T any](c *gcache.Cache, m *objectMap[T]) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		obj := new(T)
		if err := fromUnstructured(u, obj); err != nil {
			klog.ErrorS(err, "Read object", "kind", u.GetKind(), "name", u.GetNamespace()+"/"+u.GetName())
			return
		}
		m.set(u.GetNamespace(), u.GetName(), obj)
		c.RegroupAll(u.GetNamespace())
	}
}

func lookupRemove[T any](c *gcache.Cache, m *objectMap[T]) func(*unstructured.Unstructured) {
	return func(u *unstructured.Unstructured) {
		m.set(u.GetNamespace(), u.GetName(), nil)
		c.RegroupAll(u.GetNamespace())
	}
}

// PodGroups returns every PodGroup seen, keyed "namespace/name".
func (l *ObjectLookup) PodGroups() map[string]*schedulingv1alpha1.PodGroup {
	l.podGroups.mu.RLock()
	defer l.podGroups.mu.RUnlock()
	out := make(map[string]*schedulingv1alpha1.PodGroup, len(l.podGroups.objs))
	for k, v := range l.podGroups.objs {
		out[k] = v
	}
	return out
}
