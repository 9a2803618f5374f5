package kube

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func writeConfig(t *testing.T, body string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gantry.yaml")
	if err := os.WriteFile(p, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestLoadConfig(t *testing.T) {
	cfg, err := LoadConfig(writeConfig(t, "policy: bestfit\npreemption: false\nminRuntime: 90s\nevictionQPS: 5\n"))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Policy != "bestfit" || cfg.PreemptionEnabled() || cfg.MinRuntime.Duration != 90*time.Second || cfg.EvictionQPS != 5 {
		t.Errorf("config = %+v", cfg)
	}
	if def, _ := LoadConfig(""); !def.PreemptionEnabled() || def.Policy != "" || !def.CreatesDefaultQueue() || def.DefaultQueueName() != "default" {
		t.Errorf("defaults = %+v, want preemption on, the default policy, the default queue created", def)
	}
	cfg, err = LoadConfig(writeConfig(t, "defaultQueue: team-default\ncreateDefaultQueue: false\n"))
	if err != nil || cfg.CreatesDefaultQueue() || cfg.DefaultQueueName() != "team-default" {
		t.Errorf("createDefaultQueue: false: %+v, %v", cfg, err)
	}
}

// A misspelt key must fail loudly, not silently do nothing (PITFALLS: docs that drift).
func TestLoadConfigRejectsUnknownKeys(t *testing.T) {
	for body, want := range map[string]string{
		"minRunTime: 90s\n":  "minRunTime",
		"preemtion: false\n": "preemtion",
		"minRuntime: 90\n":   "duration",
	} {
		_, err := LoadConfig(writeConfig(t, body))
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("config %q: err = %v, want one naming %q", body, err, want)
		}
	}
}

// Values the scheduler would take silently are refused, each problem named with what
// to write; zero stays "the default" and is accepted.
func TestLoadConfigRefusesBadValues(t *testing.T) {
	for _, tt := range []struct {
		body string
		want []string // parts of the error; none: accepted
	}{
		{"minRuntime: -5m\n", []string{"minRuntime: -5m0s is negative", "0s or more"}},
		{"bindWorkers: -3\n", []string{"bindWorkers: -3", "from 1 to 10000"}},
		{"bindWorkers: 1000000\n", []string{"bindWorkers: 1000000"}},
		{"evictionQPS: -1\n", []string{"evictionQPS: -1", "positive number"}},
		{"evictionBurst: -20\n", []string{"evictionBurst: -20 is negative"}},
		{"gangBelowMinimumGrace: -1s\n", []string{"gangBelowMinimumGrace: -1s is negative"}},
		{"incompleteGangTimeout: -10m\n", []string{"incompleteGangTimeout: -10m0s is negative"}},
		{"stallTimeout: -5m\n", []string{"stallTimeout: -5m0s is negative"}}, // FuzzSchedulerConfig
		{"policy: best-fit\n", []string{"policy:", "best-fit", "bestfit"}},
		{"defaultQueue: Team A\n", []string{"defaultQueue: \"Team A\" is not a Queue name"}},
		{"evictionQPS: .nan\n", []string{"finite"}},
		{"minRuntime: -1m\nbindWorkers: -1\n", []string{"minRuntime", "bindWorkers"}}, // all at once
		{"minRuntime: 0s\nbindWorkers: 0\nevictionQPS: 0\nevictionBurst: 0\n", nil},
		{"policy: spread\nbindWorkers: 8\ndefaultQueue: team-a\nincompleteGangTimeout: 2m\n", nil},
	} {
		_, err := LoadConfig(writeConfig(t, tt.body))
		if len(tt.want) == 0 {
			if err != nil {
				t.Errorf("config %q refused: %v", tt.body, err)
			}
			continue
		}
		if err == nil {
			t.Errorf("config %q accepted, want an error with %q", tt.body, tt.want)
			continue
		}
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("config %q: error %q, want one containing %q", tt.body, err, w)
			}
		}
	}
}
