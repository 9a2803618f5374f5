package chaos

import (
	"testing"

	"github.com/gantry-dev/gantry/test/invariant"
)

// A round's result line tells a broken promise from a harness that ran out of time.
// Runs without a control plane (also under -short).
func TestVerdictSeparatesViolationsFromHarness(t *testing.T) {
	v := func(k invariant.Kind) invariant.Violation { return invariant.Violation{Kind: k} }
	for _, c := range []struct {
		vs            []invariant.Violation
		claims, harns []string
		want          string
	}{
		{want: "PASS"},
		{harns: []string{"training gangs not bound: context deadline exceeded"}, want: "HARNESS"},
		{vs: []invariant.Violation{v(invariant.NotSettled)}, harns: []string{"x"}, want: "NOT-SETTLED"},
		{vs: []invariant.Violation{v(invariant.NotSettled), v(invariant.LostPod)}, want: "VIOLATION"},
		{vs: []invariant.Violation{v(invariant.GPUOvercommit)}, want: "VIOLATION"},
		{claims: []string{"claim allocated for nobody"}, harns: []string{"x"}, want: "VIOLATION"},
	} {
		if got, _ := verdict(c.vs, c.claims, c.harns); got != c.want {
			t.Errorf("verdict(%v, %v, %v) = %s, want %s", c.vs, c.claims, c.harns, got, c.want)
		}
	}
}
