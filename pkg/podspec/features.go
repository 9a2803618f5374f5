package podspec

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/version"
	ndf "k8s.io/component-helpers/nodedeclaredfeatures"

	"github.com/gantry-dev/gantry/pkg/model"
)

// targetVersion is the Kubernetes version whose node features pods are checked
// against, as kube-scheduler checks them against its own.
var targetVersion = version.MustParse("1.37.0")

// addNodeFeatures infers, with the same library kube-scheduler's NodeDeclaredFeatures
// plugin uses, the node-declared features the pod's spec needs.
func addNodeFeatures(c *model.Constraints, pod *corev1.Pod) {
	reqs, err := ndf.DefaultFramework.InferForPodScheduling(&ndf.PodInfo{Spec: &pod.Spec}, targetVersion)
	if err != nil {
		refuse(c, model.RefusalInvalid, "spec", "the node features it needs cannot be inferred (%v)", err)
		return
	}
	if reqs.IsEmpty() {
		return
	}
	names, err := ndf.DefaultFramework.Unmap(reqs)
	if err != nil {
		refuse(c, model.RefusalInvalid, "spec", "the node features it needs cannot be named (%v)", err)
		return
	}
	c.NodeFeatures = names
}

// NodeDeclaredFeatures is a node's status.declaredFeatures, for
// model.Node.DeclaredFeatures.
func NodeDeclaredFeatures(n *corev1.Node) []string { return n.Status.DeclaredFeatures }
