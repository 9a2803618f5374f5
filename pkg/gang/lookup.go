package gang

import (
	"fmt"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
)

// Lookup finds the objects that own or describe pods, by namespace and name. Each
// method returns nil when the object does not exist (or is not known yet).
type Lookup interface {
	RayCluster(namespace, name string) *rayv1.RayCluster
	RayJob(namespace, name string) *rayv1.RayJob
	RayService(namespace, name string) *rayv1.RayService
	PodGroup(namespace, name string) *schedulingv1alpha1.PodGroup
}

// StaticLookup is a Lookup over objects held in memory, for tests and the simulator.
// The zero value is empty and ready to use.
type StaticLookup struct {
	rayClusters map[string]*rayv1.RayCluster
	rayJobs     map[string]*rayv1.RayJob
	rayServices map[string]*rayv1.RayService
	podGroups   map[string]*schedulingv1alpha1.PodGroup
}

// NewStaticLookup returns a StaticLookup holding objs, which must be *rayv1.RayCluster,
// *rayv1.RayJob, *rayv1.RayService or *schedulingv1alpha1.PodGroup.
func NewStaticLookup(objs ...any) (*StaticLookup, error) {
	l := &StaticLookup{}
	for _, obj := range objs {
		if err := l.Add(obj); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// Add adds or replaces one object.
func (l *StaticLookup) Add(obj any) error {
	switch o := obj.(type) {
	case *rayv1.RayCluster:
		l.rayClusters = put(l.rayClusters, o.Namespace, o.Name, o)
	case *rayv1.RayJob:
		l.rayJobs = put(l.rayJobs, o.Namespace, o.Name, o)
	case *rayv1.RayService:
		l.rayServices = put(l.rayServices, o.Namespace, o.Name, o)
	case *schedulingv1alpha1.PodGroup:
		l.podGroups = put(l.podGroups, o.Namespace, o.Name, o)
	default:
		return fmt.Errorf("gang lookup: cannot hold a %T; want a RayCluster, RayJob, RayService or PodGroup", obj)
	}
	return nil
}

func put[T any](m map[string]*T, namespace, name string, obj *T) map[string]*T {
	if m == nil {
		m = map[string]*T{}
	}
	m[namespace+"/"+name] = obj
	return m
}

func (l *StaticLookup) RayCluster(namespace, name string) *rayv1.RayCluster {
	return l.rayClusters[namespace+"/"+name]
}

func (l *StaticLookup) RayJob(namespace, name string) *rayv1.RayJob {
	return l.rayJobs[namespace+"/"+name]
}

func (l *StaticLookup) RayService(namespace, name string) *rayv1.RayService {
	return l.rayServices[namespace+"/"+name]
}

func (l *StaticLookup) PodGroup(namespace, name string) *schedulingv1alpha1.PodGroup {
	return l.podGroups[namespace+"/"+name]
}
