package informers

import (
	"sync"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
)

// waiting counts the pods of this scheduler that wait for a node, straight from the
// pod informer's events (before the cache hears of them) and under its own lock, not
// the cache's: liveness asks it whether a stalled loop leaves work undone, and must
// get an answer even when the loop is stuck holding the cache.
type waiting struct {
	serves func(schedulerName string) bool
	mu     sync.Mutex
	pods   map[types.UID]struct{}
}

func (w *waiting) upsert(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.serves(p.Spec.SchedulerName) && p.Spec.NodeName == "" && p.DeletionTimestamp == nil &&
		p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
		w.pods[p.UID] = struct{}{}
	} else {
		delete(w.pods, p.UID)
	}
}

func (w *waiting) remove(p *corev1.Pod) {
	w.mu.Lock()
	defer w.mu.Unlock()
	delete(w.pods, p.UID)
}

// WaitingPods is how many pods of this scheduler wait for a node.
func (inf *Informers) WaitingPods() int {
	inf.waiting.mu.Lock()
	defer inf.waiting.mu.Unlock()
	return len(inf.waiting.pods)
}
