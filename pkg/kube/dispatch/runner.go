// Package dispatch is the scheduler's loop and its I/O: it runs a cycle over the
// cache (cache.Prepare, then cache.Commit), and carries out what was committed: the
// Bindings (binder), the evictions (evictor), nominations, and pods' pending reasons
// and Events (statusWriter). It decides nothing itself: the core decides, the cache
// records, dispatch talks to the API server and tells the cache what the API said.
//
// It must not read the cache's state other than through its methods, and must not
// import the informers or the reporters.
package dispatch

import (
	"context"
	"fmt"
	"io"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/events"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/kube/metrics"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// Options tune the loop that runs cycles and carries out their plans.
type Options struct {
	// BindWorkers is how many Binding calls are in flight at once.
	BindWorkers int
	// EvictionQPS and EvictionBurst bound the rate of evictions.
	EvictionQPS   float32
	EvictionBurst int
	// Resync is the period of the backstop cycle that runs with no event.
	Resync time.Duration
	// Debounce is how long a cycle waits after an event that came within Debounce
	// of the last cycle, so that a burst of creations is scheduled in a few cycles
	// rather than one cycle per pod. An event after a quiet spell is not delayed.
	Debounce time.Duration
	// BindBackoff and MaxBindBackoff bound the exponential backoff of a gang whose
	// binds failed; Pause is the first pause of all cycles when the API server is
	// unreachable (doubling to MaxBindBackoff).
	BindBackoff, MaxBindBackoff, Pause time.Duration
	// Cycled, when set, is told when each cycle has been committed (liveness).
	Cycled func(time.Time)
	// Events writes the Scheduled Events of binds (events.go); nil writes none.
	Events *Events
	// CycleTarget is how long a cycle that finds more to place than it should place
	// at once aims to take (budget.go); it places no more gangs once it has run half
	// of it. 0 means 40 ms.
	CycleTarget time.Duration
	// Trace, when set, gets one line per cycle (cycleTrace, cyclestats.go),
	// buffered and flushed about once a second and when Run returns.
	Trace io.Writer
}

func (o *Options) defaults() {
	if o.BindWorkers <= 0 {
		// 32, as the floor's binder (test/bench/floor.go): on 2 cores the API
		// server binds no faster with 64 in flight, and drained 5,000 pods at a
		// median 0.96 of the floor with 32 against 0.85 with 64, six runs each
		// (session 16, docs/benchmarks.md).
		o.BindWorkers = 32
	}
	if o.EvictionQPS <= 0 {
		o.EvictionQPS = 10
	}
	if o.EvictionBurst <= 0 {
		// A burst of 20 preemptors, each evicting a head and 4 workers, at once: at
		// 20, a burst of 8 such preemptions waited 2 s for the limiter (issue 19).
		o.EvictionBurst = 100
	}
	if o.Resync <= 0 {
		o.Resync = time.Second
	}
	if o.Debounce <= 0 {
		o.Debounce = 5 * time.Millisecond
	}
	if o.BindBackoff <= 0 {
		o.BindBackoff = time.Second
	}
	if o.MaxBindBackoff <= 0 {
		o.MaxBindBackoff = time.Minute
	}
	if o.Pause <= 0 {
		o.Pause = 500 * time.Millisecond
	}
	if o.CycleTarget <= 0 {
		o.CycleTarget = 40 * time.Millisecond
	}
}

// Runner runs scheduling cycles over the cache and carries out the plans: binds,
// evictions, nominations and pending reasons.
type Runner struct {
	cache   *cache.Cache
	sched   *scheduler.Scheduler
	client  kubernetes.Interface
	binder  *binder
	evictor *evictor
	status  *statusWriter
	metrics *metrics.Metrics
	opts    Options

	mu         sync.Mutex
	nominated  map[model.PodID]nomination
	lastReason map[model.GangID]reasonKey
	pending    map[model.GangID]scheduler.Pending
	// warned are the pods told of a share conflict (cache.ShareConflict), by UID:
	// told once, not every cycle they are nominated.
	warned map[string]bool
	// bindFailures counts each gang's failed bind rounds since its last success,
	// for its backoff.
	bindFailures map[model.GangID]int
	// pausedUntil stops cycles while the API server is unreachable; pauses counts
	// the pauses in a row.
	pausedUntil time.Time
	pauses      int
	// binds are the committed batches not yet handed to a goroutine, in plan order
	// (queue.go); pumping says whether a goroutine is handing them out.
	binds   []queuedBatch
	pumping bool
	// batchSlots bounds the batches being bound at once (BindWorkers), so that a
	// backlog of 100,000 pods is 100,000 entries of a queue, not 100,000 goroutines.
	batchSlots *semaphore.Weighted
	// mixPods is how many pods the placer had learned from when its mix was last
	// published as a metric, at mixAt.
	mixPods uint64
	mixAt   time.Time
	// cycles counts the cycles run, for sweepSometimes.
	cycles uint64
	// budget, queuedPods, more and ready bound the work of a cycle (budget.go).
	budget     int
	minBudget  int
	queuedPods int
	more       bool
	ready      chan struct{}
	// rt reads the Go runtime's metrics around a cycle for its log line
	// (cyclestats.go); only the cycle loop uses it.
	rt *runtimeSampler
	// trace writes each cycle's line when Options.Trace is set (cyclestats.go).
	trace *cycleTrace
}

// New wires a runner.
func New(c *cache.Cache, sched *scheduler.Scheduler, client kubernetes.Interface, recorder events.EventRecorder, m *metrics.Metrics, opts Options) *Runner {
	opts.defaults()
	return &Runner{
		cache:        c,
		sched:        sched,
		client:       client,
		binder:       newBinder(client, opts.BindWorkers),
		evictor:      newEvictor(client, recorder, opts.EvictionQPS, opts.EvictionBurst),
		status:       newStatusWriter(client, recorder, 8),
		metrics:      m,
		opts:         opts,
		nominated:    map[model.PodID]nomination{},
		lastReason:   map[model.GangID]reasonKey{},
		pending:      map[model.GangID]scheduler.Pending{},
		warned:       map[string]bool{},
		bindFailures: map[model.GangID]int{},
		batchSlots:   semaphore.NewWeighted(int64(opts.BindWorkers)),
		budget:       firstBudget,
		minBudget:    minBudget,
		ready:        make(chan struct{}, 1),
		rt:           newRuntimeSampler(),
		trace:        newCycleTrace(opts.Trace),
	}
}

// Run schedules until ctx ends: a cycle after every burst of changes, and one every
// Resync as a backstop; none while the API server is unreachable.
func (r *Runner) Run(ctx context.Context) {
	tick := time.NewTicker(r.opts.Resync)
	defer tick.Stop()
	defer r.trace.flush()
	var lastCycle time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-r.cache.Changed():
			// A change after a quiet spell is acted on at once: a pod that arrives
			// alone waits for no one. A change within Debounce of the last cycle
			// waits until Debounce has passed since it, so that a burst is a cycle
			// every Debounce, not one per pod, and a pod that arrives 4 ms after
			// the last cycle waits 1 ms, not 5.
			if wait := r.opts.Debounce - time.Since(lastCycle); wait > 0 {
				time.Sleep(wait)
			}
		case <-r.ready:
			// The last cycle left gangs for this one, and its binds run low.
		case <-tick.C:
		}
		if wait := r.paused(); wait > 0 {
			select {
			case <-ctx.Done():
				return
			case <-time.After(wait):
			}
		}
		r.Cycle(ctx)
		lastCycle = time.Now()
	}
}

