package kube

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/sets"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/record"
	"k8s.io/dynamic-resource-allocation/structured"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// RunnerOptions tunes the loop that runs cycles and carries out their plans.
type RunnerOptions struct {
	// BindWorkers is how many Binding calls are in flight at once.
	BindWorkers int
	// EvictionQPS and EvictionBurst bound the rate of evictions.
	EvictionQPS   float32
	EvictionBurst int
	// Resync is the period of the backstop cycle that runs with no event.
	Resync time.Duration
	// Debounce is how long a cycle waits after the first event, so that a burst of
	// creations is scheduled in one cycle rather than one cycle per pod.
	Debounce time.Duration
}

func (o *RunnerOptions) defaults() {
	if o.BindWorkers <= 0 {
		o.BindWorkers = 64
	}
	if o.EvictionQPS <= 0 {
		o.EvictionQPS = 10
	}
	if o.EvictionBurst <= 0 {
		o.EvictionBurst = 20
	}
	if o.Resync <= 0 {
		o.Resync = time.Second
	}
	if o.Debounce <= 0 {
		o.Debounce = 5 * time.Millisecond
	}
}

// retryAfter is how long a gang that failed is left alone when nothing it depends on
// changed: a backstop against a change the versions do not capture.
const retryAfter = 10 * time.Second

type failure struct {
	versions [2]uint64
	at       time.Time
}

// Runner runs scheduling cycles over the cache and carries out the plans: binds,
// evictions, nominations and pending reasons.
type Runner struct {
	cache    *Cache
	sched    *scheduler.Scheduler
	client   kubernetes.Interface
	recorder record.EventRecorder
	binder   *binder
	evictor  *evictor
	status   *statusWriter
	metrics  *Metrics
	opts     RunnerOptions

	// failed records, for each gang left pending, the cache's versions then and
	// when; it is not tried again until a version moves or retryAfter passes.
	failed map[model.GangID]failure

	mu         sync.Mutex
	nominated  map[model.PodID]string
	lastReason map[model.GangID]string
	pending    map[model.GangID]scheduler.Pending
}

// NewRunner wires a runner.
func NewRunner(cache *Cache, sched *scheduler.Scheduler, client kubernetes.Interface, recorder record.EventRecorder, metrics *Metrics, opts RunnerOptions) *Runner {
	opts.defaults()
	return &Runner{
		cache:      cache,
		sched:      sched,
		client:     client,
		recorder:   recorder,
		binder:     newBinder(client, opts.BindWorkers),
		evictor:    newEvictor(client, recorder, opts.EvictionQPS, opts.EvictionBurst),
		status:     newStatusWriter(client, recorder, 8),
		metrics:    metrics,
		opts:       opts,
		nominated:  map[model.PodID]string{},
		lastReason: map[model.GangID]string{},
		pending:    map[model.GangID]scheduler.Pending{},
		failed:     map[model.GangID]failure{},
	}
}

// Run schedules until ctx ends: a cycle after every burst of changes, and one every
// Resync as a backstop.
func (r *Runner) Run(ctx context.Context) {
	tick := time.NewTicker(r.opts.Resync)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.cache.Changed():
			time.Sleep(r.opts.Debounce)
		case <-tick.C:
		}
		r.Cycle(ctx)
	}
}

