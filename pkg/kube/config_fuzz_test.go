package kube

import (
	"encoding/json"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"
)

// FuzzSchedulerConfig: the scheduler's --config file. Whatever the bytes, reading
// them never panics; a file accepted has no value the scheduler would have to replace
// silently (every duration ≥ 0, finite non-negative rates, bindWorkers in range), and
// written back as JSON (valid YAML) it reads the same. A refusal says what to write.
func FuzzSchedulerConfig(f *testing.F) {
	for _, s := range []string{
		"", "policy: bestfit\npreemption: false\nminRuntime: 90s\nevictionQPS: 5\n",
		"policy: spread\nevictionBurst: 100\nbindWorkers: 64\ndefaultQueue: team-a\n",
		"gangBelowMinimumGrace: 10s\nincompleteGangTimeout: 10m\nstallTimeout: 3m\n",
		"stallTimeout: -5m\n", "evictionQPS: .nan\n", "evictionQPS: 1e40\n", "bindWorkers: 1e3\n",
		"minRuntime: 90\n", "{\"policy\": \"fgd\", \"policy\": \"spread\"}", "defaultQueue: Team_A\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		cfg, err := parseConfig("fuzz.yaml", b)
		if err != nil {
			if !strings.HasPrefix(err.Error(), "config fuzz.yaml: ") {
				t.Fatalf("error does not name the file: %v", err)
			}
			return
		}
		for key, d := range map[string]time.Duration{
			"minRuntime": cfg.MinRuntime.Duration, "gangBelowMinimumGrace": cfg.GangBelowMinimumGrace.Duration,
			"incompleteGangTimeout": cfg.IncompleteGangTimeout.Duration, "stallTimeout": cfg.StallTimeout.Duration,
		} {
			if d < 0 {
				t.Fatalf("accepted a negative %s (%v) from %q", key, d, b)
			}
		}
		if q := float64(cfg.EvictionQPS); q < 0 || math.IsNaN(q) || math.IsInf(q, 0) {
			t.Fatalf("accepted evictionQPS %v from %q", q, b)
		}
		if cfg.EvictionBurst < 0 || cfg.BindWorkers < 0 || cfg.BindWorkers > maxBindWorkers {
			t.Fatalf("accepted evictionBurst %d, bindWorkers %d from %q", cfg.EvictionBurst, cfg.BindWorkers, b)
		}
		js, err := json.Marshal(cfg)
		if err != nil {
			t.Fatalf("accepted config does not marshal: %v", err)
		}
		again, err := parseConfig("fuzz.yaml", js)
		if err != nil {
			t.Fatalf("accepted %q, but not its own JSON %s: %v", b, js, err)
		}
		if !reflect.DeepEqual(cfg, again) {
			t.Fatalf("%q read as %+v, its JSON %s as %+v", b, cfg, js, again)
		}
	})
}
