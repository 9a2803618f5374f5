package podspec

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/gantry-dev/gantry/pkg/model"
)

// gpuResource is the extended resource Gantry counts as whole GPUs.
const gpuResource corev1.ResourceName = "nvidia.com/gpu"

// addUnsupported refuses what kube-scheduler's default profile would check and
// Gantry does not: node resources other than CPU, memory, pods and nvidia.com/gpu
// (NodeResourcesFit counts every one the node advertises), and in-tree inline
// volumes that VolumeRestrictions and NodeVolumeLimits would check.
func addUnsupported(c *model.Constraints, pod *corev1.Pod) {
	var names []string
	requestedResources(pod, func(name corev1.ResourceName) {
		if name == corev1.ResourceCPU || name == corev1.ResourceMemory || name == corev1.ResourcePods || name == gpuResource {
			return
		}
		if !slices.Contains(names, string(name)) {
			names = append(names, string(name))
		}
	})
	if len(names) > 0 {
		refuse(c, model.RefusalUnsupported, "spec.containers[].resources.requests",
			"Gantry does not account %s on nodes; remove the request, or set spec.schedulerName to default-scheduler for this pod",
			strings.Join(sorted(names), ", "))
	}
	for i := range pod.Spec.Volumes {
		if kind := inTreeVolume(&pod.Spec.Volumes[i]); kind != "" {
			refuse(c, model.RefusalUnsupported, fmt.Sprintf("spec.volumes[%d].%s", i, kind),
				"in-tree inline %s volumes are not checked for conflicts and attach limits; use a PersistentVolumeClaim of the CSI driver instead", kind)
		}
	}
}

// requestedResources calls f with each resource the pod requests a non-zero amount
// of (a name may come more than once): what the pod's effective requests
// (PodRequests of k8s.io/component-helpers/resource) hold a non-zero amount of, since those are sums and
// maxima of these lists, whose amounts are never negative. Read in place: summing
// them into new lists on every pod event was 6 % of gantry-scheduler's allocations
// at 100 pods/s (session 17).
func requestedResources(pod *corev1.Pod, f func(corev1.ResourceName)) {
	each := func(l corev1.ResourceList) {
		for name, q := range l {
			if !q.IsZero() {
				f(name)
			}
		}
	}
	each(pod.Spec.Overhead)
	if pod.Spec.Resources != nil {
		each(pod.Spec.Resources.Requests)
	}
	for i := range pod.Spec.Containers {
		each(pod.Spec.Containers[i].Resources.Requests)
	}
	for i := range pod.Spec.InitContainers {
		each(pod.Spec.InitContainers[i].Resources.Requests)
	}
}

// inTreeVolume names an inline in-tree volume source that kube-scheduler checks
// for conflicts (VolumeRestrictions) or counts against attach limits, "" otherwise.
func inTreeVolume(v *corev1.Volume) string {
	switch {
	case v.GCEPersistentDisk != nil:
		return "gcePersistentDisk"
	case v.AWSElasticBlockStore != nil:
		return "awsElasticBlockStore"
	case v.RBD != nil:
		return "rbd"
	case v.ISCSI != nil:
		return "iscsi"
	case v.AzureDisk != nil:
		return "azureDisk"
	case v.Cinder != nil:
		return "cinder"
	}
	return ""
}

func sorted(s []string) []string {
	for i := 1; i < len(s); i++ {
		for j := i; j > 0 && s[j] < s[j-1]; j-- {
			s[j], s[j-1] = s[j-1], s[j]
		}
	}
	return s
}

func labelsOf(pv *corev1.PersistentVolume) labels.Set { return labels.Set(pv.Labels) }