// Cycle runs one scheduling cycle and starts carrying out its plan.
func (r *Runner) Cycle(ctx context.Context) *scheduler.Plan {
	start := time.Now()
	c := r.cache
	c.mu.Lock()
	c.snap.Now = start.Unix()
	skip := func(g model.GangID) bool {
		f, ok := r.failed[g]
		return ok && f.versions == c.versions(g) && start.Sub(f.at) < retryAfter
	}
	if draStart := time.Now(); c.chooseDevices(ctx, skip) {
		r.metrics.observeDRA(time.Since(draStart))
	}
	c.markBadPods()
	plan := r.sched.ScheduleSkipping(c.snap, skip)
	for _, pd := range plan.Pending {
		r.failed[pd.Gang] = failure{versions: c.versions(pd.Gang), at: start}
	}
	for _, gb := range plan.Binds {
		delete(r.failed, gb.Gang)
	}
	var gone []model.GangID
	for g := range r.failed {
		if _, ok := c.snap.Gangs[g]; !ok {
			delete(r.failed, g)
			gone = append(gone, g)
		}
	}
	type gangBatch struct {
		gang    model.GangID
		min     int
		reqs    []bindRequest
		elastic bool
	}
	batches := make([]gangBatch, 0, len(plan.Binds))
	taken := sets.New[structured.DeviceID]()
	deferred := false
plans:
	for _, gb := range plan.Binds {
		b := gangBatch{gang: gb.Gang, elastic: gb.Elastic}
		if g := c.snap.Gangs[gb.Gang]; g != nil && !gb.Elastic {
			b.min = len(gb.Placements)
		}
		for _, pl := range gb.Placements {
			p := c.snap.Pods[pl.Pod]
			if p == nil {
				continue
			}
			allocs, viaAllocator, ok := c.takeAllocations(pl.Pod, pl.Node, taken)
			if !ok {
				// Another gang of this plan took a device of another driver that
				// this one needs: try it again next cycle, whole.
				deferred = true
				continue plans
			}
			b.reqs = append(b.reqs, bindRequest{pod: p, placement: pl, claims: c.podClaims[pl.Pod], structured: viaAllocator, allocations: allocs})
		}
		batches = append(batches, b)
	}
	if deferred {
		c.poke()
	}
	// Assume before unlocking, so that the next cycle sees the space as taken.
	for _, b := range batches {
		for _, req := range b.reqs {
			c.assumeLocked(req.pod.ID, req.placement, start.Unix())
			if req.structured {
				c.markInflight(c.apiPods[req.pod.ID], req.claims, req.allocations)
			}
		}
	}
	victims := make([]*model.Pod, 0, len(plan.Evictions))
	for _, ev := range plan.Evictions {
		if p := c.snap.Pods[ev.Pod]; p != nil && !p.Terminating {
			victims = append(victims, p)
			c.markTerminatingLocked(ev.Pod)
		} else {
			victims = append(victims, nil)
		}
	}
	pendingPods := map[model.GangID][]*model.Pod{}
	for _, pd := range plan.Pending {
		for _, id := range pd.Pods {
			if p := c.snap.Pods[id]; p != nil {
				pendingPods[pd.Gang] = append(pendingPods[pd.Gang], p)
			}
		}
	}
	c.mu.Unlock()
	r.metrics.observeCycle(time.Since(start), plan)

	for _, b := range batches {
		b := b
		go func() {
			bindStart := time.Now()
			minimum := b.min
			if b.elastic {
				minimum = 0
			}
			bound, failed, err := r.binder.bindGang(ctx, b.reqs, minimum)
			for _, req := range failed {
				c.Forget(req.pod.ID)
			}
			r.metrics.observeBinds(b.gang, len(bound), len(failed), time.Since(bindStart), b.reqs)
			if err != nil {
				klog.ErrorS(err, "Bind gang", "gang", b.gang)
				for _, req := range failed {
					r.status.pending(ctx, req.pod, "BindFailed", err.Error())
				}
			}
			r.mu.Lock()
			delete(r.lastReason, b.gang)
			for _, req := range bound {
				delete(r.nominated, req.pod.ID)
			}
			r.mu.Unlock()
		}()
	}
	for i, ev := range plan.Evictions {
		v := victims[i]
		if v == nil {
			continue
		}
		ev := ev
		go func() {
			if err := r.evictor.evict(ctx, v, ev.Preemptor, ev.Kind, ev.Reason); err != nil {
				// Refused (a PodDisruptionBudget, say): the victim runs on, and a later
				// cycle may choose again.
				klog.ErrorS(err, "Evict", "pod", ev.Pod)
				c.unmarkTerminating(ev.Pod)
				return
			}
			r.metrics.observeEviction(ev, v)
		}()
	}
	for _, nom := range plan.Nominations {
		for _, pl := range nom.Placements {
			r.nominate(ctx, pl, nom.Gang)
		}
	}
	r.mu.Lock()
	for _, g := range gone {
		delete(r.pending, g)
		delete(r.lastReason, g)
	}
	for _, gb := range plan.Binds {
		delete(r.pending, gb.Gang)
	}
	for _, pd := range plan.Pending {
		r.pending[pd.Gang] = pd
	}
	r.mu.Unlock()
	for _, pd := range plan.Pending {
		r.explainPending(ctx, pd, pendingPods[pd.Gang])
	}
	return plan
}

// Pending returns why a gang was left pending by the last cycle, if it was.
func (r *Runner) Pending(g model.GangID) (scheduler.Pending, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pd, ok := r.pending[g]
	return pd, ok
}

