package cache

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/gantry-dev/gantry/pkg/gang"
	"github.com/gantry-dev/gantry/pkg/model"
)

// A podSet holds what a map would, through adds and removes that grow it past one
// member and shrink it back, and yields each member once.
func TestPodSetIsASet(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	var s podSet
	want := map[model.PodID]bool{}
	for step := range 5000 {
		id := model.PodID(fmt.Sprint("ns/p", r.IntN(4)))
		if r.IntN(2) == 0 {
			s.add(id)
			want[id] = true
		} else {
			s.remove(id)
			delete(want, id)
		}
		got := map[model.PodID]bool{}
		for m := range s.all() {
			if got[m] {
				t.Fatalf("step %d: %s yielded twice", step, m)
			}
			got[m] = true
		}
		if len(got) != len(want) || s.len() != len(want) {
			t.Fatalf("step %d: set holds %v (len %d), want %v", step, got, s.len(), want)
		}
		for m := range want {
			if !got[m] {
				t.Fatalf("step %d: set holds %v, want %v", step, got, want)
			}
		}
		if len(want) <= 1 && s.many != nil {
			t.Fatalf("step %d: a set of %d keeps a map", step, len(want))
		}
	}
}

// A gang of one pod (every plain pod in a drain) holds no map of its members.
func TestSinglePodGangHoldsNoMap(t *testing.T) {
	c := New([]string{testScheduler}, &gang.StaticLookup{}, "default")
	c.UpsertPod(gpuPod("a", 1, 0, ""))
	id := c.gangOf["ns/a"]
	if id == "" || c.gangPods[id].len() != 1 {
		t.Fatalf("pod ns/a is in gang %q of %d members, want a gang of 1", id, c.gangPods[id].len())
	}
	if c.gangPods[id].many != nil {
		t.Error("a gang of one pod holds a map of its members")
	}
	c.DeletePod("ns", "a")
	if _, ok := c.gangPods[id]; ok {
		t.Error("the gang of a deleted pod is still indexed")
	}
}
