package bench

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// errNoSlot: the scenario has more pods than slots.
var errNoSlot = errors.New("floor: every slot is taken")

// FloorInFlight is how many Bindings the floor has in flight at once.
const FloorInFlight = 32

// floorBinder is the API server's floor: an informer on the pods that name it as
// their scheduler hands each pending pod, as soon as it sees it, to FloorInFlight workers
// that bind it to the next node with a free slot. Nodes fill in order, slots of them
// each; it reads no node and decides nothing. On a backlog the informer's first list
// hands over every pod at once (the bare binder of a drain); under steady arrivals
// each pod as its watch event comes.
type floorBinder struct {
	client kubernetes.Interface
	nodes  int
	slots  int
	// next is the slot the next bind takes: node next/slots.
	next atomic.Int64

	mu      sync.Mutex
	cond    *sync.Cond
	queue   []string
	stopped bool
	// Errors counts Bindings the API refused (each is retried until it succeeds
	// or the pod is gone).
	errors atomic.Int64
}

// startFloor starts the floor binder on nodes × slots slots; stop ends it and
// returns how many Bindings failed.
func startFloor(ctx context.Context, client kubernetes.Interface, nodes, slots int) (stop func() int64, err error) {
	f := &floorBinder{client: client, nodes: nodes, slots: slots}
	f.cond = sync.NewCond(&f.mu)
	ctx, cancel := context.WithCancel(ctx)
	// Its own pods, bound or not, and the pending ones picked out here: a watch
	// selected by spec.nodeName uses the API server's trigger index, whose watchers
	// get a buffer of 10 events, and at 400 pods/s the API server closed it 318
	// times in one run (session 13) and the floor fell behind the arrivals. Without
	// it, a watcher's buffer grows with the API server's event history.
	selector := fields.OneTermEqualSelector("spec.schedulerName", string(Floor)).String()
	lw := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "pods", Namespace,
		func(o *metav1.ListOptions) { o.FieldSelector = selector })
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	// The bound pods stay in its store: slim, as the bind recorder keeps them.
	if err := inf.SetTransform(slimBenchPod); err != nil {
		cancel()
		return nil, err
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok && p.Spec.NodeName == "" {
			f.push(p.Name)
		}
	}}); err != nil {
		cancel()
		return nil, err
	}
	var wg sync.WaitGroup
	for range FloorInFlight {
		wg.Add(1)
		go func() {
			defer wg.Done()
			f.work(ctx)
		}()
	}
	go inf.Run(ctx.Done())
	return func() int64 {
		cancel()
		f.mu.Lock()
		f.stopped = true
		f.cond.Broadcast()
		f.mu.Unlock()
		wg.Wait()
		return f.errors.Load()
	}, nil
}

func (f *floorBinder) push(name string) {
	f.mu.Lock()
	f.queue = append(f.queue, name)
	f.mu.Unlock()
	f.cond.Signal()
}

func (f *floorBinder) pop() (string, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for len(f.queue) == 0 && !f.stopped {
		f.cond.Wait()
	}
	if f.stopped {
		return "", false
	}
	name := f.queue[0]
	f.queue = f.queue[1:]
	return name, true
}

// work binds pods until stopped. A refused Binding takes a new slot and is tried
// again, unless the pod is gone or bound.
func (f *floorBinder) work(ctx context.Context) {
	for {
		name, ok := f.pop()
		if !ok {
			return
		}
		for ctx.Err() == nil {
			err := f.bind(ctx, name)
			if err == nil || apierrors.IsNotFound(err) || apierrors.IsConflict(err) {
				break
			}
			f.errors.Add(1)
			if errors.Is(err, errNoSlot) {
				break
			}
		}
	}
}

func (f *floorBinder) bind(ctx context.Context, name string) error {
	slot := int(f.next.Add(1) - 1)
	if slot >= f.nodes*f.slots {
		return fmt.Errorf("pod %s: %w (%d nodes × %d)", name, errNoSlot, f.nodes, f.slots)
	}
	b := &corev1.Binding{
		ObjectMeta: metav1.ObjectMeta{Namespace: Namespace, Name: name},
		Target:     corev1.ObjectReference{Kind: "Node", Name: nodeName(slot / f.slots)},
	}
	return f.client.CoreV1().Pods(Namespace).Bind(ctx, b, metav1.CreateOptions{})
}
