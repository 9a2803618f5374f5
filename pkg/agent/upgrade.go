package agent

import (
	"context"
	"fmt"
	"sync"

	"github.com/gantry-dev/gantry/pkg/names"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	// GPUOperatorUpgradeStateLabel is set on a node by the GPU Operator's
	// driver upgrade controller.
	GPUOperatorUpgradeStateLabel = "nvidia.com/gpu-driver-upgrade-state"
	// ReleaseNVMLLabel, set to "true" on a node, makes the agent release
	// NVML (for a driver upgrade or GPU reset done by other means).
	ReleaseNVMLLabel = names.DriverName + "/release-nvml"
)

// upgradeReleaseStates are the GPU Operator upgrade states in which the old
// driver is being taken away: its pods are evicted, the node drained, the
// driver pod restarted. NVML is held again from validation-required on,
// when the new driver is loaded.
var upgradeReleaseStates = map[string]bool{
	"pod-deletion-required":     true,
	"drain-required":            true,
	"node-maintenance-required": true,
	"post-maintenance-required": true,
	"pod-restart-required":      true,
}

// ReleaseRequested reports whether the node's labels ask the agent to
// release NVML, and why.
func ReleaseRequested(labels map[string]string) (bool, string) {
	if labels[ReleaseNVMLLabel] == "true" {
		return true, "node label " + ReleaseNVMLLabel + "=true"
	}
	if s := labels[GPUOperatorUpgradeStateLabel]; upgradeReleaseStates[s] {
		return true, "GPU Operator driver upgrade: " + GPUOperatorUpgradeStateLabel + "=" + s
	}
	return false, ""
}

// nodeLabels holds the node's labels as last read. The agent reads its
// Node with a GET each tick rather than an informer: it may get its node
// but not list or watch nodes (least privilege, see the chart's RBAC).
type nodeLabels struct {
	mu     sync.Mutex
	labels map[string]string
}

func (n *nodeLabels) get() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.labels
}

// refresh reads the node's labels; on error the last ones are kept.
func (n *nodeLabels) refresh(ctx context.Context, client kubernetes.Interface, nodeName string) error {
	node, err := client.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("read node %s labels: %w", nodeName, err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	n.labels = node.Labels
	return nil
}
