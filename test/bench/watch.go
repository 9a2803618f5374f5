package bench

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
)

// bindRecorder notes when each pod is first seen bound (spec.nodeName set) and,
// for gangs, how many members are bound at every event.
type bindRecorder struct {
	want     int
	gangSize int

	mu      sync.Mutex
	boundAt map[string]time.Time
	// gangs by name; only scenarios with gangs fill it.
	gangs map[string]*gangBinds
	// partial is how many gangs have 0 < bound < size now; maxPartial is the most
	// at any event.
	partial, maxPartial int
	done                chan struct{}
}

type gangBinds struct {
	bound       int
	first, last time.Time
}

func newBindRecorder(want, gangSize int) *bindRecorder {
	return &bindRecorder{
		want: want, gangSize: gangSize,
		boundAt: make(map[string]time.Time, want),
		gangs:   map[string]*gangBinds{},
		done:    make(chan struct{}),
	}
}

// observe records one pod state at time now.
func (r *bindRecorder) observe(p *corev1.Pod, now time.Time) {
	if p.Spec.NodeName == "" {
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.boundAt[p.Name]; seen {
		return
	}
	r.boundAt[p.Name] = now
	if name := p.Annotations[AnnotationPodGroup]; r.gangSize > 0 && name != "" {
		g := r.gangs[name]
		if g == nil {
			g = &gangBinds{first: now}
			r.gangs[name] = g
		}
		g.bound++
		g.last = now
		switch g.bound {
		case 1:
			if r.gangSize > 1 {
				r.partial++
			}
		case r.gangSize:
			r.partial--
		}
		r.maxPartial = max(r.maxPartial, r.partial)
	}
	if len(r.boundAt) == r.want {
		close(r.done)
	}
}

// run lists the pods and then watches them from the list's resourceVersion until ctx
// ends, re-watching from the last version seen when the server closes the watch.
func (r *bindRecorder) run(ctx context.Context, client kubernetes.Interface, ready chan<- error) {
	relist := func() (string, error) {
		list, err := client.CoreV1().Pods(Namespace).List(ctx, metav1.ListOptions{})
		if err != nil {
			return "", fmt.Errorf("list pods: %w", err)
		}
		now := time.Now()
		for i := range list.Items {
			r.observe(&list.Items[i], now)
		}
		return list.ResourceVersion, nil
	}
	rv, err := relist()
	ready <- err
	if err != nil {
		return
	}
	for ctx.Err() == nil {
		if rv == "" {
			// The watch expired (410 Gone): binds seen by this list are timed late,
			// which only lowers the figures.
			if rv, err = relist(); err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
		}
		w, err := client.CoreV1().Pods(Namespace).Watch(ctx, metav1.ListOptions{ResourceVersion: rv, AllowWatchBookmarks: true})
		if err != nil {
			if ctx.Err() == nil {
				time.Sleep(100 * time.Millisecond)
			}
			continue
		}
		for ev := range w.ResultChan() {
			if ev.Type == watch.Error {
				rv = ""
				break
			}
			p, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			rv = p.ResourceVersion
			if ev.Type == watch.Added || ev.Type == watch.Modified {
				r.observe(p, time.Now())
			}
		}
		w.Stop()
	}
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
		if g.bound == r.gangSize {
			s.GangsComplete++
		}
		spreads = append(spreads, g.last.Sub(g.first))
	}
	if len(spreads) > 0 {
		sort.Slice(spreads, func(i, j int) bool { return spreads[i] < spreads[j] })
		s.GangMaxSpread = spreads[len(spreads)-1]
		s.GangP99Spread = spreads[(len(spreads)*99+99)/100-1]
	}
	return s
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
