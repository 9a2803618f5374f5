package fairshare

import (
	"fmt"
	"sort"
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Problem is one thing wrong with the queue tree.
type Problem struct {
	// Queues names every queue the problem involves: the queue whose spec is wrong, or
	// every queue of a cycle.
	Queues []string
	// Field is the spec field to change, for example "spec.parentQueue" or
	// "spec.resources.gpu.limit".
	Field string
	// Message says what is wrong and what to change.
	Message string
}

// Involves reports whether the problem concerns the named queue.
func (p Problem) Involves(queue string) bool {
	for _, q := range p.Queues {
		if q == queue {
			return true
		}
	}
	return false
}

// ValidationError lists every problem Validate found, in a stable order.
type ValidationError struct {
	Problems []Problem
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Problems))
	for i, p := range e.Problems {
		msgs[i] = p.Message
	}
	return "invalid queue tree: " + strings.Join(msgs, "; ")
}

// About returns the problems that involve the named queue.
func (e *ValidationError) About(queue string) []Problem {
	var out []Problem
	for _, p := range e.Problems {
		if p.Involves(queue) {
			out = append(out, p)
		}
	}
	return out
}

// Validate checks the queue tree, keyed by queue name: every parent exists, following
// parents never comes back to a queue, every quota and limit is -1 or at least 0, no
// limit is below its quota, and no overQuotaWeight is negative. It returns nil or a
// *ValidationError listing every problem.
func Validate(queues map[string]*model.Queue) error {
	var problems []Problem
	for _, name := range sortedNames(queues) {
		q := queues[name]
		problems = append(problems, parentProblems(queues, name, q)...)
		problems = append(problems, resourceProblems(name, q)...)
	}
	problems = append(problems, cycleProblems(queues)...)
	if len(problems) == 0 {
		return nil
	}
	return &ValidationError{Problems: problems}
}

func parentProblems(queues map[string]*model.Queue, name string, q *model.Queue) []Problem {
	switch {
	case q.Parent == "":
		return nil
	case q.Parent == name:
		return []Problem{{
			Queues:  []string{name},
			Field:   "spec.parentQueue",
			Message: fmt.Sprintf("queue %s names itself as its parent: remove spec.parentQueue or set it to another queue", name),
		}}
	case queues[q.Parent] == nil:
		return []Problem{{
			Queues:  []string{name},
			Field:   "spec.parentQueue",
			Message: fmt.Sprintf("queue %s names parent %s, which does not exist: create queue %s first, or change spec.parentQueue", name, q.Parent, q.Parent),
		}}
	}
	return nil
}

// cycleProblems reports each cycle of two or more queues once. A queue naming itself is
// reported by parentProblems.
func cycleProblems(queues map[string]*model.Queue) []Problem {
	const (
		unvisited = iota
		onPath
		done
	)
	state := map[string]int{}
	var problems []Problem
	for _, start := range sortedNames(queues) {
		if state[start] != unvisited {
			continue
		}
		var path []string
		name := start
		for {
			q := queues[name]
			if q == nil || state[name] == done {
				break
			}
			if state[name] == onPath {
				cycle := cycleFrom(path, name)
				if len(cycle) > 1 {
					problems = append(problems, cycleProblem(cycle))
				}
				break
			}
			state[name] = onPath
			path = append(path, name)
			if q.Parent == "" {
				break
			}
			name = q.Parent
		}
		for _, n := range path {
			state[n] = done
		}
	}
	return problems
}

func cycleFrom(path []string, first string) []string {
	for i, n := range path {
		if n == first {
			return append([]string(nil), path[i:]...)
		}
	}
	return nil
}

func cycleProblem(cycle []string) Problem {
	arrow := strings.Join(append(append([]string(nil), cycle...), cycle[0]), " → ")
	involved := append([]string(nil), cycle...)
	sort.Strings(involved)
	return Problem{
		Queues: involved,
		Field:  "spec.parentQueue",
		Message: fmt.Sprintf("queues %s form a cycle through spec.parentQueue: set the parentQueue of one of them to a queue outside the cycle, or remove it",
			arrow),
	}
}

// maxAmount bounds a quota, limit or weight in model units (bytes for memory): far
// above any cluster (10^18 bytes is an exabyte), and far enough below the largest
// float64 that sums over a queue tree stay finite.
const maxAmount = 1e18

