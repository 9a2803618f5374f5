package bench

import (
	"context"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// bindRecorder notes when each pod is first seen bound (spec.nodeName set) and,
// for gangs, how many members are bound at every event. For steady arrivals it also
// holds when each pod's creation was sent, for create → bound latencies.
type bindRecorder struct {
	want int
	// gangSize is the size of gangs whose pods do not carry min-member.
	gangSize int

	mu      sync.Mutex
	boundAt map[string]time.Time
	// createdAt is when the harness sent each pod's creation (steady arrivals only).
	createdAt map[string]time.Time
	// gangs by name; only scenarios with gangs fill it.
	gangs map[string]*gangBinds
	// partial is how many gangs have 0 < bound < size now; maxPartial is the most
	// at any event.
	partial, maxPartial int
	done                chan struct{}
}

type gangBinds struct {
	bound, size int
	first, last time.Time
}

func newBindRecorder(want, gangSize int) *bindRecorder {
	return &bindRecorder{
		want: want, gangSize: gangSize,
		boundAt:   make(map[string]time.Time, want),
		createdAt: map[string]time.Time{},
		gangs:     map[string]*gangBinds{},
		done:      make(chan struct{}),
	}
}

// created records that pod name's creation was sent at t.
func (r *bindRecorder) created(name string, t time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.createdAt[name] = t
}

// warmupPrefix names the pod that steady arrivals wait on before the clock starts;
// the recorder ignores it.
const warmupPrefix = "warmup-"

// observe records one pod state at time now.
func (r *bindRecorder) observe(p *corev1.Pod, now time.Time) {
	if p.Spec.NodeName == "" || strings.HasPrefix(p.Name, warmupPrefix) {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.boundAt[p.Name]; seen {
		return
	}
	r.boundAt[p.Name] = now
	if name := p.Annotations[AnnotationPodGroup]; name != "" {
		g := r.gangs[name]
		if g == nil {
			g = &gangBinds{first: now, size: r.gangSize}
			if n, err := strconv.Atoi(p.Annotations[AnnotationMinMember]); err == nil {
				g.size = n
			}
			r.gangs[name] = g
		}
		g.bound++
		g.last = now
		switch g.bound {
		case 1:
			if g.size > 1 {
				r.partial++
			}
		case g.size:
			r.partial--
		}
		r.maxPartial = max(r.maxPartial, r.partial)
	}
	if len(r.boundAt) == r.want {
		close(r.done)
	}
}

// run follows the benchmark's pods with an informer (its list, then its watch; a
// watch that expires is followed by a re-list, whose binds are timed late, which
// only lowers the figures) until ctx ends. ready gets nil once the first list is in.
// slimBenchPod is what the harness's informers keep of a pod: its name, gang
// annotations and node, not 100,000 whole pods.
func slimBenchPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, Annotations: p.Annotations, ResourceVersion: p.ResourceVersion},
		Spec:       corev1.PodSpec{NodeName: p.Spec.NodeName},
	}, nil
}

func (r *bindRecorder) run(ctx context.Context, client kubernetes.Interface, ready chan<- error) {
	lw := cache.NewFilteredListWatchFromClient(client.CoreV1().RESTClient(), "pods", Namespace, func(*metav1.ListOptions) {})
	inf := cache.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{})
	_ = inf.SetTransform(slimBenchPod)
	see := func(obj any) {
		if p, ok := obj.(*corev1.Pod); ok {
			r.observe(p, time.Now())
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: see, UpdateFunc: func(_, obj any) { see(obj) },
	}); err != nil {
		ready <- err
		return
	}
	go inf.Run(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		ready <- fmt.Errorf("pod informer did not sync: %w", context.Cause(ctx))
		return
	}
	ready <- nil
	<-ctx.Done()
}

// bindStats summarises what the recorder saw relative to the scheduler's start.
type bindStats struct {
	Bound     int
	FirstBind time.Duration
	LastBind  time.Duration
	// Gang figures: the largest and 99th-percentile first-to-last-bind spread over
	// gangs, the most gangs partly bound at once, and those partly bound at the end.
	GangMaxSpread   time.Duration
	GangP99Spread   time.Duration
	MaxPartialGangs int
	PartialGangsEnd int
	GangsComplete   int
	// Latencies are create → bound, sorted, of the pods whose creation the harness
	// timed (steady arrivals); Arrival is the first to the last creation sent.
	Latencies []time.Duration
	Arrival   time.Duration
}

