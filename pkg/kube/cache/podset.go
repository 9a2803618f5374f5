package cache

import (
	"iter"

	"github.com/gantry-dev/gantry/pkg/model"
)

// podSet is the members of one gang. Most gangs are single pods (a drain of
// 100,000 plain pods is 100,000 gangs), and a Go map of one entry costs about
// 200 B: one member is held in the set itself, a map only from the second.
// A podSet is a value: write it back to its map after add or remove.
type podSet struct {
	one  model.PodID
	many map[model.PodID]struct{}
}

func (s podSet) len() int {
	switch {
	case s.many != nil:
		return len(s.many)
	case s.one != "":
		return 1
	}
	return 0
}

func (s *podSet) add(id model.PodID) {
	switch {
	case s.many != nil:
		s.many[id] = struct{}{}
	case s.one == "" || s.one == id:
		s.one = id
	default:
		s.many = map[model.PodID]struct{}{s.one: {}, id: {}}
		s.one = ""
	}
}

func (s *podSet) remove(id model.PodID) {
	if s.many == nil {
		if s.one == id {
			s.one = ""
		}
		return
	}
	delete(s.many, id)
	if len(s.many) == 1 {
		for last := range s.many {
			s.one = last
		}
		s.many = nil
	}
}

// all yields the members, in no particular order; removing members while it runs
// is allowed, as when ranging over a map.
func (s podSet) all() iter.Seq[model.PodID] {
	return func(yield func(model.PodID) bool) {
		if s.many == nil {
			if s.one != "" {
				yield(s.one)
			}
			return
		}
		for id := range s.many {
			if !yield(id) {
				return
			}
		}
	}
}
