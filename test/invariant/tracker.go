package invariant

import (
	"errors"
	"fmt"
	"sort"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/sets"
)

// Rules are the thresholds of the checks.
type Rules struct {
	// SchedulerNames are the schedulerNames whose pods must be bound or pending with a
	// reason (default: gantry-scheduler).
	SchedulerNames []string
	// GangGrace is how long a gang may stay partly bound after a bind (one bind round;
	// default 5s).
	GangGrace time.Duration
	// BoundTime is how long a pod may wait without being bound or given a reason
	// (default 60s).
	BoundTime time.Duration
	// DefaultQueue is the queue of pods without a queue label (default "default").
	DefaultQueue string
	// Namespaces, when set, limits the gang, lost-pod and eviction checks to these
	// namespaces (GPU over-commit and queue limits always look at the whole cluster).
	Namespaces []string
}

func (r Rules) withDefaults() Rules {
	if len(r.SchedulerNames) == 0 {
		r.SchedulerNames = []string{"gantry-scheduler"}
	}
	if r.GangGrace <= 0 {
		r.GangGrace = 5 * time.Second
	}
	if r.BoundTime <= 0 {
		r.BoundTime = 60 * time.Second
	}
	if r.DefaultQueue == "" {
		r.DefaultQueue = "default"
	}
	return r
}

// Tracker runs the checks over successive States and Events and keeps the history
// they need. It is not safe for concurrent use; Checker serializes it.
type Tracker struct {
	rules Rules
	ns    sets.Set[string]
	// partialSince is when a bind left a gang partly bound; lastBound is each gang's
	// bound count at the previous observation.
	partialSince map[string]time.Time
	lastBound    map[string]int
	bound        sets.Set[string] // UIDs of pods seen bound
	preempted    map[string]*preemptionCount
	reported     sets.Set[string]
	violations   []Violation
	// observed is false until the first State: what a checker attached to a running
	// cluster finds then is its baseline, not something it saw happen.
	observed bool
}

// NewTracker returns a Tracker with rules (zero fields take their defaults).
func NewTracker(rules Rules) *Tracker {
	rules = rules.withDefaults()
	return &Tracker{
		rules: rules, ns: sets.New(rules.Namespaces...),
		partialSince: map[string]time.Time{}, lastBound: map[string]int{},
		preempted: map[string]*preemptionCount{}, reported: sets.New[string](),
	}
}

func (t *Tracker) inScope(namespace string) bool { return t.ns.Len() == 0 || t.ns.Has(namespace) }

// Violations returns every violation found so far, in the order found.
func (t *Tracker) Violations() []Violation { return append([]Violation(nil), t.violations...) }

// report records vs, each (kind, subject) once, and returns the new ones.
func (t *Tracker) report(vs []Violation) []Violation {
	var fresh []Violation
	for _, v := range vs {
		id := string(v.Kind) + " " + v.Subject
		if t.reported.Has(id) {
			continue
		}
		t.reported.Insert(id)
		fresh = append(fresh, v)
	}
	t.violations = append(t.violations, fresh...)
	return fresh
}

// Observe checks one State and returns the violations it newly finds.
func (t *Tracker) Observe(s *State) []Violation {
	vs := GPUOvercommits(s)
	vs = append(vs, t.partialGangs(s)...)
	vs = append(vs, t.queuesOverLimit(s)...)
	t.observed = true
	for _, v := range UnexplainedPods(s, t.rules.SchedulerNames, t.rules.BoundTime) {
		if t.inScope(namespaceOf(v.Subject)) {
			vs = append(vs, v)
		}
	}
	return t.report(vs)
}

// partialGangs starts a gang's clock when a bind leaves it partly bound (its bound
// count rose and it is partial) and reports it once the clock passes GangGrace. A
// gang that became partial by losing members (a node deleted, pods evicted) starts no
// clock until something of it is bound again: that is not a partial start.
func (t *Tracker) partialGangs(s *State) []Violation {
	var out []Violation
	gangs := Gangs(s)
	for key, g := range gangs {
		if !t.inScope(namespaceOf(key)) {
			continue
		}
		last, seen := t.lastBound[key]
		t.lastBound[key] = g.Bound
		if !g.Partial() {
			delete(t.partialSince, key)
			continue
		}
		if _, running := t.partialSince[key]; !running && ((!seen && t.observed) || (seen && g.Bound > last)) {
			t.partialSince[key] = s.Now
		}
		if since, ok := t.partialSince[key]; ok && s.Now.Sub(since) > t.rules.GangGrace {
			out = append(out, Violation{Kind: PartialGang, Subject: "gang " + key, At: s.Now,
				Message: fmt.Sprintf("partly bound for %s (grace %s): %s", s.Now.Sub(since).Round(time.Millisecond), t.rules.GangGrace, g)})
		}
	}
	for key := range t.lastBound {
		if gangs[key] == nil {
			delete(t.lastBound, key)
			delete(t.partialSince, key)
		}
	}
	return out
}

