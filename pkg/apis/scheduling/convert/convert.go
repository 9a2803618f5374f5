// Package convert translates Gantry's scheduling API objects (pkg/apis/scheduling/v1alpha1)
// into the scheduler's model (pkg/model) and the scheduler's figures back into API
// status, so that the webhook, the Kubernetes side and the simulator read a Queue the
// same way.
//
// It holds the one place where a Queue's units meet the model's: memory is written in
// megabytes (10^6 bytes, KAI Scheduler's unit) and the model counts bytes; cpu
// (millicores) and gpu (GPUs) are the same on both sides. It must not depend on a
// client or on any I/O.
package convert

import (
	"strings"

	"github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
)

// BytesPerMegabyte is the size of a Queue's memory unit.
const BytesPerMegabyte = 1e6

// Queue returns the scheduler's view of q. A resource the spec leaves out is left out of
// the model too, which gives it quota 0, no limit and weight 1 (the CRD's defaults).
func Queue(q *v1alpha1.Queue) *model.Queue {
	priority := v1alpha1.DefaultQueuePriority
	if q.Spec.Priority != nil {
		priority = *q.Spec.Priority
	}
	out := &model.Queue{
		Name:      q.Name,
		Parent:    q.Spec.ParentQueue,
		Priority:  priority,
		Resources: map[model.ResourceName]model.QueueResource{},
	}
	r := q.Spec.Resources
	if r == nil {
		return out
	}
	if r.GPU != nil {
		out.Resources[model.ResourceGPU] = queueResource(*r.GPU, 1)
	}
	if r.CPU != nil {
		out.Resources[model.ResourceCPU] = queueResource(*r.CPU, 1)
	}
	if r.Memory != nil {
		out.Resources[model.ResourceMemory] = queueResource(*r.Memory, BytesPerMegabyte)
	}
	for _, m := range r.GPUModels {
		out.Resources[model.GPUModelResource(model.CanonicalGPUModel(m.Model))] = queueResource(m.QueueResource, 1)
	}
	return out
}

// Queues returns the scheduler's view of every queue, keyed by name.
func Queues(items []v1alpha1.Queue) map[string]*model.Queue {
	out := make(map[string]*model.Queue, len(items))
	for i := range items {
		out[items[i].Name] = Queue(&items[i])
	}
	return out
}

func queueResource(r v1alpha1.QueueResource, unit float64) model.QueueResource {
	return model.QueueResource{
		Quota:           scale(r.Quota, unit),
		Limit:           scale(r.Limit, unit),
		OverQuotaWeight: r.OverQuotaWeight,
	}
}

// scale converts an amount to model units; -1 (unlimited) stays -1.
func scale(v, unit float64) float64 {
	if v == v1alpha1.Unlimited {
		return v
	}
	return v * unit
}

// ResourceAmounts returns amounts in model units as a Queue status block, in the
// spec's units (memory in megabytes).
func ResourceAmounts(a fairshare.Amounts) *v1alpha1.ResourceAmounts {
	out := &v1alpha1.ResourceAmounts{
		GPU:    a[model.ResourceGPU],
		CPU:    a[model.ResourceCPU],
		Memory: a[model.ResourceMemory] / BytesPerMegabyte,
	}
	for r, v := range a {
		if m, ok := strings.CutPrefix(string(r), "gpu/"); ok {
			if out.GPUModels == nil {
				out.GPUModels = map[string]float64{}
			}
			out.GPUModels[m] = v
		}
	}
	return out
}

// StatusAmounts returns the allocated, requested and fair-share blocks of a Queue's
// status from the queue's standing in shares; all nil when shares does not know the
// queue.
func StatusAmounts(shares *fairshare.Shares, queue string) (allocated, requested, fairShare *v1alpha1.ResourceAmounts) {
	qs := shares.Queue(queue)
	if qs == nil {
		return nil, nil, nil
	}
	alloc, req, fair := fairshare.Amounts{}, fairshare.Amounts{}, fairshare.Amounts{}
	for r, rs := range qs.Resources {
		alloc[r], req[r], fair[r] = rs.Allocated, rs.Requested, rs.FairShare
	}
	return ResourceAmounts(alloc), ResourceAmounts(req), ResourceAmounts(fair)
}