func (r *Runner) nominate(ctx context.Context, pl placement.Placement, g model.GangID) {
	r.mu.Lock()
	same := r.nominated[pl.Pod] == pl.Node
	r.nominated[pl.Pod] = pl.Node
	r.mu.Unlock()
	if same {
		return
	}
	ns, name := splitID(pl.Pod)
	go func() {
		if err := patchNominatedNode(ctx, r.client, ns, name, pl.Node); err != nil {
			klog.V(2).InfoS("Nominate", "pod", pl.Pod, "node", pl.Node, "err", err)
		}
	}()
	_ = g
}

// explainPending writes why a gang waits on its pods (PodScheduled=False and an
// Event), only when the reason changed.
func (r *Runner) explainPending(ctx context.Context, pd scheduler.Pending, pods []*model.Pod) {
	r.mu.Lock()
	same := r.lastReason[pd.Gang] == pd.Reason
	r.lastReason[pd.Gang] = pd.Reason
	r.mu.Unlock()
	if same {
		return
	}
	r.metrics.observePending(pd)
	msg := pd.Reason
	if len(pods) > 1 {
		msg = fmt.Sprintf("gang %s: %s", pd.Gang, pd.Reason)
	}
	for _, p := range pods {
		r.status.pending(ctx, p, corev1.PodReasonUnschedulable, msg)
	}
}

// assumeLocked is Assume for a caller that holds mu.
func (c *Cache) assumeLocked(id model.PodID, pl placement.Placement, now int64) {
	old := c.snap.Pods[id]
	if old == nil || old.Bound() {
		return
	}
	p := *old
	p.Node, p.GPUs, p.StartedAt, p.NominatedNode = pl.Node, pl.GPUs, now, ""
	c.snap.Pods[id] = &p
	c.assumed[id] = true
	c.book(&p)
	c.refreshPending(p.Gang)
}

// unmarkTerminating undoes markTerminatingLocked for a victim whose eviction was
// refused.
func (c *Cache) unmarkTerminating(id model.PodID) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.snap.Pods[id]; p != nil && p.Terminating {
		if api := c.apiPods[id]; api != nil && api.DeletionTimestamp != nil {
			return
		}
		q := *p
		q.Terminating = false
		c.snap.Pods[id] = &q
		c.freed()
	}
}

func (c *Cache) markTerminatingLocked(id model.PodID) {
	if p := c.snap.Pods[id]; p != nil && !p.Terminating {
		q := *p
		q.Terminating = true
		c.snap.Pods[id] = &q
	}
}

// markBadPods holds back the gangs of pods whose spec cannot be read, with the
// reason as the gang's pending message. Caller holds mu.
func (c *Cache) markBadPods() {
	for id, msg := range c.podErrors {
		gid := c.gangOf[id]
		if g := c.snap.Gangs[gid]; g != nil && g.Missing != msg {
			cp := *g
			cp.Missing = fmt.Sprintf("pod %s: %s", id, msg)
			c.snap.Gangs[gid] = &cp
		}
	}
}

// statusWriter patches PodScheduled conditions and records Events off the cycle's
// path, through a small pool of workers.
type statusWriter struct {
	client   kubernetes.Interface
	recorder record.EventRecorder
	jobs     chan func()
}

func newStatusWriter(client kubernetes.Interface, recorder record.EventRecorder, workers int) *statusWriter {
	s := &statusWriter{client: client, recorder: recorder, jobs: make(chan func(), 4096)}
	for i := 0; i < workers; i++ {
		go func() {
			for j := range s.jobs {
				j()
			}
		}()
	}
	return s
}

func (s *statusWriter) pending(ctx context.Context, p *model.Pod, reason, message string) {
	job := func() {
		ns, name := splitID(p.ID)
		cond := corev1.PodCondition{
			Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: reason, Message: message,
			LastTransitionTime: metav1.Now(),
		}
		if err := patchPodCondition(ctx, s.client, ns, name, cond); err != nil {
			klog.V(2).InfoS("Write pending reason", "pod", p.ID, "err", err)
		}
		ref := &corev1.ObjectReference{Kind: "Pod", APIVersion: "v1", Namespace: ns, Name: name, UID: types.UID(p.UID)}
		s.recorder.Event(ref, corev1.EventTypeWarning, "FailedScheduling", message)
	}
	select {
	case s.jobs <- job:
	default:
		// Status is advisory; never block a cycle on it.
	}
}