func resourceProblems(name string, q *model.Queue) []Problem {
	var problems []Problem
	for _, r := range sortedResources(q.Resources) {
		b := q.Resources[r]
		field := specField(r)
		add := func(subfield, format string, args ...any) {
			problems = append(problems, Problem{
				Queues:  []string{name},
				Field:   field + "." + subfield,
				Message: fmt.Sprintf("queue %s: %s ", name, resourceTitle(r)) + fmt.Sprintf(format, args...),
			})
		}
		// NaN fails every comparison, so each check passes only good values. Infinity
		// cannot be written in JSON, but a huge memory figure in megabytes becomes one
		// in bytes, and sums of huge figures overflow to it: refuse both.
		quotaOK := b.Quota == model.Unlimited || (b.Quota >= 0 && b.Quota <= maxAmount)
		limitOK := b.Limit == model.Unlimited || (b.Limit >= 0 && b.Limit <= maxAmount)
		switch {
		case b.Quota < 0 && b.Quota != model.Unlimited:
			add("quota", "quota is %s: set %s.quota to -1 (unlimited), 0 or a positive amount", amount(r, b.Quota), field)
		case !quotaOK:
			add("quota", "quota is %s: set %s.quota to -1 (unlimited) or an amount up to %s", amount(r, b.Quota), field, amount(r, maxAmount))
		}
		switch {
		case b.Limit < 0 && b.Limit != model.Unlimited:
			add("limit", "limit is %s: set %s.limit to -1 (no limit), 0 or a positive amount", amount(r, b.Limit), field)
		case !limitOK:
			add("limit", "limit is %s: set %s.limit to -1 (no limit) or an amount up to %s", amount(r, b.Limit), field, amount(r, maxAmount))
		}
		switch {
		case b.OverQuotaWeight < 0:
			add("overQuotaWeight", "overQuotaWeight is %g: set %s.overQuotaWeight to 0 (no share of spare capacity) or more", b.OverQuotaWeight, field)
		case !(b.OverQuotaWeight <= maxAmount):
			add("overQuotaWeight", "overQuotaWeight is %g: set %s.overQuotaWeight to a number from 0 to %g", b.OverQuotaWeight, field, maxAmount)
		}
		if !quotaOK || !limitOK || b.Limit == model.Unlimited {
			continue
		}
		if b.Quota == model.Unlimited {
			// As in KAI Scheduler (whose own fixtures pair them for cpu and memory): the
			// queue is entitled to all its demand, and the limit caps that demand.
			continue
		}
		if b.Limit < b.Quota {
			add("limit", "limit %s is below its quota %s: raise %s.limit to at least %s, lower the quota, or set the limit to -1 (no limit)",
				amount(r, b.Limit), amount(r, b.Quota), field, amount(r, b.Quota))
		}
	}
	return problems
}

// ValidatePodQueue says whether pods may be charged to the named queue: it must exist
// and have no child queues. The error says what to change.
func ValidatePodQueue(queues map[string]*model.Queue, name string) error {
	if queues[name] == nil {
		leaves := leafNames(queues)
		hint := "create the queue"
		if len(leaves) > 0 {
			hint += " or set the gantry.dev/queue label to one of: " + strings.Join(leaves, ", ")
		}
		return fmt.Errorf("queue %q does not exist: %s", name, hint)
	}
	if children := childNames(queues, name); len(children) > 0 {
		return fmt.Errorf("queue %s has child queues (%s) and only leaf queues hold pods: set the gantry.dev/queue label to one of them",
			name, strings.Join(children, ", "))
	}
	return nil
}

// Warnings lists settings that are valid but likely mistakes: children whose quotas
// add up to more than their parent's quota, which the parent cannot guarantee.
func Warnings(queues map[string]*model.Queue) []string {
	var warnings []string
	for _, parent := range sortedNames(queues) {
		children := childNames(queues, parent)
		if len(children) == 0 {
			continue
		}
		for _, r := range sortedResources(queues[parent].Resources) {
			parentQuota := queues[parent].Resources[r].Quota
			if parentQuota < 0 {
				continue
			}
			sum := 0.0
			unlimited := false
			for _, c := range children {
				b, ok := queues[c].Resources[r]
				if !ok {
					continue
				}
				if b.Quota == model.Unlimited {
					unlimited = true
				} else if b.Quota > 0 {
					sum += b.Quota
				}
			}
			if unlimited || sum > parentQuota+epsilon {
				total := amount(r, sum)
				if unlimited {
					total = "unlimited"
				}
				warnings = append(warnings, fmt.Sprintf(
					"the %s quotas of the children of queue %s add up to %s, more than its quota %s: the children cannot all get their quota at once; raise the parent's quota or lower the children's",
					resourceTitle(r), parent, total, amount(r, parentQuota)))
			}
		}
	}
	return warnings
}

func sortedNames(queues map[string]*model.Queue) []string {
	names := make([]string, 0, len(queues))
	for n := range queues {
		names = append(names, n)
	}
	sort.Strings(names)
	return names
}

func sortedResources(m map[model.ResourceName]model.QueueResource) []model.ResourceName {
	out := make([]model.ResourceName, 0, len(m))
	for r := range m {
		out = append(out, r)
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

func childNames(queues map[string]*model.Queue, parent string) []string {
	var out []string
	for _, n := range sortedNames(queues) {
		if n != parent && queues[n].Parent == parent {
			out = append(out, n)
		}
	}
	return out
}

func leafNames(queues map[string]*model.Queue) []string {
	hasChild := map[string]bool{}
	for n, q := range queues {
		if q.Parent != "" && q.Parent != n {
			hasChild[q.Parent] = true
		}
	}
	var out []string
	for _, n := range sortedNames(queues) {
		if !hasChild[n] {
			out = append(out, n)
		}
	}
	return out
}