// queuesOverLimit reports a queue over its GPU limit when one of the pods bound since
// the last observation is charged to it: a queue whose limit was lowered under running
// work is not a scheduling error, a bind past the limit is.
func (t *Tracker) queuesOverLimit(s *State) []Violation {
	parent := map[string]string{}
	for _, q := range s.Queues {
		parent[q.Name] = q.Spec.ParentQueue
	}
	touched := sets.New[string]()
	now := sets.New[string]()
	for _, p := range s.Pods {
		if !holdsResources(p) {
			continue
		}
		uid := string(p.UID)
		now.Insert(uid)
		if !t.observed || t.bound.Has(uid) {
			continue
		}
		q := queueOf(p)
		if q == "" {
			q = t.rules.DefaultQueue
		}
		for seen := sets.New[string](); q != "" && !seen.Has(q); q = parent[q] {
			seen.Insert(q)
			touched.Insert(q)
		}
	}
	t.bound = now
	var out []Violation
	for q, msg := range QueuesOverLimit(s, t.rules.DefaultQueue) {
		if touched.Has(q) {
			out = append(out, Violation{Kind: QueueOverLimit, Subject: "queue " + q, Message: msg + " after a bind", At: s.Now})
		}
	}
	sortViolations(out)
	return out
}

// ObserveEvent counts Preempted Events and reports a pod preempted more than once.
func (t *Tracker) ObserveEvent(e *corev1.Event, now time.Time) []Violation {
	if e.Reason != "Preempted" || e.InvolvedObject.Kind != "Pod" || !t.inScope(e.InvolvedObject.Namespace) {
		return nil
	}
	pod := e.InvolvedObject.Namespace + "/" + e.InvolvedObject.Name
	key := string(e.InvolvedObject.UID)
	if key == "" {
		key = pod
	}
	c := t.preempted[key]
	if c == nil {
		c = &preemptionCount{pod: pod, events: map[string]int32{}}
		t.preempted[key] = c
	}
	c.events[e.Name] = max(c.events[e.Name], eventCount(e))
	if n := c.total(); n > 1 {
		return t.report([]Violation{{Kind: DoubleEviction, Subject: "pod " + pod, At: now,
			Message: fmt.Sprintf("preempted %d times (uid %s); last: %s", n, e.InvolvedObject.UID, e.Message)}})
	}
	return nil
}

// Settled returns nil when the cluster is at rest: no gang partly bound (no grace) and
// every pod of the served schedulers bound or pending with a reason; else an error
// naming what is not.
func (t *Tracker) Settled(s *State) error {
	var problems []string
	for key, g := range Gangs(s) {
		if t.inScope(namespaceOf(key)) && g.Partial() {
			problems = append(problems, fmt.Sprintf("gang %s partly bound: %s", key, g))
		}
	}
	for _, v := range UnexplainedPods(s, t.rules.SchedulerNames, 0) {
		if t.inScope(namespaceOf(v.Subject)) {
			problems = append(problems, v.Subject+" neither bound nor pending with a reason")
		}
	}
	if len(problems) == 0 {
		return nil
	}
	sort.Strings(problems)
	return errors.New(joinLines(problems))
}

// namespaceOf reads the namespace out of "gang ray:NS/NAME", "pod NS/NAME" or "ray:NS/NAME".
func namespaceOf(subject string) string {
	start := 0
	for i, r := range subject {
		if r == ' ' || r == ':' {
			start = i + 1
		}
		if r == '/' {
			return subject[start:i]
		}
	}
	return ""
}

func joinLines(lines []string) string {
	out := ""
	for i, l := range lines {
		if i > 0 {
			out += "\n"
		}
		out += l
	}
	return out
}
