package scheduler

import (
	"strings"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Kinds of pending for constraints no node can satisfy (model.Refusal).
const (
	// PendingUnsupported: a member uses a field Gantry does not implement.
	PendingUnsupported PendingKind = "unsupported_field"
	// PendingVolume: a member's claim is missing, lost, bound elsewhere or not bound.
	PendingVolume PendingKind = "volume"
	// PendingInvalid: a member's field cannot be parsed.
	PendingInvalid PendingKind = "invalid_spec"
)

// refusal says why the gang's pending members cannot be placed whatever the cluster
// does: the refusals of its members that must be placed now (the core, or the
// elastic members when the core is placed) (model.Constraints.Refusals), each naming the pod,
// the field and what to change. The kind is the first refusal's.
func refusal(w *work) (PendingKind, string) {
	var kind PendingKind
	var parts []string
	pods := w.core
	if len(pods) == 0 {
		pods = w.extra
	}
	for _, p := range pods {
		if p.Constraints == nil {
			continue
		}
		for _, r := range p.Constraints.Refusals {
			if kind == "" {
				kind = refusalKind(r.Kind)
			}
			parts = append(parts, "pod "+string(p.ID)+": "+r.String())
		}
	}
	return kind, strings.Join(parts, "; ")
}

func refusalKind(k model.RefusalKind) PendingKind {
	switch k {
	case model.RefusalVolume:
		return PendingVolume
	case model.RefusalInvalid:
		return PendingInvalid
	default:
		return PendingUnsupported
	}
}
