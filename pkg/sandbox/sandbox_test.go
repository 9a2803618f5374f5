package sandbox

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/test/testenv"
)

// The sandbox as `make run` starts it plays the seed scenario to the seed's picture:
// the training gang bound together, preempted whole for the vLLM service, and back
// whole once the service is deleted. Its metrics endpoints serve Gantry's series.
func TestSandboxPlaysTheSeedScenario(t *testing.T) {
	if testing.Short() {
		t.Skip("integration test: starts a whole sandbox cluster")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	seed := filepath.Join(root, "examples", "seed")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	var log strings.Builder
	sb, err := Up(ctx, Options{Queues: filepath.Join(seed, "queues.yaml"), Out: &log})
	if err != nil {
		t.Fatalf("sandbox up: %v\n%s", err, log.String())
	}
	defer func() {
		pids := sb.Env.PIDs()
		if err := sb.Down(); err != nil {
			t.Errorf("down: %v", err)
		}
		for name, pid := range pids {
			if _, err := os.Stat(filepath.Join("/proc", itoa(pid))); err == nil && running(pid) {
				t.Errorf("%s (pid %d) still running after Down", name, pid)
			}
		}
	}()
	out, err := Demo(ctx, sb.Env.Config, DemoOptions{SeedDir: seed, Out: &log})
	if err != nil {
		t.Fatalf("demo: %v\n%s", err, log.String())
	}
	if !out.TrainingBoundTogether || !out.InferenceBound || !out.TrainingBack {
		t.Errorf("demo outcome %+v, want training bound together, inference bound, training back\n%s", *out, log.String())
	}
	if out.TrainingEvicted != 2 {
		t.Errorf("%d training pods preempted, want 2 (the whole gang)\n%s", out.TrainingEvicted, log.String())
	}
	for _, want := range []struct{ url, series string }{
		{sb.SchedulerMetrics, "gantry_scheduler_pods_scheduled_total"},
		{sb.SchedulerMetrics, "gantry_scheduler_preemption_victims_total"},
		{sb.AgentMetrics[0], "DCGM_FI_DEV_FB_FREE"},
	} {
		body := get(t, want.url)
		if !strings.Contains(body, want.series) {
			t.Errorf("%s does not serve %s", want.url, want.series)
		}
	}
	checkDashboardsWithPrometheus(t, sb)
}

func get(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func itoa(i int) string { return strconv.Itoa(i) }

func running(pid int) bool {
	b, err := os.ReadFile(filepath.Join("/proc", itoa(pid), "stat"))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}
