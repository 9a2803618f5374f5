package scheduler

import (
	"cmp"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/model"
)

// A nomination keeps the room a preemption freed for the gang it was freed for:
// nominated gangs go before every queue. It lasts while it serves: until the gang
// binds, or for as long as pods are still terminating on its nominated nodes, but no
// more than Config.VictimTimeoutSeconds past the end of their grace period. A gang
// that can use neither the kept room nor any other (its victims are gone and it still
// does not fit, or its queue now refuses it) loses the nomination in that cycle
// (Plan.Withdrawn) and takes its turn in queue order, as any other gang: it may
// preempt again from there, but it no longer goes first.

// placeNominated binds a nominated gang's minimum where it fits, or keeps its room
// while its victims terminate. It never searches for victims. done is true when the
// minimum is placed; kept when the gang waits for its victims (reported pending).
// When neither, why says why the nomination ends and nothing is reported yet.
func (c *cycle) placeNominated(w *work) (done, kept bool, why string) {
	amounts := podsAmounts(w.core)
	overQuota, overLimit := c.queueRefusal(w, amounts)
	if refused := cmp.Or(overQuota, overLimit); refused != nil {
		// Its victims, still terminating, still count against the queue: they hold
		// their room in the view as well, so nothing else takes it meanwhile.
		if leaving, _ := c.leavingFor(w.core); len(leaving) > 0 {
			c.plan.pend(w, PendingWaitingForVictim, fmt.Sprintf("waiting for %d preempted pods to terminate", len(leaving)))
			return false, true, ""
		}
		return false, false, refused.Error()
	}
	// On its nominated nodes first, where the room is free now or once its victims
	// are gone (placePinned); only then anywhere.
	pods, pinned := pinnedToNominated(w.core), true
	if pods == nil {
		pods, pinned = w.core, false
	}
	placements, unsched := c.s.Placer.PlaceGang(c.view, pods)
	if unsched != nil && c.reserveNominated(w, amounts) {
		return false, true, ""
	}
	if unsched != nil && pinned {
		placements, unsched = c.s.Placer.PlaceGang(c.view, w.core)
	}
	if unsched == nil {
		if c.onRoomStillHeld(w, placements, amounts, false) {
			return false, true, ""
		}
		c.plan.Binds = append(c.plan.Binds, GangBind{Gang: w.gang.ID, Placements: placements})
		c.allocate(w.gang, amounts)
		return true, false, ""
	}
	if _, stuck := c.leavingFor(w.core); stuck > 0 {
		return false, false, fmt.Sprintf("%d preempted pods on its nominated node are still terminating more than %d s past their grace period, and it does not fit elsewhere: %s",
			stuck, c.s.Config.victimTimeout(), unsched.Message)
	}
	return false, false, "its victims are gone and it still does not fit: " + unsched.Message
}

// placeNominatedElastic is placeNominated for a gang whose nominated pods are members
// above its minimum.
func (c *cycle) placeNominatedElastic(w *work) (done, kept bool, why string) {
	placed, waiting := c.placeElasticMembers(w, false)
	switch {
	case placed:
		return true, false, ""
	case waiting:
		return false, true, ""
	}
	return false, false, "its victims are gone and no member above its minimum fits"
}

// withdraw ends w's nomination: the gang loses its place before every queue.
func (c *cycle) withdraw(w *work, why string) {
	wd := Withdrawal{Gang: w.gang.ID, Reason: fmt.Sprintf("nomination withdrawn: %s", why)}
	for _, pods := range [][]*model.Pod{w.core, w.extra} {
		for _, p := range pods {
			if p.NominatedNode != "" {
				wd.Pods = append(wd.Pods, p.ID)
			}
		}
	}
	c.plan.Withdrawn = append(c.plan.Withdrawn, wd)
	w.nominated = false
}

// keepRenominated drops from Withdrawn the gangs nominated again in this cycle: their
// new nomination replaces the old one, and clearing it would undo the new.
func (p *Plan) keepRenominated() {
	if len(p.Withdrawn) == 0 {
		return
	}
	again := map[model.GangID]bool{}
	for _, n := range p.Nominations {
		again[n.Gang] = true
	}
	out := p.Withdrawn[:0]
	for _, wd := range p.Withdrawn {
		if !again[wd.Gang] {
			out = append(out, wd)
		}
	}
	p.Withdrawn = out
}
