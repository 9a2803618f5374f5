package invariant

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	resourcev1 "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	schedv1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
)

// Config says which cluster to watch and how strictly.
type Config struct {
	// RestConfig reaches the API server; it needs to list and watch pods, nodes,
	// events, ResourceClaims, ResourceSlices, Queues, PodGroups and RayClusters.
	RestConfig *rest.Config
	Rules
	// Interval is how often the checks run (default 200ms).
	Interval time.Duration
	// Logf, when set, is told of each violation as it is found.
	Logf func(format string, args ...any)
}

var (
	queueGVR      = gvr.Queue
	podGroupGVR   = gvr.PodGroup
	rayClusterGVR = gvr.RayCluster
)

// Checker watches a cluster through informers and runs a Tracker over it.
type Checker struct {
	cfg     Config
	mu      sync.Mutex
	tracker *Tracker
	listers struct {
		pods, nodes, claims, slices cache.GenericLister
		queues, podGroups, rays     cache.GenericLister
	}
	cancel context.CancelFunc
	done   chan struct{}
}

// Watch starts a Checker for the length of test t and, at cleanup, fails t with every
// violation it saw.
func Watch(t testing.TB, cfg Config) *Checker {
	t.Helper()
	if cfg.Logf == nil {
		cfg.Logf = t.Logf
	}
	c, err := Start(context.Background(), cfg)
	if err != nil {
		t.Fatalf("invariant checker: %v", err)
	}
	t.Cleanup(func() {
		c.Stop()
		for _, v := range c.Violations() {
			t.Errorf("invariant broken: %s", v)
		}
	})
	return c
}

// Start starts the informers, waits for them to sync (RayClusters excepted: their CRD
// may be installed later) and checks every Interval until Stop.
func Start(ctx context.Context, cfg Config) (*Checker, error) {
	if cfg.Interval <= 0 {
		cfg.Interval = 200 * time.Millisecond
	}
	client, err := kubernetes.NewForConfig(cfg.RestConfig)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg.RestConfig)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	c := &Checker{cfg: cfg, tracker: NewTracker(cfg.Rules), cancel: cancel, done: make(chan struct{})}
	typed := informers.NewSharedInformerFactory(client, 0)
	pods, nodes := typed.Core().V1().Pods().Informer(), typed.Core().V1().Nodes().Informer()
	claims, slices := typed.Resource().V1().ResourceClaims().Informer(), typed.Resource().V1().ResourceSlices().Informer()
	c.listers.pods = cache.NewGenericLister(pods.GetIndexer(), corev1.Resource("pods"))
	c.listers.nodes = cache.NewGenericLister(nodes.GetIndexer(), corev1.Resource("nodes"))
	c.listers.claims = cache.NewGenericLister(claims.GetIndexer(), resourcev1.Resource("resourceclaims"))
	c.listers.slices = cache.NewGenericLister(slices.GetIndexer(), resourcev1.Resource("resourceslices"))

	events := informers.NewSharedInformerFactoryWithOptions(client, 0,
		informers.WithTweakListOptions(func(o *metav1.ListOptions) { o.FieldSelector = "reason=Preempted" }))
	handler := func(obj any) {
		if e, ok := obj.(*corev1.Event); ok {
			c.mu.Lock()
			fresh := c.tracker.ObserveEvent(e, time.Now())
			c.mu.Unlock()
			c.log(fresh)
		}
	}
	if _, err := events.Core().V1().Events().Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: handler, UpdateFunc: func(_, obj any) { handler(obj) },
	}); err != nil {
		cancel()
		return nil, err
	}

	dynf := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	c.listers.queues = dynf.ForResource(queueGVR).Lister()
	c.listers.podGroups = dynf.ForResource(podGroupGVR).Lister()
	rays := dynf.ForResource(rayClusterGVR)
	c.listers.rays = rays.Lister()

	typed.Start(ctx.Done())
	events.Start(ctx.Done())
	dynf.Start(ctx.Done())
	syncCtx, syncCancel := context.WithTimeout(ctx, 60*time.Second)
	defer syncCancel()
	synced := []cache.InformerSynced{pods.HasSynced, nodes.HasSynced, claims.HasSynced, slices.HasSynced,
		events.Core().V1().Events().Informer().HasSynced,
		dynf.ForResource(queueGVR).Informer().HasSynced, dynf.ForResource(podGroupGVR).Informer().HasSynced}
	if !cache.WaitForCacheSync(syncCtx.Done(), synced...) {
		cancel()
		return nil, fmt.Errorf("informers did not sync")
	}
	go func() {
		defer close(c.done)
		wait.UntilWithContext(ctx, func(context.Context) { c.check() }, cfg.Interval)
	}()
	return c, nil
}