// mixShapes is how many of the learned mix's most frequent shapes are published.
const mixShapes = 10

// publishMix publishes the placer's learned workload mix (its most frequent shapes)
// when it has learned from more pods since the last time, at most once a Resync:
// under steady arrivals every cycle learns from a pod, and sorting and naming the
// shapes each time was 2 % of the scheduler's CPU at 100 pods/s for a gauge that
// is scraped every 15 s or so. The Resync cycle publishes what the last cycles
// learned.
func (r *Runner) publishMix() {
	st := r.sched.Placer.Settings()
	if r.metrics == nil || st.Arrivals == r.mixPods || time.Since(r.mixAt) < r.opts.Resync {
		return
	}
	r.mixPods, r.mixAt = st.Arrivals, time.Now()
	mix := r.sched.Placer.Mix()
	mix = mix[:min(mixShapes, len(mix))]
	shapes, shares := make([]string, len(mix)), make([]float64, len(mix))
	for i, s := range mix {
		shapes[i], shares[i] = placement.DescribeShape(s), s.Weight
	}
	r.metrics.SetWorkloadMix(shapes, shares, st.Arrivals)
}

// Cycle runs one scheduling cycle and starts carrying out its plan.
func (r *Runner) Cycle(ctx context.Context) *scheduler.Plan {
	// The runtime's metrics around the cycle are read only for its log line; the
	// thread is not pinned, so that the benchmarks (which log at CycleLogLevel) run
	// the cycle as users do.
	logged := klog.V(CycleLogLevel).Enabled()
	if logged {
		r.rt.start()
	}
	start := time.Now()
	inFlight := r.binder.inFlight.Load()
	budget := r.cycleBudget()
	// Past half of CycleTarget the cycle places no more gangs, and leaves the other
	// half to commit them (budget.go): the budget is sized from the cycles before,
	// and one that waits for a CPU behind the API server takes many times as long
	// for the same pods.
	bound := scheduler.Bound{Pods: budget, Stop: func() bool { return time.Since(start) > r.opts.CycleTarget/2 }}
	prep := r.cache.PrepareOrdered(ctx, start, func(snap *model.Snapshot, order *scheduler.Order, skip func(model.GangID) bool) *scheduler.Plan {
		return r.sched.ScheduleOrdered(snap, order, skip, bound)
	})
	if prep.AskedDRA {
		r.metrics.ObserveDRA(prep.DRA)
	}
	d := r.cache.Commit(prep.Plan, start)
	took := time.Since(start)
	// The binds start first: what follows is bookkeeping that no bind waits for. The
	// cycle's log line alone (CycleLogLevel, as the benchmarks run) took about 0.1 ms
	// a cycle, before the binds, at 100 pods/s (docs/benchmarks.md, session 13).
	r.queueBinds(ctx, d.Batches)
	r.metrics.ObserveCycle(took)
	r.metrics.ObserveCyclePhases(prep.LockWait+d.LockWait, prep.Ready, prep.Schedule, d.Held)
	if r.opts.Cycled != nil {
		r.opts.Cycled(time.Now())
	}
	r.publishMix()
	r.resize(prep.Plan, took)
	if logged || r.trace != nil {
		c := cycleReport{start: start, took: took, inFlight: inFlight, budget: budget, prep: prep, d: d}
		if logged {
			c.rt = r.rt.stop()
			logCycle(c)
		}
		r.trace.record(c)
	}
	// Every preemption decision at the default level: who, which victims, what they
	// free against what was needed, and why these victims (issue 19).
	for _, p := range prep.Plan.Preemptions {
		klog.InfoS("Preemption", p.KeysAndValues()...)
	}

	r.deferred(prep.Plan.Deferred > 0)
	r.evict(ctx, d.Evictions, prep.Plan.Preemptions)
	for _, wd := range d.Withdrawn {
		klog.V(2).InfoS("Nomination withdrawn", "gang", wd.Gang, "reason", wd.Reason)
		for _, id := range wd.Pods {
			r.withdrawNomination(ctx, id)
		}
	}
	for _, nom := range d.Nominations {
		for _, pl := range nom.Placements {
			r.nominate(ctx, nom.Gang, pl)
		}
	}
	r.mu.Lock()
	for _, g := range d.Gone {
		delete(r.pending, g)
		delete(r.lastReason, g)
		delete(r.bindFailures, g)
	}
	for _, b := range d.Batches {
		delete(r.pending, b.Gang)
	}
	for _, pd := range d.Pending {
		r.pending[pd.Gang] = pd.Pending
	}
	r.mu.Unlock()
	for _, pd := range d.Pending {
		r.explainPending(ctx, pd)
	}
	r.warnShareConflicts(d.ShareConflicts)
	r.sweepSometimes()
	for _, pd := range d.Incomplete {
		klog.InfoS("Gang incomplete for too long", "gang", pd.Gang, "reason", pd.Reason)
		for _, p := range pd.Pods {
			if !p.Bound() {
				r.status.pending(ctx, p, names.ConditionGangIncomplete, names.EventGangIncomplete, pd.Reason, nil)
			} else {
				r.status.event(p, corev1.EventTypeWarning, names.EventGangIncomplete, pd.Reason)
			}
		}
	}
	return prep.Plan
}

