package cache

import (
	"fmt"
	"time"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// KindBelowMinimum is the eviction kind of the members of a gang that fell below its
// minimum (docs/gangs.md): they are evicted so that the gang restarts whole.
const KindBelowMinimum = "gang-below-minimum"

// Timeouts bound how long a gang may stay partial or incomplete.
type Timeouts struct {
	// BelowMinimum is the grace a running gang that lost members below its minimum
	// (with their node, say) gets to get them back before the rest is evicted.
	BelowMinimum time.Duration
	// Incomplete is how long a gang may wait for members that do not exist before
	// it is told so (a condition and an Event on its pods).
	Incomplete time.Duration
}

// SetTimeouts sets the gang timeouts (0 keeps the defaults: 10s and 10m).
func (c *Cache) SetTimeouts(t Timeouts) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if t.BelowMinimum > 0 {
		c.timeouts.BelowMinimum = t.BelowMinimum
	}
	if t.Incomplete > 0 {
		c.timeouts.Incomplete = t.Incomplete
	}
}

var defaultTimeouts = Timeouts{BelowMinimum: 10 * time.Second, Incomplete: 10 * time.Minute}

// gangHealth is when each gang was first seen partial (members bound, fewer than
// its minimum) or incomplete (members missing), and which incomplete gangs were
// reported.
type gangHealth struct {
	partialSince    map[model.GangID]time.Time
	incompleteSince map[model.GangID]time.Time
	reported        map[model.GangID]bool
	// wholeAt is the minimum each gang last ran whole at, as this process saw it.
	// A gang whose minimum was raised since (a RayCluster's minReplicas scaled up)
	// runs below the new minimum until its new members are placed, but has lost
	// nothing: it is not partial while it keeps the members it was whole with.
	wholeAt map[model.GangID]int
}

func newGangHealth() gangHealth {
	return gangHealth{partialSince: map[model.GangID]time.Time{}, incompleteSince: map[model.GangID]time.Time{},
		reported: map[model.GangID]bool{}, wholeAt: map[model.GangID]int{}}
}

// checkHealth notes whether a gang just regrouped is partial or incomplete. Caller
// holds mu.
func (c *Cache) checkHealth(id model.GangID) {
	g := c.snap.Gangs[id]
	if g == nil {
		delete(c.health.partialSince, id)
		delete(c.health.incompleteSince, id)
		delete(c.health.reported, id)
		delete(c.health.wholeAt, id)
		return
	}
	if c.running(g) >= g.MinMember {
		c.health.wholeAt[id] = g.MinMember
	}
	if _, seen := c.health.partialSince[id]; !seen && c.partial(g) {
		c.health.partialSince[id] = c.clock()
	}
	_, seen := c.health.incompleteSince[id]
	switch {
	case g.Missing == "":
		delete(c.health.incompleteSince, id)
		delete(c.health.reported, id)
	case !seen:
		c.health.incompleteSince[id] = c.clock()
	}
}

// partial reports whether a gang runs below its minimum because it lost members:
// some members bound (or assumed) and not terminating, fewer than MinMember with the
// succeeded ones, and fewer than it last ran whole with. A gang whose minimum was
// raised while it ran whole is growing, not partial: its new members are placed
// together when they fit, and it is evicted only if it loses members it had.
// Caller holds mu.
func (c *Cache) partial(g *model.Gang) bool {
	n := c.running(g)
	if n == 0 || n >= g.MinMember {
		return false
	}
	was, ok := c.health.wholeAt[g.ID]
	return !ok || was >= g.MinMember || n < was
}

// running is how many of a gang's members run or ran to completion: bound (or
// assumed) and not terminating, and succeeded. 0 when none is bound. Caller holds mu.
func (c *Cache) running(g *model.Gang) int {
	bound := 0
	for id := range c.gangPods[g.ID].all() {
		if p := c.snap.Pods[id]; p != nil && p.Bound() && !p.Terminating {
			bound++
		}
	}
	if bound == 0 {
		return 0
	}
	return bound + g.Succeeded
}

// commitHealth turns gangs partial for longer than the grace into evictions of their
// bound members (marked terminating at once), and gangs incomplete for longer than
// allowed into pending reports, once each. Caller holds mu.
func (c *Cache) commitHealth(d *Decisions, now time.Time) {
	for id, since := range c.health.partialSince {
		g := c.snap.Gangs[id]
		if g == nil || !c.partial(g) {
			delete(c.health.partialSince, id)
			continue
		}
		if now.Sub(since) < c.timeouts.BelowMinimum {
			continue
		}
		delete(c.health.partialSince, id)
		bound := 0
		var victims []*model.Pod
		for pid := range c.gangPods[id].all() {
			if p := c.snap.Pods[pid]; p != nil && p.Bound() && !p.Terminating {
				bound++
				victims = append(victims, p)
			}
		}
		reason := fmt.Sprintf("gang %s runs %d of its minimum %d members for more than %s: its other members are evicted so that it restarts whole",
			id, bound+g.Succeeded, g.MinMember, c.timeouts.BelowMinimum)
		for _, p := range victims {
			d.Evictions = append(d.Evictions, Victim{Eviction: scheduler.Eviction{Pod: p.ID, Gang: id, Preemptor: id, Kind: KindBelowMinimum, Reason: reason}, Pod: p, GPUMemory: c.heldGPUMemory(p)})
			c.markTerminating(p.ID)
		}
	}
	for id, since := range c.health.incompleteSince {
		g := c.snap.Gangs[id]
		if g == nil || g.Missing == "" || c.health.reported[id] || now.Sub(since) < c.timeouts.Incomplete {
			continue
		}
		c.health.reported[id] = true
		pg := PendingGang{Pending: scheduler.Pending{Gang: id, Kind: scheduler.PendingIncomplete,
			Reason: fmt.Sprintf("gang %s has been incomplete for more than %s: %s", id, c.timeouts.Incomplete, g.Missing)}}
		for pid := range c.gangPods[id].all() {
			if p := c.snap.Pods[pid]; p != nil {
				pg.Pods = append(pg.Pods, p)
				pg.Pending.Pods = append(pg.Pending.Pods, pid)
			}
		}
		d.Incomplete = append(d.Incomplete, pg)
	}
}

// IncompleteOverdue reports whether a gang has waited longer than the incomplete-gang
// timeout for members that do not exist (Commit has told it so, in
// Decisions.Incomplete), and that timeout. It stays true until the gang is whole or
// gone.
func (c *Cache) IncompleteOverdue(id model.GangID) (time.Duration, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.timeouts.Incomplete, c.health.reported[id]
}
