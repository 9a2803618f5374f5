package preempt

import (
	"fmt"

	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// epsilon absorbs floating-point error in GPU amounts (fractions of GPUs add up).
const epsilon = 1e-9

// reclaimRules decide which queues' work the preemptor may take, and how much.
//
// Reclaim is judged on GPUs, at every level of the queue tree below the common
// ancestor of the two queues: on the preemptor's side each queue must be strictly
// below its fair share and stay at or below it once the gang runs; on the victim's
// side each queue must be strictly above its fair share and stay at or above it once
// the victims are gone. After a reclaim the preemptor's side is therefore not above
// its share and the victim's side not below it, so the same rule cannot take the
// GPUs back in the next cycle (fair shares do not move, since evicted pods stay
// pending and keep their queue's demand).
type reclaimRules struct {
	shares *fairshare.Shares
	queue  string
	// requestGPUs estimates the GPUs the gang will be charged before it is placed.
	requestGPUs float64
	verdicts    map[string]queueVerdict
}

type queueVerdict struct {
	refused   string
	drawsFrom []string
}

func newReclaimRules(req Request, p preemptor) *reclaimRules {
	return &reclaimRules{
		shares:      req.Shares,
		queue:       p.queue,
		requestGPUs: estimateGPUs(p.pods),
		verdicts:    map[string]queueVerdict{},
	}
}

// kindFor says whether the running gang g may lose pods to p, and by which rule; why
// is the refusal when it may not.
func (r *reclaimRules) kindFor(g *model.Gang, p preemptor) (kind string, drawsFrom []string, why string) {
	if g.Queue == p.queue {
		if g.Priority < p.priority {
			return KindPreempt, nil, ""
		}
		return "", nil, refusedNotLower
	}
	if r.shares == nil {
		return "", nil, refusedOtherQueue
	}
	v, ok := r.verdicts[g.Queue]
	if !ok {
		v = r.judge(g.Queue)
		r.verdicts[g.Queue] = v
	}
	if v.refused != "" {
		return "", nil, v.refused
	}
	return KindReclaim, v.drawsFrom, ""
}

func (r *reclaimRules) judge(victimQueue string) queueVerdict {
	reclaimerSide, victimSide := r.sidesBelowCommonAncestor(victimQueue)
	if reclaimerSide == nil || victimSide == nil {
		return queueVerdict{refused: refusedNoShare}
	}
	for _, q := range reclaimerSide {
		rs := r.gpuShare(q)
		if rs == nil {
			return queueVerdict{refused: refusedNoShare}
		}
		if rs.Allocated >= rs.FairShare-epsilon || rs.Allocated+r.requestGPUs > rs.FairShare+epsilon {
			return queueVerdict{refused: refusedReclaimerFull}
		}
	}
	for _, q := range victimSide {
		rs := r.gpuShare(q)
		if rs == nil {
			return queueVerdict{refused: refusedNoShare}
		}
		if rs.Allocated <= rs.FairShare+epsilon {
			return queueVerdict{refused: refusedVictimAtShare}
		}
	}
	return queueVerdict{drawsFrom: victimSide}
}

// sidesBelowCommonAncestor returns each queue's path up to, not including, the first
// queue the two paths share (their whole paths when they share none). Nil when a
// queue is unknown to the shares.
func (r *reclaimRules) sidesBelowCommonAncestor(victimQueue string) (reclaimerSide, victimSide []string) {
	up := func(queue string) []string {
		var path []string
		for q := queue; q != "" && len(path) <= 64; {
			qs := r.shares.Queue(q)
			if qs == nil {
				return nil
			}
			path = append(path, q)
			q = qs.Parent
		}
		return path
	}
	a, b := up(r.queue), up(victimQueue)
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

// surplus is how many GPUs the queue holds above its fair share.
func (r *reclaimRules) surplus(queue string) float64 {
	rs := r.gpuShare(queue)
	if rs == nil {
		return 0
	}
	return rs.Allocated - rs.FairShare
}

// withinSurplus reports whether evicting u alone keeps every queue it draws from at
// or above its fair share.
func (r *reclaimRules) withinSurplus(u *unit) bool {
	for _, q := range u.drawsFrom {
		if u.gpus > r.surplus(q)+epsilon {
			return false
		}
	}
	return true
}

// setWithinSurplus is withinSurplus for a whole victim set.
func (r *reclaimRules) setWithinSurplus(units []*unit) bool {
	var drawn map[string]float64
	for _, u := range units {
		for _, q := range u.drawsFrom {
			if drawn == nil {
				drawn = map[string]float64{}
			}
			drawn[q] += u.gpus
			if drawn[q] > r.surplus(q)+epsilon {
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
			if rs != nil && rs.Allocated+charged > rs.FairShare+epsilon {
				return fmt.Errorf("%w: %s would take queue %s above its fair share of %s GPUs (%s held, %s more asked for); reclaim stops at the fair share",
					ErrNoVictims, s.p.describe(), q, formatGPUs(rs.FairShare), formatGPUs(rs.Allocated), formatGPUs(charged))
			}
		}
	}
	return nil
}
