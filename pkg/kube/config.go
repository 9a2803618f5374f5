package kube

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/pkg/placement"
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
	// BindWorkers is how many bindings are in flight at once (default 32).
	BindWorkers int `json:"bindWorkers,omitempty"`
	// DefaultQueue is the queue that pods with no queue label are charged to, so that
	// its quota and limit apply to them (default "default", as in KAI Scheduler).
	// While it does not exist they wait, with a reason that names it.
	DefaultQueue string `json:"defaultQueue,omitempty"`
	// CreateDefaultQueue: the scheduler creates DefaultQueue at start when it is
	// missing (default true; pkg/bootstrap). false leaves it to the cluster admin
	// (the chart's defaultQueue.create=false, a GitOps repository that owns it).
	CreateDefaultQueue *bool `json:"createDefaultQueue,omitempty"`
	// GangBelowMinimumGrace is how long a running gang that lost members below its
	// minimum (with their node, say) may wait for them before the rest is evicted,
	// so that it restarts whole (default 10s).
	GangBelowMinimumGrace Duration `json:"gangBelowMinimumGrace,omitempty"`
	// IncompleteGangTimeout is how long a gang may wait for members that do not
	// exist before its pods get a GangIncomplete condition and Event (default 10m).
	IncompleteGangTimeout Duration `json:"incompleteGangTimeout,omitempty"`
	// StallTimeout is how long the scheduling loop may go without completing a
	// cycle while pods wait before /healthz fails and the kubelet restarts the
	// scheduler (default 3m).
	StallTimeout Duration `json:"stallTimeout,omitempty"`
}

// DefaultQueueName is DefaultQueue with its default.
func (c Config) DefaultQueueName() string {
	if c.DefaultQueue == "" {
		return "default"
	}
	return c.DefaultQueue
}

// CreatesDefaultQueue is CreateDefaultQueue with its default.
func (c Config) CreatesDefaultQueue() bool {
	return c.CreateDefaultQueue == nil || *c.CreateDefaultQueue
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
	return parseConfig(path, b)
}

// parseConfig reads a policy file's contents; path names it in errors.
func parseConfig(path string, b []byte) (Config, error) {
	var cfg Config
	// Keys are matched exactly: encoding/json would take "minRunTime" for
	// "minRuntime", and a key that only looks right must not be accepted.
	js, err := yaml.YAMLToJSON(b)
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, finiteHint(err))
	}
	strictErrs, err := kjson.UnmarshalStrict(js, &cfg, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
	if err == nil && len(strictErrs) > 0 {
		err = errors.Join(strictErrs...)
	}
	if err != nil {
		return cfg, fmt.Errorf("config %s: %w (known keys: policy, preemption, minRuntime, evictionQPS, evictionBurst, bindWorkers, defaultQueue, gangBelowMinimumGrace, incompleteGangTimeout, stallTimeout)", path, err)
	}
	if err := cfg.Validate(); err != nil {
		return cfg, fmt.Errorf("config %s: %w", path, err)
	}
	return cfg, nil
}

// finiteHint adds what to do to the error YAML's .nan and .inf give
// ("json: unsupported value: NaN").
func finiteHint(err error) error {
	if strings.Contains(err.Error(), "unsupported value") {
		return fmt.Errorf("%w: every number must be finite (no .nan or .inf)", err)
	}
	return err
}

// maxBindWorkers bounds bindWorkers: each is a goroutine with a connection's worth of
// API calls in flight, and the API server's own limit on requests in flight (its
// --max-requests-inflight, 400 by default) is far below it.
const maxBindWorkers = 10000

// Validate refuses values the scheduler would otherwise take silently (a negative
// worker count replaced by the default, a negative minRuntime protecting nothing),
// every problem at once, each saying what to write.
func (c Config) Validate() error {
	var errs []error
	if _, err := placement.New(c.Policy); err != nil {
		errs = append(errs, fmt.Errorf("policy: %w", err))
	}
	for _, d := range []struct {
		key string
		v   time.Duration
		def string
	}{
		{"minRuntime", c.MinRuntime.Duration, "0s, no protection"},
		{"gangBelowMinimumGrace", c.GangBelowMinimumGrace.Duration, "10s"},
		{"incompleteGangTimeout", c.IncompleteGangTimeout.Duration, "10m"},
		{"stallTimeout", c.StallTimeout.Duration, "3m"},
	} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("%s: %s is negative: write a duration of 0s or more such as \"5m\", or leave it out for the default (%s)", d.key, d.v, d.def))
		}
	}
	if c.EvictionQPS < 0 || math.IsNaN(float64(c.EvictionQPS)) || math.IsInf(float64(c.EvictionQPS), 0) {
		errs = append(errs, fmt.Errorf("evictionQPS: %v: write a positive number of evictions per second, or leave it out for the default (10)", c.EvictionQPS))
	}
	if c.EvictionBurst < 0 {
		errs = append(errs, fmt.Errorf("evictionBurst: %d is negative: write a positive whole number, or leave it out for the default (100)", c.EvictionBurst))
	}
	if c.BindWorkers < 0 || c.BindWorkers > maxBindWorkers {
		errs = append(errs, fmt.Errorf("bindWorkers: %d: write a whole number from 1 to %d, or leave it out for the default (32)", c.BindWorkers, maxBindWorkers))
	}
	if c.DefaultQueue != "" {
		if msgs := validation.IsDNS1123Subdomain(c.DefaultQueue); len(msgs) > 0 {
			errs = append(errs, fmt.Errorf("defaultQueue: %q is not a Queue name: %s", c.DefaultQueue, strings.Join(msgs, "; ")))
		}
	}
	return errors.Join(errs...)
}

// PreemptionEnabled is Preemption with its default.
func (c Config) PreemptionEnabled() bool { return c.Preemption == nil || *c.Preemption }
