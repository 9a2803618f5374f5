package preempt_test

import (
	"errors"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/preempt"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// The reclaim of issue 12's third repro, as the search reports it: by quota, in words
// that name the rule.
func TestReclaimByQuotaSaysSo(t *testing.T) {
	res, err := find(t, sc.Scenario{
		Nodes:  []sc.Node{{Name: "n", GPUs: 2}},
		Queues: []sc.Queue{{Name: "team-a", Quota: 1}, {Name: "team-b", Quota: 1}},
		Gangs: []sc.Gang{
			{Name: "train", Queue: "team-a", Priority: 50, GPUs: 2, On: "n"},
			{Name: "job", Queue: "team-b", Priority: 50, GPUs: 1},
		},
	}, "job")
	if err != nil {
		t.Fatal(err)
	}
	if res.Kind != preempt.KindReclaim || len(res.VictimGangs) != 1 || res.VictimGangs[0] != "train" {
		t.Fatalf("kind %q, victims %v; want a reclaim of train", res.Kind, res.VictimGangs)
	}
	for _, want := range []string{"queue team-b holds 0 GPUs, within its quota of 1", "from queue team-a (2 GPUs, above its quota of 1)"} {
		if !strings.Contains(res.Reason, want) {
			t.Errorf("reason %q does not say %q", res.Reason, want)
		}
	}
}

// A queue below its fair share whose gang would take it above is refused with the
// rule that refused it, not told it is "not below its fair share".
func TestReclaimRefusalNamesTheRules(t *testing.T) {
	_, err := find(t, sc.Scenario{
		Nodes:  []sc.Node{{Name: "n", GPUs: 4}},
		Queues: []sc.Queue{{Name: "team-a"}, {Name: "team-b"}},
		Gangs: []sc.Gang{
			{Name: "a1", Queue: "team-a", GPUs: 1, On: "n"},
			{Name: "a2", Queue: "team-a", GPUs: 1, On: "n"},
			{Name: "a3", Queue: "team-a", GPUs: 1, On: "n"},
			{Name: "big", Queue: "team-b", GPUs: 3},
		},
	}, "big")
	if !errors.Is(err, preempt.ErrNoVictims) {
		t.Fatalf("Find = %v, want ErrNoVictims", err)
	}
	for _, want := range []string{
		"by quota, the gang would take its queue past its GPU quota",
		"by fair share, the gang would take its queue above its GPU fair share",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not say %q", err, want)
		}
	}
	if strings.Contains(err.Error(), "not below its GPU fair share") {
		t.Errorf("error %q says the queue is not below its fair share; it is (0 of 2)", err)
	}
}