// Pending returns why a gang was left pending by the last cycle, if it was.
func (r *Runner) Pending(g model.GangID) (scheduler.Pending, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pd, ok := r.pending[g]
	return pd, ok
}

func (r *Runner) nominate(ctx context.Context, g model.GangID, pl placement.Placement) {
	r.mu.Lock()
	same := r.nominated[pl.Pod].node == pl.Node
	r.nominated[pl.Pod] = nomination{node: pl.Node, gang: g}
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
}

// withdrawNomination clears a pod's status.nominatedNodeName.
func (r *Runner) withdrawNomination(ctx context.Context, id model.PodID) {
	r.mu.Lock()
	delete(r.nominated, id)
	r.mu.Unlock()
	ns, name := splitID(id)
	go func() {
		if err := patchNominatedNode(ctx, r.client, ns, name, ""); err != nil {
			klog.V(2).InfoS("Withdraw nomination", "pod", id, "err", err)
		}
	}()
}

// warnShareConflicts emits a warning Event, once per pod, on pods whose GPU share and
// engine's gpu_memory_utilization contradict: the pod is booked for the larger, and
// the user should make the two agree (issue 19). The Event goes with the pod's first
// nomination or bind; a pod is forgotten once bound, as it is not placed again.
func (r *Runner) warnShareConflicts(conflicts []cache.ShareConflict) {
	for _, sc := range conflicts {
		key := sc.Pod.UID
		if key == "" {
			key = string(sc.Pod.ID)
		}
		r.mu.Lock()
		seen := r.warned[key]
		r.warned[key] = true
		r.mu.Unlock()
		if !seen {
			r.status.event(sc.Pod, corev1.EventTypeWarning, names.EventGPUShareConflict, sc.Message)
		}
	}
}

