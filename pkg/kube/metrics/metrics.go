// Package metrics registers the scheduler's gantry_scheduler_* and gantry_queue_*
// series and records into them. Callers pass plain counts, durations and names: it
// must not import the cache, the dispatcher or the core, so that it cannot reach into
// their state. A nil *Metrics records nothing.
package metrics

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Metrics are the scheduler's gantry_scheduler_* series.
type Metrics struct {
	cycleSeconds      prometheus.Histogram
	cyclePhaseSeconds *prometheus.HistogramVec
	// phases are cyclePhaseSeconds' series, looked up once rather than by label
	// every cycle: lock_wait, ready, schedule, commit.
	phases             [4]prometheus.Observer
	draSeconds         prometheus.Histogram
	podBindSeconds     prometheus.Histogram
	gangBindSeconds    prometheus.Histogram
	podsScheduled      prometheus.Counter
	gangsScheduled     prometheus.Counter
	bindFailures       prometheus.Counter
	eventsDropped      prometheus.Counter
	pendingByReason    *prometheus.CounterVec
	preemptions        *prometheus.CounterVec
	preemptedGPUMemory *prometheus.CounterVec
	preemptionsByKind  *prometheus.CounterVec
	preemptedGPUs      *prometheus.CounterVec
	preemptedShared    *prometheus.CounterVec
	queueFairShare     *prometheus.GaugeVec
	queueAllocated     *prometheus.GaugeVec
	queueLimit         *prometheus.GaugeVec
	queueQuota         *prometheus.GaugeVec
	workloadMix        *prometheus.GaugeVec
	mixArrivals        prometheus.Gauge
}

// New registers the scheduler's metrics with reg. pendingKinds are the kinds of
// reasons a gang waits, whose series exist from the start.
func New(reg prometheus.Registerer, pendingKinds []string) *Metrics {
	latency := prometheus.ExponentialBuckets(0.0005, 2, 16)
	m := &Metrics{
		cycleSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gantry_scheduler_cycle_duration_seconds", Help: "Time to compute one scheduling cycle's plan.", Buckets: latency}),
		cyclePhaseSeconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "gantry_scheduler_cycle_phase_duration_seconds", Help: "Time of one part of a scheduling cycle: lock_wait (waiting for the cache's lock), ready (readying the snapshot), schedule (the core), commit (recording the plan).", Buckets: latency}, []string{"phase"}),
		draSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gantry_scheduler_dra_allocator_duration_seconds", Help: "Time a cycle spent asking the structured DRA allocator about claims pkg/placement does not place itself (part of the cycle's time).", Buckets: latency}),
		podBindSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gantry_scheduler_pod_scheduling_duration_seconds", Help: "Time from a pod's creation to its successful binding.", Buckets: prometheus.ExponentialBuckets(0.01, 2, 16)}),
		gangBindSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "gantry_scheduler_gang_binding_duration_seconds", Help: "Time to bind every member of a gang.", Buckets: latency}),
		podsScheduled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gantry_scheduler_pods_scheduled_total", Help: "Pods bound."}),
		gangsScheduled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gantry_scheduler_gangs_scheduled_total", Help: "Gangs whose minimum was bound."}),
		bindFailures: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gantry_scheduler_bind_failures_total", Help: "Pods whose binding failed."}),
		eventsDropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "gantry_scheduler_events_dropped_total", Help: "Scheduled Events dropped because too many were waiting for the Event client's rate limit."}),
		pendingByReason: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_scheduler_unschedulable_gangs_total", Help: "Times a gang was left pending, by reason kind."}, []string{"reason"}),
		preemptions: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_scheduler_preemption_victims_total", Help: "Pods evicted to make room, by kind (preempt or reclaim)."}, []string{"kind"}),
		preemptedGPUMemory: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_scheduler_preempted_gpu_memory_bytes_total", Help: "GPU memory freed by evictions, whole GPUs and shares alike (measured by the node agent where it reports), by kind."}, []string{"kind"}),
		preemptionsByKind: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_scheduler_preemptions_total", Help: "Preemption decisions carried out (one per preemptor and cycle, its evictions all issued), by kind."}, []string{"kind"}),
		preemptedGPUs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_scheduler_preempted_whole_gpus_total", Help: "Whole GPUs held by evicted pods, by kind."}, []string{"kind"}),
		preemptedShared: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "gantry_scheduler_preempted_shared_victims_total", Help: "Evicted pods that held GPU memory shares, by kind."}, []string{"kind"}),
		queueFairShare: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gantry_queue_fair_share", Help: "A queue's fair share of a resource (GPUs, millicores, bytes)."}, []string{"queue", "resource"}),
		queueAllocated: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gantry_queue_allocated", Help: "What a queue's pods hold of a resource."}, []string{"queue", "resource"}),
		queueLimit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gantry_queue_limit", Help: "A queue's limit on a resource (-1 for none)."}, []string{"queue", "resource"}),
		queueQuota: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "gantry_queue_quota", Help: "A queue's guaranteed quota of a resource (-1 for unlimited)."}, []string{"queue", "resource"}),
		workloadMix: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: WorkloadMixMetric, Help: "Share of the workload mix the placer scores fragmentation against, learned from the pods it has seen (decayed), for its most frequent shapes."}, []string{"shape"}),
		mixArrivals: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "gantry_scheduler_workload_mix_pods", Help: "Pods the workload mix was learned from since the scheduler started."}),
	}
	// Series with labels exist from the start, at zero, so that dashboards and alerts
	// see "none yet" rather than "no data".
	for _, kind := range []string{"preempt", "reclaim"} {
		m.preemptions.WithLabelValues(kind)
		m.preemptedGPUMemory.WithLabelValues(kind)
		m.preemptionsByKind.WithLabelValues(kind)
		m.preemptedGPUs.WithLabelValues(kind)
		m.preemptedShared.WithLabelValues(kind)
	}
	for _, k := range pendingKinds {
		m.pendingByReason.WithLabelValues(k)
	}
	for i, phase := range []string{"lock_wait", "ready", "schedule", "commit"} {
		m.phases[i] = m.cyclePhaseSeconds.WithLabelValues(phase)
	}
	reg.MustRegister(m.cycleSeconds, m.cyclePhaseSeconds, m.draSeconds, m.podBindSeconds, m.gangBindSeconds, m.podsScheduled, m.gangsScheduled,
		m.bindFailures, m.eventsDropped, m.pendingByReason, m.preemptions, m.preemptedGPUMemory,
		m.preemptionsByKind, m.preemptedGPUs, m.preemptedShared,
		m.queueFairShare, m.queueAllocated, m.queueLimit, m.queueQuota, m.workloadMix, m.mixArrivals)
	return m
}

