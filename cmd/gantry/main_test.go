package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestRunDispatch(t *testing.T) {
	var stderr bytes.Buffer
	if code := run(context.Background(), []string{"frobnicate"}, &stderr); code != 2 {
		t.Fatalf("unknown command exit code = %d, want 2", code)
	}
	if !strings.Contains(stderr.String(), `unknown command "frobnicate"`) || !strings.Contains(stderr.String(), "sim") {
		t.Fatalf("stderr = %q, want the error and the list of commands", stderr.String())
	}
	stderr.Reset()
	if code := run(context.Background(), []string{"sim", "alibaba"}, &stderr); code != 2 {
		t.Fatalf("sim with an unknown trace: exit code = %d, want 2 (%s)", code, stderr.String())
	}
}

func TestParseSeeds(t *testing.T) {
	tests := []struct {
		spec string
		want []uint64
		ok   bool
	}{
		{"42-51", []uint64{42, 43, 44, 45, 46, 47, 48, 49, 50, 51}, true},
		{"1,5,7-9", []uint64{1, 5, 7, 8, 9}, true},
		{"7", []uint64{7}, true},
		{"9-7", nil, false},
		{"x", nil, false},
		{"", nil, false},
	}
	for _, tt := range tests {
		got, err := parseSeeds(tt.spec)
		if (err == nil) != tt.ok || len(got) != len(tt.want) {
			t.Errorf("parseSeeds(%q) = %v, %v", tt.spec, got, err)
			continue
		}
		for i := range got {
			if got[i] != tt.want[i] {
				t.Errorf("parseSeeds(%q) = %v, want %v", tt.spec, got, tt.want)
				break
			}
		}
	}
}

func TestSimOpenbJSONAndOutputs(t *testing.T) {
	dir := t.TempDir()
	nodes := filepath.Join(dir, "nodes.csv")
	pods := filepath.Join(dir, "pods.csv")
	os.WriteFile(nodes, []byte("sn,cpu_milli,memory_mib,gpu,model\na,32000,65536,4,T4\nb,32000,65536,4,T4\n"), 0o644)
	os.WriteFile(pods, []byte("name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"+
		"p0,4000,1024,1,1000,\np1,2000,1024,1,500,\np2,1000,512,0,0,\np3,8000,4096,2,1000,T4\n"), 0o644)
	out := filepath.Join(dir, "out")
	var stdout, stderr bytes.Buffer
	err := runSimOpenb(context.Background(), []string{"--nodes", nodes, "--pods", pods, "--seeds", "1-3",
		"--policy", "fgd,bestfit", "--json", "--out", out, "--published", ""}, &stdout, &stderr)
	if err != nil {
		t.Fatalf("%v\n%s", err, stderr.String())
	}
	var report struct {
		UnallocatedPct map[string]float64            `json:"unallocated_pct"`
		PerSeed        map[string]map[string]float64 `json:"per_seed"`
		Policies       map[string]json.RawMessage    `json:"policies"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &report); err != nil {
		t.Fatalf("output is not one JSON object: %v\n%s", err, stdout.String())
	}
	if _, ok := report.UnallocatedPct["100"]; !ok || len(report.PerSeed) != 3 || len(report.Policies) != 2 {
		t.Fatalf("report = %+v", report)
	}
	for _, f := range []string{"curves.csv", "summary.csv", "unallocated.png"} {
		if info, err := os.Stat(filepath.Join(out, f)); err != nil || info.Size() == 0 {
			t.Errorf("--out did not write %s: %v", f, err)
		}
	}
}
