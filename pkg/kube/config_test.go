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
	if def, _ := LoadConfig(""); !def.PreemptionEnabled() || def.Policy != "" {
		t.Errorf("defaults = %+v, want preemption on and the default policy", def)
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
