package agent

import (
	"context"
	"sync"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const (
	// GPUOperatorUpgradeStateLabel is set on a node by the GPU Operator's
	// driver upgrade controller.
	GPUOperatorUpgradeStateLabel = "nvidia.com/gpu-driver-upgrade-state"
	// ReleaseNVMLLabel, set to "true" on a node, makes the agent release
	// NVML (for a driver upgrade or GPU reset done by other means).
	ReleaseNVMLLabel = DriverName + "/release-nvml"
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

// nodeLabels follows the labels of one node through an informer limited to
// that node.
type nodeLabels struct {
	mu     sync.Mutex
	labels map[string]string
}

func (n *nodeLabels) get() map[string]string {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.labels
}

func (n *nodeLabels) set(nodeName string, obj interface{}, onChange func()) {
	node, ok := obj.(*corev1.Node)
	if !ok || node.Name != nodeName {
		return
	}
	n.mu.Lock()
	n.labels = node.Labels
	n.mu.Unlock()
	onChange()
}

// watchNodeLabels runs until ctx ends; onChange is called after each change.
func watchNodeLabels(ctx context.Context, client kubernetes.Interface, nodeName string, onChange func()) *nodeLabels {
	n := &nodeLabels{}
	sel := fields.OneTermEqualSelector("metadata.name", nodeName).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return client.CoreV1().Nodes().List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return client.CoreV1().Nodes().Watch(ctx, o)
		},
	}
	// The wrapper tells the reflector whether the client can stream lists
	// (client-go's fake cannot).
	inf := cache.NewSharedIndexInformer(cache.ToListWatcherWithWatchListSemantics(lw, client), &corev1.Node{}, 0, cache.Indexers{})
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj interface{}) { n.set(nodeName, obj, onChange) },
		UpdateFunc: func(_, obj interface{}) { n.set(nodeName, obj, onChange) },
	})
	go inf.Run(ctx.Done())
	return n
}
