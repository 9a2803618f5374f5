package podspec

import (
	corev1 "k8s.io/api/core/v1"
)

// KeepForConstraints copies into out, a slimmed copy of in (pkg/kube's informer
// transform), what Constraints reads and the slim pod lacks: the whole affinity,
// topology spread constraints, host network and user namespaces, the volume
// sources that refer to claims, CSI drivers or in-tree disks (without their
// contents), and each container's host ports and restart rules. out's containers
// must be in's, in the same order.
func KeepForConstraints(out, in *corev1.Pod) {
	out.Spec.Affinity = in.Spec.Affinity
	out.Spec.TopologySpreadConstraints = in.Spec.TopologySpreadConstraints
	out.Spec.HostNetwork = in.Spec.HostNetwork
	out.Spec.HostUsers = in.Spec.HostUsers
	out.Spec.Volumes = slimVolumes(in.Spec.Volumes)
	keepContainers(out.Spec.Containers, in.Spec.Containers)
	keepContainers(out.Spec.InitContainers, in.Spec.InitContainers)
}

func keepContainers(out, in []corev1.Container) {
	for i := range out {
		if i >= len(in) {
			return
		}
		out[i].RestartPolicy = in[i].RestartPolicy
		out[i].RestartPolicyRules = in[i].RestartPolicyRules
		for _, p := range in[i].Ports {
			if p.HostPort > 0 {
				out[i].Ports = append(out[i].Ports, p)
			}
		}
	}
}

// slimVolumes keeps, for the sources Constraints reads, the reference (claim name,
// CSI driver, in-tree kind), not the rest, and each volume's name up to the last
// such volume (so that refusals name the right spec.volumes index). Volumes after
// it are dropped: the kube-api-access projected volume that the API server appends
// to every pod, and configMap, secret, downwardAPI or emptyDir volumes, which no
// constraint reads (about 300 B a pod, issue 21). A pod with none of these sources
// keeps no volume.
func slimVolumes(vs []corev1.Volume) []corev1.Volume {
	last := -1
	for i := range vs {
		if readVolume(&vs[i]) {
			last = i
		}
	}
	if last < 0 {
		return nil
	}
	out := make([]corev1.Volume, last+1)
	for i, v := range vs[:last+1] {
		s := corev1.Volume{Name: v.Name}
		switch {
		case v.PersistentVolumeClaim != nil:
			s.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: v.PersistentVolumeClaim.ClaimName}
		case v.Ephemeral != nil:
			s.Ephemeral = &corev1.EphemeralVolumeSource{}
		case v.CSI != nil:
			s.CSI = &corev1.CSIVolumeSource{Driver: v.CSI.Driver}
		case inTreeVolume(&v) != "":
			s.VolumeSource = v.VolumeSource
		}
		out[i] = s
	}
	return out
}

// readVolume: Constraints (or the cache's storage index) reads the volume's source.
func readVolume(v *corev1.Volume) bool {
	return v.PersistentVolumeClaim != nil || v.Ephemeral != nil || v.CSI != nil || inTreeVolume(v) != ""
}
