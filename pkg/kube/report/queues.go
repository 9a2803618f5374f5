// Package report writes what the scheduler knows back to the API for people: Queue
// status (allocated, requested, fair share, conditions) with the queue metrics, and
// PodGroup status (phase, counts, the Scheduled condition with the typed reason a
// gang waits). It reads the cache through its methods and the last cycle's pending
// reasons through a function; it must not import the dispatcher.
package report

import (
	"context"
	"encoding/json"
	"sort"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/klog/v2"

	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/kube/cache"
	"github.com/gantry-dev/gantry/pkg/kube/metrics"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/names/gvr"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// StatusReporter writes Queue status (allocated, requested, fair share, conditions)
// and the queue metrics, on a period and only when something changed.
type StatusReporter struct {
	cache   *cache.Cache
	sched   *scheduler.Scheduler
	dyn     dynamic.Interface
	metrics *metrics.Metrics
	last    map[string]string
	// podGroups lists PodGroups by "namespace/name"; pending says why the last
	// cycle left a gang pending.
	podGroups func() map[string]*schedulingv1alpha1.PodGroup
	pending   func(model.GangID) (scheduler.Pending, bool)
}

// New returns a reporter of Queue status, and of PodGroup status when podGroups and
// pending are given.
func New(c *cache.Cache, s *scheduler.Scheduler, dyn dynamic.Interface, m *metrics.Metrics,
	podGroups func() map[string]*schedulingv1alpha1.PodGroup, pending func(model.GangID) (scheduler.Pending, bool)) *StatusReporter {
	return &StatusReporter{cache: c, sched: s, dyn: dyn, metrics: m, last: map[string]string{}, podGroups: podGroups, pending: pending}
}

// Run reports every period until ctx ends.
func (r *StatusReporter) Run(ctx context.Context, period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.Report(ctx)
		}
	}
}

type queueStatus struct {
	Allocated  amounts            `json:"allocated"`
	Requested  amounts            `json:"requested"`
	FairShare  amounts            `json:"fairShare"`
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

type amounts struct {
	GPU       float64            `json:"gpu"`
	CPU       float64            `json:"cpu"`
	Memory    float64            `json:"memory"`
	GPUModels map[string]float64 `json:"gpuModels,omitempty"`
}

// Report computes the shares once and writes what changed.
func (r *StatusReporter) Report(ctx context.Context) {
	// The cache's kept charges, not r.sched.Shares over every pod under the cache's
	// lock, which made the next cycle wait (issue 21).
	shares, queues, treeErr := r.cache.Shares()
	sort.Strings(queues)
	for _, name := range queues {
		st := queueStatus{}
		valid := metav1.Condition{Type: names.ConditionQueueValid, Status: metav1.ConditionTrue, Reason: names.ReasonQueueValid, Message: "the queue is part of a valid tree"}
		var qs *fairshare.QueueShare
		if shares != nil {
			qs = shares.Queue(name)
		}
		if qs == nil {
			msg := "the queue is not part of a valid tree"
			if ve, ok := treeErr.(*fairshare.ValidationError); ok {
				for _, p := range ve.About(name) {
					msg = p.Message
				}
			}
			valid = metav1.Condition{Type: names.ConditionQueueValid, Status: metav1.ConditionFalse, Reason: "Invalid", Message: msg}
		} else {
			st.Allocated, st.Requested, st.FairShare = collect(qs, r.metrics, name)
		}
		st.Conditions = []metav1.Condition{valid}
		r.write(ctx, name, st)
	}
	r.reportPodGroups(ctx)
}

func collect(qs *fairshare.QueueShare, m *metrics.Metrics, queue string) (alloc, req, fair amounts) {
	const bytesPerMB = 1e6
	for res, rs := range qs.Resources {
		unit := 1.0
		if res == model.ResourceMemory {
			unit = bytesPerMB
		}
		set := func(a *amounts, v float64) {
			switch {
			case res == model.ResourceGPU:
				a.GPU = v
			case res == model.ResourceCPU:
				a.CPU = v
			case res == model.ResourceMemory:
				a.Memory = v / unit
			default:
				if a.GPUModels == nil {
					a.GPUModels = map[string]float64{}
				}
				a.GPUModels[string(res)[len("gpu/"):]] = v
			}
		}
		set(&alloc, rs.Allocated)
		set(&req, rs.Requested)
		set(&fair, rs.FairShare)
		m.SetQueue(queue, string(res), rs.Allocated, rs.FairShare, rs.Limit, rs.Quota)
	}
	return alloc, req, fair
}

func (r *StatusReporter) write(ctx context.Context, name string, st queueStatus) {
	key, _ := json.Marshal(st)
	if r.last[name] == string(key) {
		return
	}
	now := metav1.Now()
	for i := range st.Conditions {
		st.Conditions[i].LastTransitionTime = now
	}
	patch, err := json.Marshal(map[string]any{"status": st})
	if err != nil {
		return
	}
	if _, err := r.dyn.Resource(gvr.Queue).Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		klog.V(2).InfoS("Write queue status", "queue", name, "err", err)
		return
	}
	r.last[name] = string(key)
}