// explainPending writes why a gang waits on its pods (PodScheduled=False and an
// Event), only when the reason or the pods changed. A write that fails (the API
// server or etcd down) or is dropped is tried again next cycle: before, the reason
// was remembered as written, and the pod stayed without one for good (chaos
// restart-etcd finding); a member created later (a Ray worker re-created) got none
// while the reason stayed the same.
func (r *Runner) explainPending(ctx context.Context, pd cache.PendingGang) {
	key := pendingKey(pd)
	r.mu.Lock()
	same := r.lastReason[pd.Gang] == key
	r.lastReason[pd.Gang] = key
	r.mu.Unlock()
	if same {
		return
	}
	retry := func() {
		r.mu.Lock()
		if r.lastReason[pd.Gang] == key {
			delete(r.lastReason, pd.Gang)
		}
		r.mu.Unlock()
	}
	r.metrics.ObservePending(string(pd.Kind))
	if klog.V(3).Enabled() {
		ids := make([]model.PodID, len(pd.Pods))
		for i, p := range pd.Pods {
			ids[i] = p.ID
		}
		klog.V(3).InfoS("Write pending reason", "gang", pd.Gang, "kind", pd.Kind, "pods", ids, "reason", pd.Reason)
	}
	msg := pd.Reason
	if len(pd.Pods) > 1 {
		msg = fmt.Sprintf("gang %s: %s", pd.Gang, pd.Reason)
	}
	for _, p := range pd.Pods {
		r.status.pending(ctx, p, corev1.PodReasonUnschedulable, names.EventFailedScheduling, msg, retry)
	}
}

// evict carries out a cycle's evictions, one group per preemptor, each all or none
// (evictor.evictFor), in the background, and counts each decision carried out
// (decisions are the cycle's Plan.Preemptions). Victims not evicted run on: the
// cache counts them as running again.
func (r *Runner) evict(ctx context.Context, victims []cache.Victim, decisions []scheduler.Preemption) {
	byPreemptor := map[model.GangID][]cache.Victim{}
	var order []model.GangID
	for _, v := range victims {
		if _, ok := byPreemptor[v.Preemptor]; !ok {
			order = append(order, v.Preemptor)
		}
		byPreemptor[v.Preemptor] = append(byPreemptor[v.Preemptor], v)
	}
	for _, g := range order {
		vs := byPreemptor[g]
		go func() {
			needed := func() bool { return r.cache.NeedsVictims(g) }
			if vs[0].Kind == cache.KindBelowMinimum {
				// The gang's own members, evicted so that it restarts whole: needed
				// whatever happens to the rest of the cluster.
				needed = func() bool { return true }
				klog.InfoS("Gang below its minimum; evicting the rest", "gang", g, "pods", len(vs), "reason", vs[0].Reason)
			}
			evicted, kept, err := r.evictor.evictFor(ctx, vs, needed)
			for _, v := range kept {
				r.cache.UnmarkTerminating(v.Pod.ID)
			}
			if err != nil {
				klog.InfoS("Evictions not issued", "preemptor", g, "victims", len(kept), "reason", err)
			}
			r.observeEvictions(evicted, len(kept) == 0, decisions)
		}()
	}
}

