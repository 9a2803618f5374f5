package preempt

import (
	"fmt"
	"slices"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// epsilon absorbs floating-point error in GPU amounts (fractions of GPUs add up).
const epsilon = 1e-9

// reclaimRules decide which queues' work the preemptor may take, and how much.
//
// Reclaim is judged on GPUs, at every level of the queue tree below the common
// ancestor of the two queues, by one of two rules, tried in this order:
//
//   - By quota (quota is guaranteed). Each queue on the preemptor's side stays within
//     its quota once the gang runs (a quota of -1 counts as the queue's fair share);
//     each queue on the victim's side holds more than its quota (a quota of -1 is
//     never passed). Victims are taken while the victim's queue is above its quota
//     before each of them: the last may leave it below its quota, even below its fair
//     share, since a gang cannot be evicted in part.
//   - By fair share (the division of spare capacity). Each queue on the preemptor's
//     side is strictly below its fair share and stays at or below it once the gang
//     runs; each queue on the victim's side is strictly above its fair share and stays
//     at or above it once the victims are gone.
//
// Neither rule can take the GPUs back in a later cycle: after a reclaim the
// preemptor's side is within its quota (so at or below its fair share, which is never
// below min(quota, demand)) or at or below its fair share, and neither rule takes from
// a queue in that state.
type reclaimRules struct {
	shares *fairshare.Shares
	queue  string
	// requestGPUs estimates the GPUs the gang will be charged before it is placed.
	requestGPUs float64
	// reclaimOnly refuses victims of the preemptor's own queue.
	reclaimOnly bool
	verdicts    map[string]queueVerdict
}

type queueVerdict struct {
	refused   string
	drawsFrom []string
	// byQuota is true when the quota rule allows the reclaim, false for the fair-share
	// rule.
	byQuota bool
}

func newReclaimRules(req Request, p preemptor) *reclaimRules {
	return &reclaimRules{
		shares:      req.Shares,
		queue:       p.queue,
		requestGPUs: estimateGPUs(p.pods),
		reclaimOnly: req.ReclaimOnly,
		verdicts:    map[string]queueVerdict{},
	}
}

// kindFor says whether the running gang g may lose pods to p, and by which rule; why
// is the refusal when it may not.
func (r *reclaimRules) kindFor(g *model.Gang, p preemptor) (kind string, v queueVerdict, why string) {
	if g.Queue == p.queue {
		switch {
		case r.reclaimOnly:
			return "", v, refusedSameQueueElastic
		case g.Priority < p.priority:
			return KindPreempt, v, ""
		}
		return "", v, refusedNotLower
	}
	if r.shares == nil {
		return "", v, refusedOtherQueue
	}
	v, ok := r.verdicts[g.Queue]
	if !ok {
		v = r.judge(g.Queue)
		r.verdicts[g.Queue] = v
	}
	if v.refused != "" {
		return "", v, v.refused
	}
	return KindReclaim, v, ""
}

func (r *reclaimRules) judge(victimQueue string) queueVerdict {
	reclaimerSide, victimSide := r.sidesBelowCommonAncestor(victimQueue)
	if reclaimerSide == nil || victimSide == nil {
		return queueVerdict{refused: refusedNoShare}
	}
	for _, q := range append(slices.Clone(reclaimerSide), victimSide...) {
		if r.gpuShare(q) == nil {
			return queueVerdict{refused: refusedNoShare}
		}
	}
	byQuota := r.quotaRule(reclaimerSide, victimSide)
	if byQuota == "" {
		return queueVerdict{drawsFrom: victimSide, byQuota: true}
	}
	byShare := r.fairShareRule(reclaimerSide, victimSide)
	if byShare == "" {
		return queueVerdict{drawsFrom: victimSide}
	}
	return queueVerdict{refused: "in another queue, and " + byQuota + ", and " + byShare}
}

// quotaRule returns why the quota rule refuses, or "".
func (r *reclaimRules) quotaRule(reclaimerSide, victimSide []string) string {
	for _, q := range reclaimerSide {
		rs := r.gpuShare(q)
		if rs.Allocated+r.requestGPUs > deserved(rs)+epsilon {
			return refusedPastQuota
		}
	}
	for _, q := range victimSide {
		rs := r.gpuShare(q)
		if rs.Quota == model.Unlimited || rs.Allocated <= rs.Quota+epsilon {
			return refusedVictimWithinQuota
		}
	}
	return ""
}

// fairShareRule returns why the fair-share rule refuses, or "".
func (r *reclaimRules) fairShareRule(reclaimerSide, victimSide []string) string {
	for _, q := range reclaimerSide {
		rs := r.gpuShare(q)
		if rs.Allocated >= rs.FairShare-epsilon {
			return refusedNotBelowShare
		}
		if rs.Allocated+r.requestGPUs > rs.FairShare+epsilon {
			return refusedAboveShare
		}
	}
	for _, q := range victimSide {
		if rs := r.gpuShare(q); rs.Allocated <= rs.FairShare+epsilon {
			return refusedVictimAtShare
		}
	}
	return ""
}

// deserved is what the quota rule lets a reclaiming queue reach: its quota, or its
// fair share when the quota is -1 (entitled to all its demand, which the fair share
// already gives it where capacity allows).
func deserved(rs *fairshare.ResourceShare) float64 {
	if rs.Quota == model.Unlimited {
		return rs.FairShare
	}
	return rs.Quota
}

// sidesBelowCommonAncestor returns each queue's path up to, not including, the first
// queue the two paths share (their whole paths when they share none). Nil when a
// queue is unknown to the shares.
func (r *reclaimRules) sidesBelowCommonAncestor(victimQueue string) (reclaimerSide, victimSide []string) {
	a, b := r.shares.PathUp(r.queue), r.shares.PathUp(victimQueue)
	if a == nil || b == nil {
		return nil, nil
	}
	inA := map[string]int{}
	for i, q := range a {
		inA[q] = i
	}
	for j, q := range b {
		if i, ok := inA[q]; ok {
			return a[:i], b[:j]
		}
	}
	return a, b
}

func (r *reclaimRules) gpuShare(queue string) *fairshare.ResourceShare {
	qs := r.shares.Queue(queue)
	if qs == nil {
		return nil
	}
	return qs.Resources[model.ResourceGPU]
}

// surplus is how many GPUs the queue holds above what a reclaim by the given rule
// must leave it: its quota, or its fair share.
func (r *reclaimRules) surplus(queue string, byQuota bool) float64 {
	rs := r.gpuShare(queue)
	if rs == nil {
		return 0
	}
	if byQuota {
		return rs.Allocated - rs.Quota
	}
	return rs.Allocated - rs.FairShare
}

// withinSurplus reports whether evicting u alone is allowed by its rule: by fair
// share, every queue it draws from stays at or above its fair share; by quota, every
// such queue is above its quota before u goes, which the verdict already saw.
func (r *reclaimRules) withinSurplus(u *unit) bool {
	if u.byQuota {
		return true
	}
	for _, q := range u.drawsFrom {
		if u.gpus > r.surplus(q, false)+epsilon {
			return false
		}
	}
	return true
}

// setWithinSurplus is withinSurplus for a whole victim set. By quota, every victim
// but the largest must go while its queue is still above its quota.
func (r *reclaimRules) setWithinSurplus(units []*unit) bool {
	type draw struct{ total, largest float64 }
	var drawn map[string]draw
	for _, u := range units {
		for _, q := range u.drawsFrom {
			if drawn == nil {
				drawn = map[string]draw{}
			}
			d := drawn[q]
			d.total += u.gpus
			d.largest = max(d.largest, u.gpus)
			drawn[q] = d
			if u.byQuota {
				if rest := d.total - d.largest; rest > epsilon && rest >= r.surplus(q, true)-epsilon {
					return false
				}
			} else if d.total > r.surplus(q, false)+epsilon {
				return false
			}
		}
	}
	return true
}

// estimateGPUs is what pending pods will be charged before they are placed.
func estimateGPUs(pods []*model.Pod) float64 {
	var gpus float64
	for _, pod := range pods {
		gpus += fairshare.PendingGPUs(pod)
	}
	return gpus
}

// checkReclaimerShare checks, with the gang's exact GPU charge on the GPUs it was
// placed on, that a reclaim leaves the preemptor's side at or below its fair share.
func (s *search) checkReclaimerShare(chosen []*unit, placements []placement.Placement) error {
	byID := map[model.PodID]*model.Pod{}
	for _, pod := range s.p.pods {
		byID[pod.ID] = pod
	}
	var charged float64
	for _, pl := range placements {
		if pod := byID[pl.Pod]; pod != nil {
			placed := *pod
			placed.Node, placed.GPUs = pl.Node, pl.GPUs
			charged += boundGPUs(&placed, s.req.View.Node(pl.Node))
		}
	}
	for _, u := range chosen {
		if u.kind != KindReclaim {
			continue
		}
		reclaimerSide, _ := s.rules.sidesBelowCommonAncestor(u.gang.Queue)
		for _, q := range reclaimerSide {
			rs := s.rules.gpuShare(q)
			if rs == nil {
				continue
			}
			if u.byQuota && rs.Allocated+charged > deserved(rs)+epsilon {
				return fmt.Errorf("%w: %s would take queue %s past its GPU quota of %s (%s held, %s more asked for); reclaim by quota stops at the quota",
					ErrNoVictims, s.p.describe(), q, formatGPUs(deserved(rs)), formatGPUs(rs.Allocated), formatGPUs(charged))
			}
			if !u.byQuota && rs.Allocated+charged > rs.FairShare+epsilon {
				return fmt.Errorf("%w: %s would take queue %s above its fair share of %s GPUs (%s held, %s more asked for); reclaim by fair share stops at the fair share",
					ErrNoVictims, s.p.describe(), q, formatGPUs(rs.FairShare), formatGPUs(rs.Allocated), formatGPUs(charged))
			}
		}
	}
	return nil
}
