// Package volumebind writes a placement's volume decisions: it binds available
// volumes to WaitForFirstConsumer claims and marks claims to provision with the
// chosen node, as kube-scheduler's volume binder does before it binds the pod.
package volumebind

import (
	"context"
	"encoding/json"
	"fmt"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/podspec"
)

// annBoundByController marks a volume the scheduler pre-bound, as kube-scheduler's
// volume binder does, so that the PV controller completes the binding.
const annBoundByController = "pv.kubernetes.io/bound-by-controller"

// VolumeAction is what placing a pod on a node asks of one of its
// WaitForFirstConsumer claims: bind an available volume to it, or provision one on
// the node (the volume.kubernetes.io/selected-node annotation).
type VolumeAction struct {
	Namespace, Claim string
	// Volume is the available volume to bind; empty to provision on Node.
	Volume string
	Node   string
}

// Plan lists the actions for pod's delayed claims at pl, on node n, the node the
// core chose (its checks admitted n, so every claim has a way). The volumes are
// those the core chose (pl.Volumes), which no other pod of its cycle took; a
// placement without them gets VolumesFor's choice on n.
func Plan(pod *model.Pod, pl placement.Placement, n *model.Node) ([]VolumeAction, error) {
	c := pod.Constraints
	if c == nil || c.Volumes == nil {
		return nil, nil
	}
	if len(c.Volumes.Delayed) == 0 {
		return nil, nil
	}
	volumes := pl.Volumes
	if len(volumes) != len(c.Volumes.Delayed) {
		var ok bool
		if volumes, ok = placement.VolumesFor(n, c.Volumes.Delayed, nil); !ok {
			return nil, fmt.Errorf("the claims of pod %s cannot all get a volume on node %s", pod.ID, n.Name)
		}
	}
	var out []VolumeAction
	for i := range c.Volumes.Delayed {
		out = append(out, VolumeAction{Namespace: pod.Namespace(), Claim: c.Volumes.Delayed[i].Claim, Volume: volumes[i], Node: n.Name})
	}
	return out, nil
}

// Apply carries the actions out before the pod is bound: an available
// volume gets the claim as its claimRef; a claim to provision gets the
// selected-node annotation, which the external provisioner acts on.
func Apply(ctx context.Context, client kubernetes.Interface, actions []VolumeAction) error {
	for _, a := range actions {
		if a.Volume == "" {
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"annotations": map[string]string{podspec.AnnotationSelectedNode: a.Node}}})
			if _, err := client.CoreV1().PersistentVolumeClaims(a.Namespace).Patch(ctx, a.Claim, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
				return fmt.Errorf("select node %s for claim %s/%s: %w", a.Node, a.Namespace, a.Claim, err)
			}
			continue
		}
		if err := bindVolume(ctx, client, a); err != nil {
			return err
		}
	}
	return nil
}

func bindVolume(ctx context.Context, client kubernetes.Interface, a VolumeAction) error {
	claim, err := client.CoreV1().PersistentVolumeClaims(a.Namespace).Get(ctx, a.Claim, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("bind volume %s to claim %s/%s: %w", a.Volume, a.Namespace, a.Claim, err)
	}
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, a.Volume, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("bind volume %s to claim %s/%s: %w", a.Volume, a.Namespace, a.Claim, err)
	}
	if pv.Spec.ClaimRef != nil && pv.Spec.ClaimRef.UID != claim.UID {
		return fmt.Errorf("bind volume %s to claim %s/%s: the volume was taken by %s/%s", a.Volume, a.Namespace, a.Claim, pv.Spec.ClaimRef.Namespace, pv.Spec.ClaimRef.Name)
	}
	pv.Spec.ClaimRef = &corev1.ObjectReference{
		Kind: "PersistentVolumeClaim", APIVersion: "v1",
		Namespace: claim.Namespace, Name: claim.Name, UID: claim.UID, ResourceVersion: claim.ResourceVersion,
	}
	if pv.Annotations == nil {
		pv.Annotations = map[string]string{}
	}
	pv.Annotations[annBoundByController] = "yes"
	if _, err := client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("bind volume %s to claim %s/%s: %w", a.Volume, a.Namespace, a.Claim, err)
	}
	return nil
}

// Undo takes back what Apply wrote for a pod that was not bound after all (its
// Binding failed, or its gang was rolled back), where nothing has acted on it yet,
// so that the claim is free to go with the pod's next placement:
//   - the selected-node annotation is removed from a claim still unbound whose
//     annotation still names the node;
//   - a volume still Available whose claimRef still names the claim is freed.
//
// Each write is an update at the resource version read, so a controller that acted
// in between wins. What was acted on stays, and is safe: the claim is bound, or being
// provisioned for the node, and the next cycle reads it so (a bound claim's volume
// affinity, or podspec's pre-bound volume and selected node), as kube-scheduler
// would. Actions Apply never reached find nothing to undo. It returns the first error.
func Undo(ctx context.Context, client kubernetes.Interface, actions []VolumeAction) error {
	var first error
	for _, a := range actions {
		var err error
		if a.Volume == "" {
			err = unselectNode(ctx, client, a)
		} else {
			err = unbindVolume(ctx, client, a)
		}
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

func unselectNode(ctx context.Context, client kubernetes.Interface, a VolumeAction) error {
	claim, err := client.CoreV1().PersistentVolumeClaims(a.Namespace).Get(ctx, a.Claim, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("undo selected node of claim %s/%s: %w", a.Namespace, a.Claim, err)
	}
	if claim.Spec.VolumeName != "" || claim.Annotations[podspec.AnnotationSelectedNode] != a.Node {
		return nil
	}
	delete(claim.Annotations, podspec.AnnotationSelectedNode)
	if _, err := client.CoreV1().PersistentVolumeClaims(a.Namespace).Update(ctx, claim, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("undo selected node of claim %s/%s: %w", a.Namespace, a.Claim, err)
	}
	return nil
}

func unbindVolume(ctx context.Context, client kubernetes.Interface, a VolumeAction) error {
	pv, err := client.CoreV1().PersistentVolumes().Get(ctx, a.Volume, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("undo binding of volume %s to claim %s/%s: %w", a.Volume, a.Namespace, a.Claim, err)
	}
	ref := pv.Spec.ClaimRef
	if ref == nil || ref.Namespace != a.Namespace || ref.Name != a.Claim || pv.Annotations[annBoundByController] != "yes" ||
		(pv.Status.Phase != corev1.VolumeAvailable && pv.Status.Phase != "") {
		return nil
	}
	pv.Spec.ClaimRef = nil
	delete(pv.Annotations, annBoundByController)
	if _, err := client.CoreV1().PersistentVolumes().Update(ctx, pv, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) {
		return fmt.Errorf("undo binding of volume %s to claim %s/%s: %w", a.Volume, a.Namespace, a.Claim, err)
	}
	return nil
}
