package podspec

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/gantry-dev/gantry/pkg/model"
)

// AnnotationSelectedNode is set on a WaitForFirstConsumer claim to the node its
// volume must be provisioned for, as kube-scheduler's VolumeBinding does.
const AnnotationSelectedNode = "volume.kubernetes.io/selected-node"

// zoneLabelKeys are the volume labels VolumeZone reads.
var zoneLabelKeys = []string{
	corev1.LabelFailureDomainBetaZone, corev1.LabelFailureDomainBetaRegion,
	corev1.LabelTopologyZone, corev1.LabelTopologyRegion,
}

// addVolumes translates the pod's PersistentVolumeClaims (and generic ephemeral
// volumes, whose claims are named <pod>-<volume>).
func addVolumes(c *model.Constraints, pod *corev1.Pod, lookup Lookup) {
	needs := &model.VolumeNeeds{}
	for i := range pod.Spec.Volumes {
		vol := &pod.Spec.Volumes[i]
		field := fmt.Sprintf("spec.volumes[%d]", i)
		switch {
		case vol.PersistentVolumeClaim != nil:
			addClaim(c, needs, pod, field+".persistentVolumeClaim", vol.PersistentVolumeClaim.ClaimName, lookup, false)
		case vol.Ephemeral != nil:
			addClaim(c, needs, pod, field+".ephemeral", pod.Name+"-"+vol.Name, lookup, true)
		}
		// Inline CSI volumes are ephemeral on the node, not attached: kube-scheduler's
		// NodeVolumeLimits does not count them, and neither does Gantry.
	}
	if len(needs.Bound)+len(needs.Delayed)+len(needs.Attach) > 0 {
		c.Volumes = needs
	}
}

// addClaim resolves one claim: bound (the volume's node affinity and zone), or
// WaitForFirstConsumer (a volume to find or provision on the chosen node), or a
// refusal (missing, lost, bound elsewhere, unbound with Immediate binding).
func addClaim(c *model.Constraints, needs *model.VolumeNeeds, pod *corev1.Pod, field, name string, lookup Lookup, ephemeral bool) {
	var claim *corev1.PersistentVolumeClaim
	if lookup != nil {
		claim = lookup.Claim(pod.Namespace, name)
	}
	switch {
	case claim == nil && ephemeral:
		refuse(c, model.RefusalVolume, field, "persistentvolumeclaim %q not found: the ephemeral volume controller has not created it yet", name)
		return
	case claim == nil:
		refuse(c, model.RefusalVolume, field, "persistentvolumeclaim %q not found: create it in namespace %s or fix the claim name", name, pod.Namespace)
		return
	case ephemeral && !metav1.IsControlledBy(claim, pod):
		refuse(c, model.RefusalVolume, field, "persistentvolumeclaim %q was not created for this pod: delete it so that the ephemeral volume controller creates the pod's own", name)
		return
	case claim.DeletionTimestamp != nil:
		refuse(c, model.RefusalVolume, field, "persistentvolumeclaim %q is being deleted: use another claim", name)
		return
	case claim.Status.Phase == corev1.ClaimLost:
		refuse(c, model.RefusalVolume, field, "persistentvolumeclaim %q lost its volume %q: recreate the claim", name, claim.Spec.VolumeName)
		return
	}
	if slices.Contains(claim.Spec.AccessModes, corev1.ReadWriteOncePod) {
		c.ExclusiveClaims = append(c.ExclusiveClaims, pod.Namespace+"/"+name)
	}
	if claim.Spec.VolumeName != "" {
		addBound(c, needs, field, claim, lookup)
		return
	}
	class := storageClassOf(claim)
	var sc *storagev1.StorageClass
	if class != "" {
		sc = lookup.StorageClass(class)
	}
	// An unbound claim counts as one volume of its class's provisioner on the
	// node, whatever its binding mode, as NodeVolumeLimits counts it: a pod already
	// running with an Immediate claim not yet bound still holds an attachment.
	if sc != nil && sc.Provisioner != "" && sc.Provisioner != noProvisioner {
		needs.Attach = append(needs.Attach, model.CSIVolume{Driver: sc.Provisioner, Handle: "claim:" + pod.Namespace + "/" + name})
	}
	if sc == nil || sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
		refuse(c, model.RefusalVolume, field, "persistentvolumeclaim %q is not bound and its storage class %q binds immediately: wait for the volume controller to bind it, or use a WaitForFirstConsumer class", name, class)
		return
	}
	needs.Delayed = append(needs.Delayed, delayedClaim(claim, sc, lookup))
}

const noProvisioner = "kubernetes.io/no-provisioner"

