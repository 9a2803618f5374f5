package sandbox

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gantry-dev/gantry/test/testenv"
)

// needsKubelet lists the dashboard series that only a real kubelet produces: per-pod
// GPU attribution comes from its PodResources API, and per-claim shares (and so a
// GPU's allocated share above zero) from its DRA NodePrepareResources calls. kwok
// plays no kubelet, so the sandbox cannot have them; the node agent's own tests cover
// them (pkg/agent: the scrape test and the Prepare integration test).
var needsKubelet = regexp.MustCompile(`pod!=""|gantry_gpu_claim_|gantry_gpu_memory_allocated_bytes\) > 0`)

// limitedQueue gives the queue panels a limit to show: the seed's queues set none.
const limitedQueue = `apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata:
  name: capped
spec:
  resources:
    gpu: {quota: 1, limit: 2, overQuotaWeight: 1}
`

// checkDashboardsWithPrometheus scrapes the running sandbox with a real Prometheus
// (Debian's prometheus package) and runs every dashboard query against it: each must
// return data, except those needsKubelet names.
func checkDashboardsWithPrometheus(t *testing.T, sb *Sandbox) {
	t.Helper()
	if _, err := testenv.Apply(context.Background(), sb.Env.Config, "", []byte(limitedQueue)); err != nil {
		t.Fatal(err)
	}
	bin, err := exec.LookPath("prometheus")
	if err != nil {
		t.Fatalf("prometheus not found: install Debian's prometheus package (make test-deps does)")
	}
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	var targets []string
	for _, u := range append([]string{sb.SchedulerMetrics}, sb.AgentMetrics...) {
		parsed, err := url.Parse(u)
		if err != nil {
			t.Fatal(err)
		}
		targets = append(targets, fmt.Sprintf("%q", parsed.Host))
	}
	cfg := fmt.Sprintf("global: {scrape_interval: 1s, evaluation_interval: 1s}\nscrape_configs:\n- job_name: gantry\n  static_configs:\n  - targets: [%s]\n", strings.Join(targets, ", "))
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	port, err := testenv.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	cmd := exec.Command(bin,
		"--config.file="+filepath.Join(dir, "prometheus.yml"),
		"--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr,
	)
	logf, _ := os.Create(filepath.Join(dir, "prometheus.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		_ = cmd.Wait()
	}()
	query := func(expr string) (int, error) {
		resp, err := http.Get("http://" + addr + "/api/v1/query?query=" + url.QueryEscape(expr))
		if err != nil {
			return 0, err
		}
		defer resp.Body.Close()
		var out struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []json.RawMessage `json:"result"`
			} `json:"data"`
		}
		if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
			return 0, err
		}
		if out.Status != "success" {
			return 0, fmt.Errorf("%s", out.Error)
		}
		return len(out.Data.Result), nil
	}
	// Scrape long enough for rates over a minute of samples to exist.
	deadline := time.Now().Add(60 * time.Second)
	for {
		n, err := query(`up{job="gantry"} == 1`)
		if err == nil && n == len(targets) {
			break
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(dir, "prometheus.log"))
			t.Fatalf("prometheus does not see all %d targets up (%d, %v)\n%s", len(targets), n, err, b)
		}
		time.Sleep(500 * time.Millisecond)
	}
	time.Sleep(15 * time.Second)

	files, _ := filepath.Glob(filepath.Join(root, "deploy", "grafana", "*.json"))
	checked := 0
	for _, f := range files {
		for _, expr := range dashboardQueries(t, f) {
			if needsKubelet.MatchString(expr) {
				continue
			}
			q := grafanaToPromQL(expr)
			n, err := query(q)
			checked++
			switch {
			case err != nil:
				t.Errorf("%s: %s: %v", filepath.Base(f), q, err)
			case n == 0:
				t.Errorf("%s: no data for %s", filepath.Base(f), q)
			}
		}
	}
	if checked == 0 {
		t.Fatal("no dashboard queries found")
	}
}

var (
	grafanaRange    = regexp.MustCompile(`\$\{?__range\}?`)
	grafanaInterval = regexp.MustCompile(`\$\{?__(rate_)?interval\}?`)
	grafanaVar      = regexp.MustCompile(`\$\{?[A-Za-z_][A-Za-z0-9_]*(:[a-z]+)?\}?`)
)

// grafanaToPromQL fills in Grafana's variables the way an "All" selection over the
// last five minutes would.
func grafanaToPromQL(expr string) string {
	expr = grafanaRange.ReplaceAllString(expr, "5m")
	expr = grafanaInterval.ReplaceAllString(expr, "30s")
	return grafanaVar.ReplaceAllString(expr, ".*")
}

// dashboardQueries returns every panel target's expression in a dashboard file.
func dashboardQueries(t *testing.T, path string) []string {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []panel `json:"panels"`
	}
	if err := json.Unmarshal(b, &d); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var out []string
	var walk func([]panel)
	walk = func(ps []panel) {
		for _, p := range ps {
			for _, tg := range p.Targets {
				if tg.Expr != "" {
					out = append(out, tg.Expr)
				}
			}
			walk(p.Panels)
		}
	}
	walk(d.Panels)
	return out
}

type panel struct {
	Targets []struct {
		Expr string `json:"expr"`
	} `json:"targets"`
	Panels []panel `json:"panels"`
}
