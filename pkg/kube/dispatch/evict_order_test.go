package dispatch

import (
	"context"
	"strings"
	"testing"

	"k8s.io/client-go/tools/events"
)

// The eviction is the first call for a victim, and a victim its PodDisruptionBudget
// keeps is not marked as a preemption target: before, the DisruptionTarget patch went
// first and held each eviction back by one round trip (issue 19).
func TestEvictionGoesBeforeTheVictimIsMarked(t *testing.T) {
	client, _ := evictionClient("kept")
	e := newEvictor(client, events.NewFakeRecorder(10), 100, 100)
	_, _, err := e.evictFor(context.Background(), victims("gone", "kept"), func() bool { return true })
	if err == nil {
		t.Fatal("the PDB's refusal of kept was not reported")
	}
	var calls []string
	for _, a := range client.Actions() {
		name := ""
		if n, ok := a.(interface{ GetName() string }); ok {
			name = n.GetName()
		}
		calls = append(calls, a.GetVerb()+" "+a.GetSubresource()+" "+name)
	}
	got := strings.Join(calls, "; ")
	if strings.Contains(got, "patch status kept") {
		t.Errorf("kept, which its PDB protects, was marked as a preemption target: %s", got)
	}
	evict := strings.Index(got, "create eviction")
	patch := strings.Index(got, "patch status gone")
	if evict < 0 || patch < 0 || patch < evict {
		t.Errorf("calls %s: want the eviction of gone before its DisruptionTarget patch", got)
	}
}