func addBound(c *model.Constraints, needs *model.VolumeNeeds, field string, claim *corev1.PersistentVolumeClaim, lookup Lookup) {
	pv := lookup.Volume(claim.Spec.VolumeName)
	switch {
	case pv == nil:
		refuse(c, model.RefusalVolume, field, "persistentvolumeclaim %q is bound to persistentvolume %q, which does not exist: recreate the claim", claim.Name, claim.Spec.VolumeName)
		return
	case pv.Spec.ClaimRef == nil:
		refuse(c, model.RefusalVolume, field, "persistentvolumeclaim %q names persistentvolume %q, which does not name the claim yet: wait for the volume controller to bind them", claim.Name, pv.Name)
		return
	case pv.Spec.ClaimRef.Name != claim.Name || pv.Spec.ClaimRef.Namespace != claim.Namespace ||
		(pv.Spec.ClaimRef.UID != "" && pv.Spec.ClaimRef.UID != claim.UID):
		refuse(c, model.RefusalVolume, field, "persistentvolumeclaim %q names persistentvolume %q, which is bound to another claim: use a claim of its own", claim.Name, pv.Name)
		return
	}
	needs.Bound = append(needs.Bound, boundVolume(claim.Name, pv))
	if pv.Spec.CSI != nil {
		needs.Attach = append(needs.Attach, model.CSIVolume{Driver: pv.Spec.CSI.Driver, Handle: pv.Spec.CSI.VolumeHandle})
	}
}

func boundVolume(claim string, pv *corev1.PersistentVolume) model.BoundVolume {
	b := model.BoundVolume{Claim: claim, Volume: pv.Name}
	if na := pv.Spec.NodeAffinity; na != nil {
		b.NodeAffinity = na.Required
	}
	for _, key := range zoneLabelKeys {
		if v, ok := pv.Labels[key]; ok {
			b.Zones = append(b.Zones, model.ZoneLabel{Key: key, Values: strings.Split(v, "__")})
		}
	}
	return b
}

// delayedClaim lists the available volumes that could bind a WaitForFirstConsumer
// claim, and what provisioning a new one needs. A volume already pre-bound to the
// claim (its claimRef names it: a placement whose pod was then not bound, or
// another scheduler's) is the claim's only choice, as in kube-scheduler's volume
// binder; a claim whose selected-node annotation is set takes no available volume
// and can be provisioned on that node only (kube-scheduler's FindPodVolumes).
func delayedClaim(claim *corev1.PersistentVolumeClaim, sc *storagev1.StorageClass, lookup Lookup) model.DelayedClaim {
	d := model.DelayedClaim{Claim: claim.Name, StorageClass: sc.Name, AllowedTopologies: sc.AllowedTopologies,
		SelectedNode: claim.Annotations[AnnotationSelectedNode]}
	if sc.Provisioner != noProvisioner {
		d.Provisioner = sc.Provisioner
		d.DriverTopologyKeys = lookup.DriverTopologyKeys(sc.Provisioner)
	}
	if d.SelectedNode != "" {
		// kube-scheduler's FindPodVolumes: such a claim is provisioned, not matched.
		return d
	}
	for _, pv := range lookup.AvailableVolumes(sc.Name) {
		if preBound(pv, claim) {
			d.Available, d.Provisioner, d.DriverTopologyKeys = []model.BoundVolume{boundVolume(claim.Name, pv)}, "", nil
			return d
		}
		if volumeServes(pv, claim) {
			d.Available = append(d.Available, boundVolume(claim.Name, pv))
		}
	}
	return d
}

// preBound reports whether the volume's claimRef names the claim.
func preBound(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) bool {
	ref := pv.Spec.ClaimRef
	return ref != nil && pv.DeletionTimestamp == nil && ref.Namespace == claim.Namespace && ref.Name == claim.Name &&
		(ref.UID == "" || ref.UID == claim.UID)
}

// volumeServes reports whether an available volume can bind the claim: not held,
// large enough, with the claim's access modes and volume mode, and matching the
// claim's selector.
func volumeServes(pv *corev1.PersistentVolume, claim *corev1.PersistentVolumeClaim) bool {
	if pv.Spec.ClaimRef != nil || pv.DeletionTimestamp != nil {
		return false
	}
	want := claim.Spec.Resources.Requests[corev1.ResourceStorage]
	have := pv.Spec.Capacity[corev1.ResourceStorage]
	if have.Cmp(want) < 0 {
		return false
	}
	for _, m := range claim.Spec.AccessModes {
		if !slices.Contains(pv.Spec.AccessModes, m) {
			return false
		}
	}
	if modeOf(pv.Spec.VolumeMode) != modeOf(claim.Spec.VolumeMode) {
		return false
	}
	if claim.Spec.Selector != nil {
		sel, err := metav1.LabelSelectorAsSelector(claim.Spec.Selector)
		if err != nil || !sel.Matches(labelsOf(pv)) {
			return false
		}
	}
	return true
}

func modeOf(m *corev1.PersistentVolumeMode) corev1.PersistentVolumeMode {
	if m == nil {
		return corev1.PersistentVolumeFilesystem
	}
	return *m
}

func storageClassOf(claim *corev1.PersistentVolumeClaim) string {
	if claim.Spec.StorageClassName != nil {
		return *claim.Spec.StorageClassName
	}
	return claim.Annotations[corev1.BetaStorageClassAnnotation]
}
