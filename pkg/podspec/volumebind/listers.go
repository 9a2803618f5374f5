package volumebind

import (
	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	"k8s.io/apimachinery/pkg/labels"
	corelisters "k8s.io/client-go/listers/core/v1"
	storagelisters "k8s.io/client-go/listers/storage/v1"

	"github.com/gantry-dev/gantry/pkg/podspec"
)

// Listers is a podspec.Lookup over informer listers.
type Listers struct {
	Claims   corelisters.PersistentVolumeClaimLister
	Volumes  corelisters.PersistentVolumeLister
	Classes  storagelisters.StorageClassLister
	CSINodes storagelisters.CSINodeLister
}

var _ podspec.Lookup = Listers{}

func (l Listers) Claim(ns, name string) *corev1.PersistentVolumeClaim {
	c, err := l.Claims.PersistentVolumeClaims(ns).Get(name)
	if err != nil {
		return nil
	}
	return c
}

func (l Listers) Volume(name string) *corev1.PersistentVolume {
	v, err := l.Volumes.Get(name)
	if err != nil {
		return nil
	}
	return v
}

func (l Listers) StorageClass(name string) *storagev1.StorageClass {
	c, err := l.Classes.Get(name)
	if err != nil {
		return nil
	}
	return c
}

// AvailableVolumes lists the class's Available volumes (podspec.Lookup).
func (l Listers) AvailableVolumes(class string) []*corev1.PersistentVolume {
	all, err := l.Volumes.List(labels.Everything())
	if err != nil {
		return nil
	}
	var out []*corev1.PersistentVolume
	for _, v := range all {
		if v.Spec.StorageClassName == class && v.Status.Phase == corev1.VolumeAvailable {
			out = append(out, v)
		}
	}
	return out
}

// DriverTopologyKeys collects the driver's topology keys over all CSINodes.
func (l Listers) DriverTopologyKeys(driver string) []string {
	if l.CSINodes == nil {
		return nil
	}
	nodes, err := l.CSINodes.List(labels.Everything())
	if err != nil {
		return nil
	}
	return podspec.DriverTopologyKeys(nodes)[driver]
}
