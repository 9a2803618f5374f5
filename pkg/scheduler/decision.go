package scheduler

import (
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/preempt"
)

// Preemption is one preemption decision: who preempts, whom, what it frees and why.
// It is what the dispatcher logs at the default level and counts in metrics; the
// Evictions of the same Plan carry it out.
type Preemption struct {
	Preemptor model.GangID
	// Kind is "preempt" or "reclaim".
	Kind        string
	Victims     []model.PodID
	VictimGangs []model.GangID
	// Nodes are where the preemptor goes once the victims are gone.
	Nodes []string
	// WholeGPUs counts the whole GPUs the victims hold; SharedVictims the victims
	// holding GPU shares, and SharedBytes the memory of those shares.
	WholeGPUs, SharedVictims int
	SharedBytes              int64
	// FreedBytes is the GPU memory the evictions make free (measured where the node
	// agent reports it); NeededBytes what the preemptor needs free on its GPUs;
	// ShortfallBytes the part of that which was not free. FreedBytes/ShortfallBytes
	// is the over-eviction ratio.
	FreedBytes, NeededBytes, ShortfallBytes int64
	// Reason says why these victims, in one line for an Event.
	Reason string
}

func preemptionOf(gang model.GangID, r *preempt.Result) Preemption {
	p := Preemption{
		Preemptor: gang, Kind: r.Kind, VictimGangs: r.VictimGangs,
		WholeGPUs: r.WholeGPUs, SharedVictims: r.SharedVictims, SharedBytes: r.SharedBytes,
		FreedBytes: r.FreedBytes, NeededBytes: r.NeededBytes, ShortfallBytes: r.ShortfallBytes, Reason: r.Reason,
	}
	for _, v := range r.Victims {
		p.Victims = append(p.Victims, v.ID)
	}
	for _, pl := range r.Placements {
		if pl.Node != "" {
			p.Nodes = appendOnce(p.Nodes, pl.Node)
		}
	}
	return p
}

func appendOnce(list []string, s string) []string {
	for _, x := range list {
		if x == s {
			return list
		}
	}
	return append(list, s)
}

// OverEviction is FreedBytes/ShortfallBytes, or 0 when nothing was lacking.
func (p Preemption) OverEviction() float64 {
	if p.ShortfallBytes <= 0 {
		return 0
	}
	return float64(p.FreedBytes) / float64(p.ShortfallBytes)
}

// KeysAndValues are the decision as structured-log pairs, for
// klog.InfoS("Preemption", p.KeysAndValues()...).
func (p Preemption) KeysAndValues() []any {
	return []any{
		"preemptor", p.Preemptor, "kind", p.Kind,
		"victimGangs", p.VictimGangs, "victims", len(p.Victims), "nodes", p.Nodes,
		"wholeGPUs", p.WholeGPUs, "sharedVictims", p.SharedVictims, "sharedBytes", p.SharedBytes,
		"freedBytes", p.FreedBytes, "neededBytes", p.NeededBytes, "shortfallBytes", p.ShortfallBytes,
		"overEviction", p.OverEviction(), "reason", p.Reason,
	}
}