// ObserveDRA records the time a cycle spent in the structured allocator.
func (m *Metrics) ObserveDRA(d time.Duration) {
	if m == nil {
		return
	}
	m.draSeconds.Observe(d.Seconds())
}

// ObserveCycle records one cycle's time.
func (m *Metrics) ObserveCycle(d time.Duration) {
	if m == nil {
		return
	}
	m.cycleSeconds.Observe(d.Seconds())
}

// ObserveCyclePhases records where one cycle's time went: waiting for the cache's
// lock, readying the snapshot, the core, and the commit.
func (m *Metrics) ObserveCyclePhases(lockWait, ready, schedule, commit time.Duration) {
	if m == nil {
		return
	}
	m.phases[0].Observe(lockWait.Seconds())
	m.phases[1].Observe(ready.Seconds())
	m.phases[2].Observe(schedule.Seconds())
	m.phases[3].Observe(commit.Seconds())
}

// ObserveBinds records one gang's binding: how many pods were bound and failed, the
// time it took, and when each pod was created (Unix seconds, 0 when unknown).
func (m *Metrics) ObserveBinds(bound, failed int, d time.Duration, createdAt []int64) {
	if m == nil {
		return
	}
	m.podsScheduled.Add(float64(bound))
	m.bindFailures.Add(float64(failed))
	if failed == 0 && bound > 0 {
		m.gangsScheduled.Inc()
		m.gangBindSeconds.Observe(d.Seconds())
	}
	now := time.Now().Unix()
	for _, t := range createdAt {
		if t > 0 {
			m.podBindSeconds.Observe(float64(now - t))
		}
	}
}

// EventDropped counts a Scheduled Event dropped because the Event queue was full.
func (m *Metrics) EventDropped() {
	if m == nil {
		return
	}
	m.eventsDropped.Inc()
}

// ObserveEviction records one victim evicted, by kind ("preempt", "reclaim", or
// "gang-below-minimum" for a gang's own members), and the GPU memory it freed, if any.
// Victims of a preemption decision pass 0 memory: ObservePreemption adds what the
// decision freed.
func (m *Metrics) ObserveEviction(kind string, gpuMemoryBytes int64) {
	if m == nil {
		return
	}
	m.preemptions.WithLabelValues(kind).Inc()
	if gpuMemoryBytes > 0 {
		m.preemptedGPUMemory.WithLabelValues(kind).Add(float64(gpuMemoryBytes))
	}
}

// ObservePreemption records one preemption decision carried out: the whole GPUs its
// victims held, how many victims held GPU shares, and the GPU memory freed.
func (m *Metrics) ObservePreemption(kind string, wholeGPUs, sharedVictims int, freedBytes int64) {
	if m == nil {
		return
	}
	m.preemptionsByKind.WithLabelValues(kind).Inc()
	m.preemptedGPUs.WithLabelValues(kind).Add(float64(wholeGPUs))
	m.preemptedShared.WithLabelValues(kind).Add(float64(sharedVictims))
	m.preemptedGPUMemory.WithLabelValues(kind).Add(float64(freedBytes))
}

// ObservePending records a gang left pending, by the kind of its reason.
func (m *Metrics) ObservePending(kind string) {
	if m == nil {
		return
	}
	m.pendingByReason.WithLabelValues(kind).Inc()
}

// SetQueue records a queue's figures for one resource.
func (m *Metrics) SetQueue(queue, resource string, allocated, fairShare, limit, quota float64) {
	if m == nil {
		return
	}
	m.queueAllocated.WithLabelValues(queue, resource).Set(allocated)
	m.queueFairShare.WithLabelValues(queue, resource).Set(fairShare)
	m.queueLimit.WithLabelValues(queue, resource).Set(limit)
	m.queueQuota.WithLabelValues(queue, resource).Set(quota)
}

// WorkloadMixMetric is the gauge of the learned workload mix, one series per shape;
// `gantry explain` reads it from the scheduler's metrics endpoint.
const WorkloadMixMetric = "gantry_scheduler_workload_mix_share"

// SetWorkloadMix replaces the workload mix's series: shares[i] of the mix is the
// shape described by shapes[i] (shapes described alike are summed); pods is how many
// pods it was learned from.
func (m *Metrics) SetWorkloadMix(shapes []string, shares []float64, pods uint64) {
	if m == nil {
		return
	}
	m.workloadMix.Reset()
	for i, s := range shapes {
		m.workloadMix.WithLabelValues(s).Add(shares[i])
	}
	m.mixArrivals.Set(float64(pods))
}
