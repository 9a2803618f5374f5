package fairshare

import (
	"math"
	"sort"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Usage is what the pods of one leaf queue ask for and hold.
type Usage struct {
	// Allocated is held by the queue's bound pods.
	Allocated Amounts
	// Requested is asked for by the queue's pods, bound or pending (so it includes
	// Allocated; where it is smaller, Allocated is used).
	Requested Amounts
	// NonPreemptible is the part of Allocated held by pods that may not be preempted.
	NonPreemptible Amounts
}

// ResourceShare is one queue's standing on one resource.
type ResourceShare struct {
	// Quota, Limit and OverQuotaWeight are the queue's bounds as Compute applied them
	// (model.Unlimited for none).
	Quota           float64
	Limit           float64
	OverQuotaWeight float64
	// Declared is true when the queue's spec sets this resource itself (false for a
	// GPU model the queue has no entry for, and for defaults).
	Declared bool
	// Requested and Allocated sum the queue's own pods and its descendants'.
	Requested float64
	Allocated float64
	// AllocatedNonPreemptible is the part of Allocated that no preemption or reclaim
	// can free: what non-preemptible pods hold. It is what the quota check of
	// non-preemptible work counts (WouldExceedQuota).
	AllocatedNonPreemptible float64
	// Demand is Requested capped at the limits of the queue and its descendants: the
	// most the queue could use.
	Demand float64
	// FairShare is what the queue is entitled to right now (see the package doc).
	FairShare float64
}

// QueueShare is one queue's standing on every resource.
type QueueShare struct {
	Name     string
	Parent   string
	Priority int32
	// Children are the names of the child queues, sorted; empty for a leaf.
	Children  []string
	Resources map[model.ResourceName]*ResourceShare
}

// IsLeaf reports whether the queue has no children.
func (q *QueueShare) IsLeaf() bool { return len(q.Children) == 0 }

// Shares is the division of the cluster between queues for one scheduling cycle.
// It is not safe for concurrent use.
type Shares struct {
	queues    map[string]*QueueShare
	roots     []string
	resources []model.ResourceName
	capacity  Amounts
}

// Compute divides capacity (the cluster's schedulable amount of each resource) between
// the queues, given each leaf queue's usage. Resources are those in capacity, plus gpu,
// cpu and memory, plus every GPU model a queue declares; usage of unknown or non-leaf
// queues is ignored.
//
// When the tree has problems, Compute returns Shares for the queues that are not part
// of one (nor below one) together with the *ValidationError from Validate.
func Compute(queues map[string]*model.Queue, capacity Amounts, usage map[string]Usage) (*Shares, error) {
	validationErr := Validate(queues)
	excluded := excludedQueues(queues, validationErr)

	s := &Shares{queues: map[string]*QueueShare{}, capacity: Amounts{}}
	for r, v := range capacity {
		s.capacity[r] = v
	}
	s.resources = resourcesOf(queues, capacity)
	for _, name := range sortedNames(queues) {
		if excluded[name] {
			continue
		}
		q := queues[name]
		qs := &QueueShare{Name: name, Parent: q.Parent, Priority: q.Priority, Resources: map[model.ResourceName]*ResourceShare{}}
		for _, r := range s.resources {
			qs.Resources[r] = boundsOf(q, r)
		}
		s.queues[name] = qs
	}
	for _, name := range sortedNames(queues) {
		qs := s.queues[name]
		if qs == nil {
			continue
		}
		if qs.Parent == "" {
			s.roots = append(s.roots, name)
		} else {
			parent := s.queues[qs.Parent]
			parent.Children = append(parent.Children, name)
		}
	}
	for name, u := range usage {
		qs := s.queues[name]
		if qs == nil || !qs.IsLeaf() {
			continue
		}
		for r, v := range u.Allocated {
			if rs := qs.Resources[r]; rs != nil {
				rs.Allocated += v
			}
		}
		for r, v := range u.Requested {
			if rs := qs.Resources[r]; rs != nil {
				rs.Requested += v
			}
		}
		for r, v := range u.NonPreemptible {
			if rs := qs.Resources[r]; rs != nil {
				rs.AllocatedNonPreemptible += v
			}
		}
	}
	for _, root := range s.roots {
		s.sumUsage(root)
	}
	for _, r := range s.resources {
		for _, root := range s.roots {
			s.computeDemand(root, r)
		}
		s.divide(s.roots, r, s.capacity[r])
	}
	return s, validationErr
}

// excludedQueues are the queues involved in a problem and everything below them.
func excludedQueues(queues map[string]*model.Queue, err error) map[string]bool {
	excluded := map[string]bool{}
	verr, ok := err.(*ValidationError)
	if !ok {
		return excluded
	}
	for _, p := range verr.Problems {
		for _, q := range p.Queues {
			excluded[q] = true
		}
	}
	// Descendants: a queue is excluded when any ancestor is. The walk is bounded
	// because a cycle's members are excluded already.
	for name := range queues {
		for n, steps := name, 0; n != "" && steps <= len(queues); steps++ {
			if excluded[n] {
				excluded[name] = true
				break
			}
			q := queues[n]
			if q == nil {
				break
			}
			n = q.Parent
		}
	}
	return excluded
}

func resourcesOf(queues map[string]*model.Queue, capacity Amounts) []model.ResourceName {
	set := map[model.ResourceName]bool{model.ResourceGPU: true, model.ResourceCPU: true, model.ResourceMemory: true}
	for r := range capacity {
		set[r] = true
	}
	for _, q := range queues {
		for r := range q.Resources {
			set[r] = true
		}
	}
	out := make([]model.ResourceName, 0, len(set))
	for r := range set {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// boundsOf applies the defaults of the package doc: an undeclared resource has quota 0,
// no limit and weight 1; an undeclared GPU model takes the gpu limit and weight.
func boundsOf(q *model.Queue, r model.ResourceName) *ResourceShare {
	gpu, hasGPU := q.Resources[model.ResourceGPU]
	if b, ok := q.Resources[r]; ok {
		rs := &ResourceShare{Quota: b.Quota, Limit: b.Limit, OverQuotaWeight: b.OverQuotaWeight, Declared: true}
		if _, isModel := gpuModelOf(r); isModel && hasGPU {
			rs.Limit = minLimit(rs.Limit, gpu.Limit)
		}
		return rs
	}
	rs := &ResourceShare{Quota: 0, Limit: model.Unlimited, OverQuotaWeight: 1}
	if _, isModel := gpuModelOf(r); isModel && hasGPU {
		rs.Limit = gpu.Limit
		rs.OverQuotaWeight = gpu.OverQuotaWeight
	}
	return rs
}

func minLimit(a, b float64) float64 {
	switch {
	case a == model.Unlimited:
		return b
	case b == model.Unlimited:
		return a
	}
	return math.Min(a, b)
}

func capAt(v, limit float64) float64 {
	if limit == model.Unlimited {
		return v
	}
	return math.Min(v, limit)
}

func (s *Shares) sumUsage(name string) {
	qs := s.queues[name]
	for _, c := range qs.Children {
		s.sumUsage(c)
		for r, rs := range qs.Resources {
			child := s.queues[c].Resources[r]
			rs.Allocated += child.Allocated
			rs.AllocatedNonPreemptible += child.AllocatedNonPreemptible
			rs.Requested += child.Requested
		}
	}
	for _, rs := range qs.Resources {
		rs.Requested = math.Max(rs.Requested, rs.Allocated)
	}
}

func (s *Shares) computeDemand(name string, r model.ResourceName) float64 {
	qs := s.queues[name]
	rs := qs.Resources[r]
	if qs.IsLeaf() {
		rs.Demand = capAt(rs.Requested, rs.Limit)
		return rs.Demand
	}
	sum := 0.0
	for _, c := range qs.Children {
		sum += s.computeDemand(c, r)
	}
	rs.Demand = capAt(sum, rs.Limit)
	return rs.Demand
}

// divide hands amount of r to the sibling queues, then lets each divide its fair share
// among its own children.
func (s *Shares) divide(siblings []string, r model.ResourceName, amount float64) {
	if len(siblings) == 0 {
		return
	}
	groups := s.byPriority(siblings)
	left := amount

	// Quota first, capped by demand; higher priorities first when the quotas do not fit.
	for _, group := range groups {
		wanted := make([]float64, len(group))
		total := 0.0
		for i, name := range group {
			rs := s.queues[name].Resources[r]
			wanted[i] = rs.Demand
			if rs.Quota != model.Unlimited {
				wanted[i] = math.Min(rs.Quota, rs.Demand)
			}
			total += wanted[i]
		}
		scale := 1.0
		if total > left {
			scale = 0
			if total > 0 {
				scale = math.Max(left, 0) / total
			}
		}
		for i, name := range group {
			given := wanted[i] * scale
			s.queues[name].Resources[r].FairShare = given
			left -= given
		}
	}

	// Spare capacity by priority, then by overQuotaWeight.
	for _, group := range groups {
		if left <= epsilon {
			break
		}
		left = s.waterFill(group, r, left)
	}

	for _, name := range siblings {
		qs := s.queues[name]
		s.divide(qs.Children, r, qs.Resources[r].FairShare)
	}
}

// waterFill divides amount among the group by weight, never past a queue's demand;
// what a satisfied queue does not need goes round again to the others. It returns what
// nobody in the group could use.
func (s *Shares) waterFill(group []string, r model.ResourceName, amount float64) float64 {
	for amount > epsilon {
		var active []*ResourceShare
		weights := 0.0
		for _, name := range group {
			rs := s.queues[name].Resources[r]
			if rs.OverQuotaWeight > 0 && rs.Demand-rs.FairShare > epsilon {
				active = append(active, rs)
				weights += rs.OverQuotaWeight
			}
		}
		if len(active) == 0 {
			break
		}
		given, capped := 0.0, false
		for _, rs := range active {
			part := amount * rs.OverQuotaWeight / weights
			if need := rs.Demand - rs.FairShare; part >= need {
				part, capped = need, true
			}
			rs.FairShare += part
			given += part
		}
		amount -= given
		if !capped {
			break
		}
	}
	return math.Max(amount, 0)
}

// byPriority groups names by queue priority, highest first; names stay sorted.
func (s *Shares) byPriority(names []string) [][]string {
	sorted := append([]string(nil), names...)
	sort.SliceStable(sorted, func(i, j int) bool {
		return s.queues[sorted[i]].Priority > s.queues[sorted[j]].Priority
	})
	var groups [][]string
	for i, name := range sorted {
		if i == 0 || s.queues[name].Priority != s.queues[sorted[i-1]].Priority {
			groups = append(groups, nil)
		}
		groups[len(groups)-1] = append(groups[len(groups)-1], name)
	}
	return groups
}

// Queue returns the named queue's standing, or nil when the queue is unknown or was
// left out because of a validation problem.
func (s *Shares) Queue(name string) *QueueShare { return s.queues[name] }

// FairShare returns the named queue's fair share of r (0 for an unknown queue).
func (s *Shares) FairShare(queue string, r model.ResourceName) float64 {
	if qs := s.queues[queue]; qs != nil {
		if rs := qs.Resources[r]; rs != nil {
			return rs.FairShare
		}
	}
	return 0
}

// Allocate records that pods of the leaf queue now hold amounts (for example, a gang
// placed earlier in this cycle), on the queue and all its ancestors. Fair shares are
// not recomputed; Order and the limit checks see the new allocation.
func (s *Shares) Allocate(queue string, amounts Amounts) { s.addAllocated(queue, amounts, 1) }

// Release records that pods of the queue gave amounts back (evicted or finished).
func (s *Shares) Release(queue string, amounts Amounts) { s.addAllocated(queue, amounts, -1) }

// AllocateNonPreemptible is Allocate for pods that may not be preempted: they count in
// AllocatedNonPreemptible too.
func (s *Shares) AllocateNonPreemptible(queue string, amounts Amounts) {
	s.addAllocated(queue, amounts, 1)
	for _, qs := range s.pathUp(queue) {
		for r, v := range amounts {
			if rs := qs.Resources[r]; rs != nil {
				rs.AllocatedNonPreemptible += v
			}
		}
	}
}

func (s *Shares) addAllocated(queue string, amounts Amounts, sign float64) {
	for _, qs := range s.pathUp(queue) {
		for r, v := range amounts {
			if rs := qs.Resources[r]; rs != nil {
				rs.Allocated = math.Max(rs.Allocated+sign*v, 0)
			}
		}
	}
}

// PathUp returns the names of the queue and its ancestors, the queue first; nil for a
// queue the Shares do not know.
func (s *Shares) PathUp(queue string) []string {
	var out []string
	for _, qs := range s.pathUp(queue) {
		out = append(out, qs.Name)
	}
	return out
}

// pathUp returns the queue and its ancestors, the queue first.
func (s *Shares) pathUp(queue string) []*QueueShare {
	var out []*QueueShare
	for qs := s.queues[queue]; qs != nil; qs = s.queues[qs.Parent] {
		out = append(out, qs)
		if qs.Parent == "" {
			break
		}
	}
	return out
}
