package kube

import (
	"errors"
	"fmt"
	"os"
	"time"

	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// Config is the scheduler's policy file (--config). Unknown keys are an error, so a
// misspelt key cannot silently do nothing.
type Config struct {
	// Policy is the placement policy: "fgd" (default, fragmentation-aware),
	// "bestfit" or "spread".
	Policy string `json:"policy,omitempty"`
	// Preemption enables preempt and reclaim (default true).
	Preemption *bool `json:"preemption,omitempty"`
	// MinRuntime protects a gang from preemption for this long after it starts
	// (default 0: no protection).
	MinRuntime Duration `json:"minRuntime,omitempty"`
	// EvictionQPS and EvictionBurst bound evictions (default 10 and 100).
	EvictionQPS   float32 `json:"evictionQPS,omitempty"`
	EvictionBurst int     `json:"evictionBurst,omitempty"`
	// BindWorkers is how many bindings are in flight at once (default 64).
	BindWorkers int `json:"bindWorkers,omitempty"`
	// DefaultQueue is the queue that pods with no queue label are charged to, so that
	// its quota and limit apply to them (default "default", the queue the chart
	// creates, as in KAI Scheduler). The scheduler creates it at start when it is
	// missing.
	DefaultQueue string `json:"defaultQueue,omitempty"`
	// GangBelowMinimumGrace is how long a running gang that lost members below its
	// minimum (with their node, say) may wait for them before the rest is evicted,
	// so that it restarts whole (default 10s).
	GangBelowMinimumGrace Duration `json:"gangBelowMinimumGrace,omitempty"`
	// IncompleteGangTimeout is how long a gang may wait for members that do not
	// exist before its pods get a GangIncomplete condition and Event (default 10m).
	IncompleteGangTimeout Duration `json:"incompleteGangTimeout,omitempty"`
}

// DefaultQueueName is DefaultQueue with its default.
func (c Config) DefaultQueueName() string {
	if c.DefaultQueue == "" {
		return "default"
	}
	return c.DefaultQueue
}

// Duration is a time.Duration written as "30s" or "5m".
type Duration struct{ time.Duration }

func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := yaml.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("duration must be a string such as \"30s\": %w", err)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("duration %q: %w", s, err)
	}
	d.Duration = v
	return nil
}

func (d Duration) MarshalJSON() ([]byte, error) { return []byte(`"` + d.String() + `"`), nil }

// LoadConfig reads a policy file; an empty path gives the defaults.
func LoadConfig(path string) (Config, error) {
	var cfg Config
	if path == "" {
		return cfg, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return cfg, fmt.Errorf("read config: %w", err)
	}
	// Keys are matched exactly: encoding/json would take "minRunTime" for
	// "minRuntime", and a key that only looks right must not be accepted.
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	strictErrs, err := kjson.UnmarshalStrict(js, &cfg, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err == nil && len(strictErrs) > 0 {
		err = errors.Join(strictErrs...)
	}
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w (known keys: policy, preemption, minRuntime, evictionQPS, evictionBurst, bindWorkers, defaultQueue, gangBelowMinimumGrace, incompleteGangTimeout)", path, err)
	}
	return cfg, nil
}

// PreemptionEnabled is Preemption with its default.
func (c Config) PreemptionEnabled() bool { return c.Preemption == nil || *c.Preemption }
