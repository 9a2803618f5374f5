package scenario

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/podspec"
)

// Spec is what a scenario's pods state beyond resources, written as the API writes
// it; pkg/podspec translates it exactly as it translates a real pod, so a case
// ported from kube-scheduler's tests keeps its objects.
type Spec struct {
	// Namespace defaults to "ns".
	Namespace string
	Labels    map[string]string
	Affinity  *corev1.Affinity
	Spread    []corev1.TopologySpreadConstraint
	Ports     []corev1.ContainerPort
	// InitContainers are the pod's init containers (sidecars hold their ports).
	InitContainers []corev1.Container
	Tolerations    []corev1.Toleration
	Volumes        []corev1.Volume
	// Storage holds the claims, volumes and classes the Volumes refer to.
	Storage *Storage
	// Terminating marks running pods as being deleted; GraceEndedAgo, when not zero,
	// says how many seconds ago their grace period ended (model.Pod.TerminatingDeadline;
	// unknown when zero).
	Terminating   bool
	GraceEndedAgo int64
}

// Storage is the cluster's storage objects, as a podspec.Lookup.
type Storage struct {
	Claims  []*corev1.PersistentVolumeClaim
	Volumes []*corev1.PersistentVolume
	Classes []*storagev1.StorageClass
	// TopologyKeys are the CSI drivers' node topology keys.
	TopologyKeys map[string][]string
}

func (s *Storage) Claim(ns, name string) *corev1.PersistentVolumeClaim {
	for _, c := range s.Claims {
		if c.Namespace == ns && c.Name == name {
			return c
		}
	}
	return nil
}

func (s *Storage) Volume(name string) *corev1.PersistentVolume {
	for _, v := range s.Volumes {
		if v.Name == name {
			return v
		}
	}
	return nil
}

func (s *Storage) StorageClass(name string) *storagev1.StorageClass {
	for _, c := range s.Classes {
		if c.Name == name {
			return c
		}
	}
	return nil
}

func (s *Storage) AvailableVolumes(class string) []*corev1.PersistentVolume {
	var out []*corev1.PersistentVolume
	for _, v := range s.Volumes {
		if v.Spec.StorageClassName == class && v.Spec.ClaimRef == nil {
			out = append(out, v)
		}
	}
	return out
}

func (s *Storage) DriverTopologyKeys(driver string) []string { return s.TopologyKeys[driver] }

// apply stamps the spec on pod p, the i-th of gang name.
func (s Spec) apply(snap *model.Snapshot, p *model.Pod, name string, i int) error {
	p.Labels = s.Labels
	p.Tolerations = s.Tolerations
	p.Terminating = s.Terminating
	if s.Terminating && s.GraceEndedAgo != 0 {
		p.TerminatingDeadline = Now - s.GraceEndedAgo
	}
	if s.Affinity != nil && s.Affinity.NodeAffinity != nil {
		p.RequiredAffinity = s.Affinity.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution
	}
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: p.Namespace(), Name: fmt.Sprintf("%s-%d", name, i), Labels: s.Labels},
		Spec: corev1.PodSpec{
			Affinity:                  s.Affinity,
			TopologySpreadConstraints: s.Spread,
			Containers:                []corev1.Container{{Name: "c", Ports: s.Ports}},
			InitContainers:            s.InitContainers,
			Volumes:                   s.Volumes,
		},
	}
	var lookup podspec.Lookup
	if s.Storage != nil {
		lookup = s.Storage
	}
	p.Constraints = podspec.Constraints(pod, lookup, snap.NamespaceLabels)
	return nil
}

func podIDIn(ns, gang string, i int) model.PodID {
	if ns == "" {
		return PodID(gang, i)
	}
	return model.PodID(fmt.Sprintf("%s/%s-%d", ns, gang, i))
}
