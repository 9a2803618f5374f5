package fairshare

import (
	"errors"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// The quota check of non-preemptible work counts only non-preemptible work, walks
// every ancestor and names the queue whose quota it would pass.
func TestWouldExceedQuota(t *testing.T) {
	gpuOnly := func(quota float64) map[model.ResourceName]model.QueueResource {
		return map[model.ResourceName]model.QueueResource{gpu: bound(quota, -1, 1)}
	}
	queues := tree(
		queue("d1", "", 100, gpuOnly(1)),
		queue("d2", "", 100, gpuOnly(1)),
		queue("team-a", "d1", 100, gpuOnly(2)),
		queue("team-b", "d2", 100, gpuOnly(1)),
	)
	s, err := Compute(queues, Amounts{gpu: 4}, map[string]Usage{
		// team-b is full of preemptible work: it never blocks non-preemptible work.
		"team-b": {Allocated: Amounts{gpu: 1}, Requested: Amounts{gpu: 1}},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WouldExceedQuota("team-b", Amounts{gpu: 1, cpu: 500}); err != nil {
		t.Errorf("team-b, full of preemptible work: %v; want room (and no cpu quota, which it does not declare)", err)
	}
	err = s.WouldExceedQuota("team-a", Amounts{gpu: 2})
	var qerr *QuotaError
	if !errors.As(err, &qerr) || qerr.Queue != "d1" {
		t.Fatalf("team-a asking 2 GPUs under d1 (quota 1): %v, want a *QuotaError naming d1", err)
	}
	if !strings.Contains(err.Error(), "queue d1 (a parent of team-a) would go past its GPU quota of 1") {
		t.Errorf("message %q does not name the parent and its quota", err)
	}
	s.AllocateNonPreemptible("team-b", Amounts{gpu: 1})
	if err := s.WouldExceedQuota("team-b", Amounts{gpu: 1}); err == nil {
		t.Error("team-b holding 1 non-preemptible GPU of its quota of 1 still takes another")
	}
}
