package bench

import (
	"context"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/gantry-dev/gantry/pkg/names"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// burstRecorder follows every pod of the benchmark namespace with an informer and
// writes down, on this process's clock, when each was first seen, bound and marked
// for deletion, and the GPUs it was given (gantry.dev/gpus). It also samples the
// training gangs twice a second for partial binding.
type burstRecorder struct {
	mu   sync.Mutex
	pods map[string]*podTrace // by UID
	// minMembers is each training cluster's gang minimum (head + minimum workers).
	minMembers int
	// partialSince is when a training cluster was first sampled partly bound with no
	// member terminating; partial counts the clusters seen so for partialFor or longer.
	partialSince map[string]time.Time
	partial      map[string]bool
	// watchFrom is when partial gangs start to count: the burst's start. Before it,
	// the training clusters are being bound for the first time, and on a machine at
	// load 60 a gang's five Binding echoes arrived up to 3 s apart.
	watchFrom time.Time
}

// countPartialFrom starts counting partial gangs at t.
func (r *burstRecorder) countPartialFrom(t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.watchFrom = t
	r.partialSince = map[string]time.Time{}
}

// partialFor is how long a gang must stay partly bound, with no member leaving, to
// count: binding a gang is one API call per pod, so a watcher sees it partly bound for
// a few milliseconds on every normal bind.
const partialFor = 2 * time.Second

type podTrace struct {
	name, node, gpus string
	// service is the RayService of an inference pod; cluster the RayCluster of a
	// training pod. Exactly one is set.
	service, cluster string
	worker           bool
	seen, bound      time.Time
	terminating      time.Time
	deleted          time.Time
	// nominated is when the pod was first seen with a nominated node (a preemptor
	// waiting for its victims), and nominatedNode that node.
	nominated     time.Time
	nominatedNode string
}

func newBurstRecorder(minMembers int) *burstRecorder {
	return &burstRecorder{pods: map[string]*podTrace{}, minMembers: minMembers,
		partialSince: map[string]time.Time{}, partial: map[string]bool{}}
}

// classify tells the benchmark's pods apart by their RayCluster (ray.io/cluster):
// training clusters are named train-NN, and KubeRay names a RayService's cluster after
// the service, llm-NN-…; the service is that prefix.
func classify(p *corev1.Pod) (service, cluster string) {
	c := p.Labels["ray.io/cluster"]
	switch {
	case strings.HasPrefix(c, servicePrefix) && len(c) >= len(servicePrefix)+2:
		return c[:len(servicePrefix)+2], ""
	case strings.HasPrefix(c, trainingPrefix):
		return "", c
	}
	return "", ""
}

func (r *burstRecorder) observe(p *corev1.Pod, deleted bool) {
	now := time.Now()
	r.mu.Lock()
	defer r.mu.Unlock()
	t := r.pods[string(p.UID)]
	if t == nil {
		service, cluster := classify(p)
		if service == "" && cluster == "" {
			return
		}
		t = &podTrace{name: p.Name, service: service, cluster: cluster, seen: now,
			worker: p.Labels["ray.io/node-type"] == "worker"}
		r.pods[string(p.UID)] = t
	}
	if p.Spec.NodeName != "" && t.bound.IsZero() {
		t.bound, t.node = now, p.Spec.NodeName
	}
	if n := p.Status.NominatedNodeName; n != "" && t.nominated.IsZero() {
		t.nominated, t.nominatedNode = now, n
	}
	if g := p.Annotations[names.AnnotationGPUs]; g != "" {
		t.gpus = g
	}
	if p.DeletionTimestamp != nil && t.terminating.IsZero() {
		t.terminating = now
	}
	if deleted && t.deleted.IsZero() {
		t.deleted = now
		if t.terminating.IsZero() {
			t.terminating = now
		}
	}
}

// run starts the informer and the partial-gang sampler; ready is closed once the
// informer has synced.
func (r *burstRecorder) run(ctx context.Context, client kubernetes.Interface, ready chan<- struct{}) {
	factory := informers.NewSharedInformerFactoryWithOptions(client, 0, informers.WithNamespace(Namespace))
	inf := factory.Core().V1().Pods().Informer()
	_, _ = inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { r.observe(obj.(*corev1.Pod), false) },
		UpdateFunc: func(_, obj any) { r.observe(obj.(*corev1.Pod), false) },
		DeleteFunc: func(obj any) {
			if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = d.Obj
			}
			if p, ok := obj.(*corev1.Pod); ok {
				r.observe(p, true)
			}
		},
	})
	factory.Start(ctx.Done())
	cache.WaitForCacheSync(ctx.Done(), inf.HasSynced)
	close(ready)
	tick := time.NewTicker(500 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			r.samplePartial(now)
		}
	}
}

// samplePartial marks training clusters that are partly bound (some members bound,
// fewer than the minimum) while none of their members is terminating.
func (r *burstRecorder) samplePartial(now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.watchFrom.IsZero() || now.Before(r.watchFrom) {
		return
	}
	bound, leaving := map[string]int{}, map[string]bool{}
	for _, t := range r.pods {
		if t.cluster == "" || !t.deleted.IsZero() {
			continue
		}
		if !t.terminating.IsZero() {
			leaving[t.cluster] = true
			continue
		}
		if !t.bound.IsZero() {
			bound[t.cluster]++
		}
	}
	for c, n := range bound {
		if n >= r.minMembers || leaving[c] {
			delete(r.partialSince, c)
			continue
		}
		since, ok := r.partialSince[c]
		if !ok {
			r.partialSince[c] = now
		} else if now.Sub(since) >= partialFor {
			r.partial[c] = true
		}
	}
	for c := range r.partialSince {
		if bound[c] == 0 {
			delete(r.partialSince, c)
		}
	}
}

// boundWorkers counts the inference services whose worker is bound, and the training
// clusters with their minimum bound.
func (r *burstRecorder) boundWorkers() (services int, training int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	svc := map[string]bool{}
	clusters := map[string]int{}
	for _, t := range r.pods {
		switch {
		case t.service != "" && t.worker && !t.bound.IsZero() && t.terminating.IsZero():
			svc[t.service] = true
		case t.cluster != "" && !t.bound.IsZero() && t.terminating.IsZero():
			clusters[t.cluster]++
		}
	}
	for _, n := range clusters {
		if n >= r.minMembers {
			training++
		}
	}
	return len(svc), training
}

// traces returns a copy of every pod's trace, sorted by name.
func (r *burstRecorder) traces() []podTrace {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]podTrace, 0, len(r.pods))
	for _, t := range r.pods {
		out = append(out, *t)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

func (r *burstRecorder) partialGangs() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.partial)
}