// Stop ends the informers and the checks, after one last check.
func (c *Checker) Stop() {
	if c.cancel == nil {
		return
	}
	c.cancel()
	<-c.done
	c.check()
	c.cancel = nil
}

// Violations returns every violation found so far.
func (c *Checker) Violations() []Violation {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.tracker.Violations()
}

// Err returns the first violation as an error, nil when there is none.
func (c *Checker) Err() error {
	if vs := c.Violations(); len(vs) > 0 {
		return fmt.Errorf("%d invariant violations; first: %s", len(vs), vs[0])
	}
	return nil
}

// WaitSettled waits until the cluster is at rest (Tracker.Settled) and returns nil, or
// returns the last reason it is not when timeout passes. It records nothing: the
// caller decides whether not settling is a violation.
func (c *Checker) WaitSettled(ctx context.Context, timeout time.Duration) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, c.cfg.Interval, timeout, true, func(context.Context) (bool, error) {
		s := c.state()
		c.mu.Lock()
		last = c.tracker.Settled(s)
		c.mu.Unlock()
		return last == nil, nil
	})
	if err != nil && last != nil {
		return last
	}
	return err
}

// Record adds a violation found by the caller (a round that did not settle).
func (c *Checker) Record(v Violation) {
	c.mu.Lock()
	fresh := c.tracker.report([]Violation{v})
	c.mu.Unlock()
	c.log(fresh)
}

// Snapshot returns the current view of the cluster.
func (c *Checker) Snapshot() *State { return c.state() }

func (c *Checker) check() {
	s := c.state()
	c.mu.Lock()
	fresh := c.tracker.Observe(s)
	c.mu.Unlock()
	c.log(fresh)
}

func (c *Checker) log(vs []Violation) {
	if c.cfg.Logf == nil {
		return
	}
	for _, v := range vs {
		c.cfg.Logf("invariant: %s", v)
	}
}

func (c *Checker) state() *State {
	s := &State{Now: time.Now()}
	s.Pods = typedList[*corev1.Pod](c.listers.pods)
	s.Nodes = typedList[*corev1.Node](c.listers.nodes)
	s.Claims = typedList[*resourcev1.ResourceClaim](c.listers.claims)
	s.Slices = typedList[*resourcev1.ResourceSlice](c.listers.slices)
	s.Queues = fromUnstructured[schedv1.Queue](c.listers.queues)
	s.PodGroups = fromUnstructured[schedv1.PodGroup](c.listers.podGroups)
	s.RayClusters = fromUnstructured[rayv1.RayCluster](c.listers.rays)
	return s
}

func typedList[T runtime.Object](l cache.GenericLister) []T {
	objs, _ := l.List(labels.Everything())
	out := make([]T, 0, len(objs))
	for _, o := range objs {
		if t, ok := o.(T); ok {
			out = append(out, t)
		}
	}
	return out
}

func fromUnstructured[T any](l cache.GenericLister) []*T {
	objs, _ := l.List(labels.Everything())
	out := make([]*T, 0, len(objs))
	for _, o := range objs {
		u, ok := o.(*unstructured.Unstructured)
		if !ok {
			continue
		}
		t := new(T)
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, t); err == nil {
			out = append(out, t)
		}
	}
	return out
}