// observeEvictions counts the victims evicted for one preemptor and what they freed:
// the decision's own figures when all its victims were evicted (FreedBytes is the
// memory measured free, whole GPUs and shares alike), else what the evicted victims
// held. Evictions of no decision (a gang's own members below its minimum) count the
// memory they held.
func (r *Runner) observeEvictions(evicted []cache.Victim, all bool, decisions []scheduler.Preemption) {
	if len(evicted) == 0 {
		return
	}
	var whole, shared int
	var freed int64
	found := false
	for _, p := range decisions {
		if p.Preemptor == evicted[0].Preemptor && p.Kind == evicted[0].Kind {
			whole, shared, freed, found = whole+p.WholeGPUs, shared+p.SharedVictims, freed+p.FreedBytes, true
		}
	}
	if !found {
		for _, v := range evicted {
			r.metrics.ObserveEviction(v.Kind, v.GPUMemory)
		}
		return
	}
	for _, v := range evicted {
		r.metrics.ObserveEviction(v.Kind, 0)
	}
	if !all {
		whole, shared, freed = 0, 0, 0
		for _, v := range evicted {
			freed += v.GPUMemory
			held := false
			for _, b := range v.Pod.GPUs {
				if b.Whole {
					whole++
				} else {
					held = true
				}
			}
			if held {
				shared++
			}
		}
	}
	r.metrics.ObservePreemption(evicted[0].Kind, whole, shared, freed)
}

// paused is how long cycles must still wait for the API server to be reachable.
func (r *Runner) paused() time.Duration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return time.Until(r.pausedUntil)
}

// pause stops cycles for a while after an error that says the API server cannot be
// reached, doubling while it stays unreachable, so that a failing API server is not
// sent a burst of retries.
func (r *Runner) pause() {
	r.mu.Lock()
	defer r.mu.Unlock()
	d := min(r.opts.Pause<<min(r.pauses, 16), r.opts.MaxBindBackoff)
	r.pauses++
	r.pausedUntil = time.Now().Add(d)
	klog.InfoS("API server unreachable; pausing scheduling", "for", d)
}

// backoff holds a gang back after a failed bind round: BindBackoff, doubling with
// every round that fails in a row, up to MaxBindBackoff.
func (r *Runner) backoff(g model.GangID) {
	r.mu.Lock()
	n := r.bindFailures[g]
	r.bindFailures[g] = n + 1
	r.mu.Unlock()
	r.cache.Backoff(g, time.Now().Add(min(r.opts.BindBackoff<<min(n, 16), r.opts.MaxBindBackoff)))
}

// bindBatch binds one gang and tells the cache what the API said of each pod.
func (r *Runner) bindBatch(ctx context.Context, b cache.Batch) {
	start := time.Now()
	results, err := r.binder.bindGang(ctx, b.Reqs, b.Min)
	nBound, nFailed, down := 0, 0, false
	created := make([]int64, 0, len(results))
	for _, res := range results {
		created = append(created, res.req.Pod.CreatedAt)
		switch res.outcome {
		case bound:
			nBound++
		case failed:
			nFailed++
			r.cache.Forget(res.req.Pod.ID)
		case elsewhere:
			// Bound by someone else (or by us, to another node, before a restart):
			// the API's word replaces the assumption at once.
			nFailed++
			r.cache.UpsertPod(res.pod)
		case uncertain:
			go r.resolve(ctx, res.req)
		case rolledBack:
			nFailed++
		}
		if res.err != nil && unreachable(res.err) {
			down = true
		}
	}
	r.metrics.ObserveBinds(nBound, nFailed, time.Since(start), created)
	r.opts.Events.bound(b, results)
	r.mu.Lock()
	delete(r.lastReason, b.Gang)
	for _, res := range results {
		if res.outcome == bound {
			delete(r.nominated, res.req.Pod.ID)
			delete(r.warned, res.req.Pod.UID)
		}
	}
	if err == nil {
		delete(r.bindFailures, b.Gang)
		r.pauses = 0
	}
	r.mu.Unlock()
	if err == nil {
		return
	}
	klog.ErrorS(err, "Bind gang", "gang", b.Gang)
	r.backoff(b.Gang)
	if down {
		r.pause()
	}
	for _, res := range results {
		if res.outcome == failed {
			r.status.pending(ctx, res.req.Pod, names.EventBindFailed, names.EventFailedScheduling, err.Error(), nil)
		}
	}
}

// resolve asks the API, until it answers, where a pod whose Binding had no answer
// is. Until then the pod stays assumed on its node: its GPUs are given to no one.
func (r *Runner) resolve(ctx context.Context, req cache.BindRequest) {
	delay := r.opts.BindBackoff
	for {
		res := r.binder.settle(ctx, req, nil)
		switch res.outcome {
		case bound:
			r.opts.Events.scheduled(req)
			return // the informer confirms it
		case failed:
			r.cache.Forget(req.Pod.ID)
			return
		case elsewhere:
			r.cache.UpsertPod(res.pod)
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(delay):
		}
		delay = min(2*delay, r.opts.MaxBindBackoff)
	}
}