func (r *bindRecorder) stats(start time.Time) bindStats {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := bindStats{Bound: len(r.boundAt), MaxPartialGangs: r.maxPartial, PartialGangsEnd: r.partial}
	first, last := time.Time{}, time.Time{}
	for _, t := range r.boundAt {
		if first.IsZero() || t.Before(first) {
			first = t
		}
		if t.After(last) {
			last = t
		}
	}
	if s.Bound > 0 {
		s.FirstBind, s.LastBind = first.Sub(start), last.Sub(start)
	}
	var spreads []time.Duration
	for _, g := range r.gangs {
		if g.bound == g.size {
			s.GangsComplete++
		}
		spreads = append(spreads, g.last.Sub(g.first))
	}
	if len(spreads) > 0 {
		sort.Slice(spreads, func(i, j int) bool { return spreads[i] < spreads[j] })
		s.GangMaxSpread = spreads[len(spreads)-1]
		s.GangP99Spread = spreads[(len(spreads)*99+99)/100-1]
	}
	var firstCreate, lastCreate time.Time
	for name, c := range r.createdAt {
		if firstCreate.IsZero() || c.Before(firstCreate) {
			firstCreate = c
		}
		lastCreate = maxTime(lastCreate, c)
		if b, ok := r.boundAt[name]; ok {
			s.Latencies = append(s.Latencies, max(0, b.Sub(c)))
		}
	}
	s.Arrival = lastCreate.Sub(firstCreate)
	slices.Sort(s.Latencies)
	return s
}

// writeTimeline writes, for each pod whose creation the harness timed (steady
// arrivals), when its creation was sent and when it was seen bound, in milliseconds
// from the first creation, sorted by creation: whether the slow pods of a run came
// together (a stall of the machine, the API server or the scheduler) or one by one.
// It writes nothing for a run without timed creations.
func (r *bindRecorder) writeTimeline(path string) error {
	r.mu.Lock()
	type row struct {
		sent, bound time.Time
		name        string
	}
	rows := make([]row, 0, len(r.createdAt))
	for name, c := range r.createdAt {
		rows = append(rows, row{sent: c, bound: r.boundAt[name], name: name})
	}
	r.mu.Unlock()
	if len(rows) == 0 {
		return nil
	}
	slices.SortFunc(rows, func(a, b row) int { return a.sent.Compare(b.sent) })
	var b strings.Builder
	b.WriteString("pod\tsent_ms\tbound_ms\tlatency_ms\n")
	ms := func(d time.Duration) string { return strconv.FormatFloat(float64(d)/1e6, 'f', 1, 64) }
	for _, x := range rows {
		bound, lat := "", ""
		if !x.bound.IsZero() {
			bound, lat = ms(x.bound.Sub(rows[0].sent)), ms(x.bound.Sub(x.sent))
		}
		fmt.Fprintf(&b, "%s\t%s\t%s\t%s\n", x.name, ms(x.sent.Sub(rows[0].sent)), bound, lat)
	}
	return os.WriteFile(path, []byte(b.String()), 0o644)
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// percentile is the q-quantile (0 < q ≤ 1) of sorted values, nearest rank.
func percentile[T any](sorted []T, q float64) T {
	var zero T
	if len(sorted) == 0 {
		return zero
	}
	i := int(math.Ceil(q*float64(len(sorted)))) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}

// podsPerSecond is bound pods over the first-to-last-bind window.
func (s bindStats) podsPerSecond() float64 {
	window := (s.LastBind - s.FirstBind).Seconds()
	if s.Bound < 2 || window <= 0 {
		return 0
	}
	return float64(s.Bound) / window
}

// wallPodsPerSecond is bound pods over the time from the scheduler's start to the
// last bind (informer sync included).
func (s bindStats) wallPodsPerSecond() float64 {
	if s.Bound == 0 || s.LastBind <= 0 {
		return 0
	}
	return float64(s.Bound) / s.LastBind.Seconds()
}
