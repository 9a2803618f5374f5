package fairshare

import (
	"fmt"

	"github.com/gantry-dev/gantry/pkg/model"
)

// LimitError says which queue's limit an allocation runs into. Its message is meant
// for people: "queue team-a is at its GPU limit (8 of 8): …".
type LimitError struct {
	// Queue is the queue whose limit is hit: the leaf itself or an ancestor.
	Queue string
	// Leaf is the queue the work was sent to.
	Leaf     string
	Resource model.ResourceName
	// Limit and Allocated are in the units of model.QueueResource; Addition is what the
	// work asked for (0 for AtLimit).
	Limit     float64
	Allocated float64
	Addition  float64
}

func (e *LimitError) Error() string {
	who := "queue " + e.Queue
	if e.Queue != e.Leaf {
		who = fmt.Sprintf("queue %s (a parent of %s)", e.Queue, e.Leaf)
	}
	fix := fmt.Sprintf("wait for its running work to finish, or raise %s.limit of queue %s", specField(e.Resource), e.Queue)
	if e.Allocated+epsilon >= e.Limit {
		return fmt.Sprintf("%s is at its %s limit (%s): %s",
			who, resourceTitle(e.Resource), ofAmounts(e.Resource, e.Allocated, e.Limit), fix)
	}
	return fmt.Sprintf("%s would exceed its %s limit (%s in use, %s more asked for): %s",
		who, resourceTitle(e.Resource), ofAmounts(e.Resource, e.Allocated, e.Limit), amount(e.Resource, e.Addition), fix)
}

// WouldExceedLimit returns nil when the leaf queue and every ancestor stay within their
// limits after addition is allocated to the queue, and a *LimitError naming the first
// limit hit (the queue's own before its parents', resources in name order) otherwise.
// A GPU model's limit applies only where the queue declares that model. Unknown queues
// have no limits here; ValidatePodQueue reports them.
func (s *Shares) WouldExceedLimit(queue string, addition Amounts) error {
	for _, qs := range s.pathUp(queue) {
		for _, r := range s.resources {
			add := addition[r]
			if add <= 0 {
				continue
			}
			rs := qs.Resources[r]
			if !limitApplies(r, rs) {
				continue
			}
			if rs.Allocated+add > rs.Limit+epsilon {
				return &LimitError{Queue: qs.Name, Leaf: queue, Resource: r, Limit: rs.Limit, Allocated: rs.Allocated, Addition: add}
			}
		}
	}
	return nil
}

// AtLimit returns a *LimitError when the queue or an ancestor already holds all that a
// limit allows of some resource, so that no work needing that resource can start; nil
// otherwise.
func (s *Shares) AtLimit(queue string) error {
	for _, qs := range s.pathUp(queue) {
		for _, r := range s.resources {
			rs := qs.Resources[r]
			if limitApplies(r, rs) && rs.Allocated+epsilon >= rs.Limit {
				return &LimitError{Queue: qs.Name, Leaf: queue, Resource: r, Limit: rs.Limit, Allocated: rs.Allocated}
			}
		}
	}
	return nil
}

func limitApplies(r model.ResourceName, rs *ResourceShare) bool {
	if rs == nil || rs.Limit == model.Unlimited {
		return false
	}
	if _, isModel := gpuModelOf(r); isModel {
		return rs.Declared
	}
	return true
}

// QuotaError says which queue's quota non-preemptible work would pass. Its message is
// meant for people.
type QuotaError struct {
	// Queue is the queue whose quota is passed: the leaf itself or an ancestor.
	Queue string
	// Leaf is the queue the work was sent to.
	Leaf     string
	Resource model.ResourceName
	// Quota and NonPreemptible (what non-preemptible work holds there already) are in
	// the units of model.QueueResource; Addition is what the work asks for.
	Quota          float64
	NonPreemptible float64
	Addition       float64
}

func (e *QuotaError) Error() string {
	who := "queue " + e.Queue
	if e.Queue != e.Leaf {
		who = fmt.Sprintf("queue %s (a parent of %s)", e.Queue, e.Leaf)
	}
	return fmt.Sprintf("%s would go past its %s quota of %s with non-preemptible work (%s held by non-preemptible work, %s more asked for), and non-preemptible work may not borrow: mark the work preemptible (gantry.dev/preemptible: \"true\" or a preemptible priority class such as train), or raise %s.quota of queue %s",
		who, resourceTitle(e.Resource), amount(e.Resource, e.Quota), amount(e.Resource, e.NonPreemptible), amount(e.Resource, e.Addition), specField(e.Resource), e.Queue)
}

// WouldExceedQuota returns nil when non-preemptible work asking for addition fits in
// the quota of the leaf queue and of every ancestor, counting only what
// non-preemptible work holds there (preemptible work is a preemption candidate, never
// a reason to refuse), and a *QuotaError naming the first quota passed otherwise. A
// quota of -1 sets no bound, as in KAI Scheduler, nor does a resource the queue's spec
// leaves out.
func (s *Shares) WouldExceedQuota(queue string, addition Amounts) error {
	for _, qs := range s.pathUp(queue) {
		for _, r := range s.resources {
			add := addition[r]
			rs := qs.Resources[r]
			// A resource the queue does not declare sets no quota for it here.
			if add <= 0 || rs == nil || !rs.Declared || rs.Quota == model.Unlimited {
				continue
			}
			if rs.AllocatedNonPreemptible+add > rs.Quota+epsilon {
				return &QuotaError{Queue: qs.Name, Leaf: queue, Resource: r, Quota: rs.Quota, NonPreemptible: rs.AllocatedNonPreemptible, Addition: add}
			}
		}
	}
	return nil
}
