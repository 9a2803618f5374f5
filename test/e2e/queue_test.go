package e2e

import (
	"context"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/test/testenv"
)

// The seed's queues.yaml applies with only its apiVersion changed, and each kind of
// bad Queue is refused with a message that says what to change.
func TestQueuesValidateOnTheAPIServer(t *testing.T) {
	requireEnv(t)
	ctx := context.Background()
	applySeed(t, "", "queues.yaml")
	queue := func(name, parent, gpu string) string {
		s := "apiVersion: scheduling.gantry.dev/v1alpha1\nkind: Queue\nmetadata:\n  name: " + name + "\nspec:\n"
		if parent != "" {
			s += "  parentQueue: " + parent + "\n"
		}
		if gpu != "" {
			s += "  resources:\n    gpu: " + gpu + "\n"
		}
		return s
	}
	// A cycle needs two queues that exist first.
	if _, err := testenv.Apply(ctx, env.Config, "", []byte(queue("cyc-a", "", "")+"---\n"+queue("cyc-b", "cyc-a", ""))); err != nil {
		t.Fatalf("apply cyc-a, cyc-b: %v", err)
	}
	tests := []struct {
		name, manifest, want string
	}{
		{"unknown parent", queue("orphan", "no-such-queue", ""), "no-such-queue"},
		{"cycle", queue("cyc-a", "cyc-b", ""), "cycle"},
		{"self parent", queue("selfish", "selfish", ""), "parentQueue"},
		{"negative quota", queue("neg", "", "{quota: -2, limit: -1, overQuotaWeight: 1}"), "quota"},
		{"limit below quota", queue("tight", "", "{quota: 4, limit: 2, overQuotaWeight: 1}"), "limit"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := testenv.Apply(ctx, env.Config, "", []byte(tt.manifest))
			if err == nil {
				t.Fatalf("the API server accepted a Queue with %s", tt.name)
			}
			if !strings.Contains(err.Error(), tt.want) {
				t.Errorf("error %q does not mention %q", err, tt.want)
			}
		})
	}
}
