package deploy

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/prometheus/promql/parser"
)

type metricKind int

const (
	gauge metricKind = iota
	counter
	histogram
)

type metricInfo struct {
	kind   metricKind
	labels []string
}

var (
	// dcgmLabels are the DCGM exporter's labels, which the node agent sets the same way
	// (pkg/agent/metrics.go); pod, namespace and container only while a container holds
	// the GPU; GPU_I_PROFILE and GPU_I_ID on a MIG device's memory series.
	dcgmLabels = []string{"gpu", "UUID", "pci_bus_id", "device", "modelName", "Hostname", "DCGM_FI_DRIVER_VERSION", "pod", "namespace", "container", "GPU_I_PROFILE", "GPU_I_ID"}
	migLabels  = []string{"gpu", "UUID", "Hostname", "mig_uuid", "GPU_I_PROFILE", "GPU_I_ID", "GPU_CI_ID"}
	gpuLabels  = []string{"gpu", "UUID", "Hostname"}
	claimLabel = []string{"gpu", "UUID", "Hostname", "claim_namespace", "claim_name", "claim_uid"}
	queueLabel = []string{"queue", "resource"}
)

// exportedMetrics are the metrics Gantry exports: the scheduler's (pkg/kube/metrics.go)
// and the node agent's (pkg/agent/metrics.go), with their labels. Dashboards may use
// these and nothing else, so that every panel shows something once Gantry runs.
// TestExportedMetricsMatchSource keeps the names equal to those defined under pkg/.
var exportedMetrics = map[string]metricInfo{
	"gantry_scheduler_cycle_duration_seconds":           {histogram, nil},
	"gantry_scheduler_cycle_phase_duration_seconds":     {histogram, []string{"phase"}},
	"gantry_scheduler_dra_allocator_duration_seconds":   {histogram, nil},
	"gantry_scheduler_pod_scheduling_duration_seconds":  {histogram, nil},
	"gantry_scheduler_gang_binding_duration_seconds":    {histogram, nil},
	"gantry_scheduler_pods_scheduled_total":             {counter, nil},
	"gantry_scheduler_gangs_scheduled_total":            {counter, nil},
	"gantry_scheduler_bind_failures_total":              {counter, nil},
	"gantry_scheduler_events_dropped_total":             {counter, nil},
	"gantry_scheduler_unschedulable_gangs_total":        {counter, []string{"reason"}},
	"gantry_scheduler_preemption_victims_total":         {counter, []string{"kind"}},
	"gantry_scheduler_preempted_gpu_memory_bytes_total": {counter, []string{"kind"}},
	"gantry_scheduler_preemptions_total":                {counter, []string{"kind"}},
	"gantry_scheduler_preempted_whole_gpus_total":       {counter, []string{"kind"}},
	"gantry_scheduler_preempted_shared_victims_total":   {counter, []string{"kind"}},
	"gantry_queue_fair_share":                           {gauge, queueLabel},
	"gantry_queue_allocated":                            {gauge, queueLabel},
	"gantry_queue_limit":                                {gauge, queueLabel},
	"gantry_queue_quota":                                {gauge, queueLabel},
	"gantry_scheduler_workload_mix_pods":                {gauge, nil},

	"DCGM_FI_DEV_SM_CLOCK":                    {gauge, dcgmLabels},
	"DCGM_FI_DEV_MEM_CLOCK":                   {gauge, dcgmLabels},
	"DCGM_FI_DEV_GPU_TEMP":                    {gauge, dcgmLabels},
	"DCGM_FI_DEV_POWER_USAGE":                 {gauge, dcgmLabels},
	"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION":    {counter, dcgmLabels},
	"DCGM_FI_DEV_GPU_UTIL":                    {gauge, dcgmLabels},
	"DCGM_FI_DEV_MEM_COPY_UTIL":               {gauge, dcgmLabels},
	"DCGM_FI_DEV_XID_ERRORS":                  {gauge, dcgmLabels},
	"DCGM_FI_DEV_FB_FREE":                     {gauge, dcgmLabels},
	"DCGM_FI_DEV_FB_USED":                     {gauge, dcgmLabels},
	"DCGM_FI_DEV_FB_RESERVED":                 {gauge, dcgmLabels},
	"DCGM_FI_DEV_ENC_UTIL":                    {gauge, dcgmLabels},
	"DCGM_FI_DEV_DEC_UTIL":                    {gauge, dcgmLabels},
	"DCGM_FI_DEV_PCIE_REPLAY_COUNTER":         {counter, dcgmLabels},
	"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS":   {counter, dcgmLabels},
	"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": {counter, dcgmLabels},
	"DCGM_FI_DEV_ROW_REMAP_FAILURE":           {gauge, dcgmLabels},
	"DCGM_FI_PROF_PCIE_TX_BYTES":              {gauge, dcgmLabels},
	"DCGM_FI_PROF_PCIE_RX_BYTES":              {gauge, dcgmLabels},
	"gantry_gpu_mig_memory_total_bytes":       {gauge, migLabels},
	"gantry_gpu_mig_multiprocessors":          {gauge, migLabels},
	"gantry_gpu_nvml_up":                      {gauge, []string{"Hostname"}},
	"gantry_gpu_sample_age_seconds":           {gauge, []string{"Hostname"}},
	"gantry_gpu_memory_allocated_bytes":       {gauge, gpuLabels},
	"gantry_gpu_healthy":                      {gauge, gpuLabels},
	"gantry_gpu_claim_memory_bytes":           {gauge, claimLabel},
	"gantry_gpu_claim_memory_fraction":        {gauge, claimLabel},
}

// targetLabels are the labels Prometheus (and the Prometheus Operator's ServiceMonitors)
// add to every scraped series.
var targetLabels = []string{"job", "instance", "namespace", "pod", "service", "container", "endpoint"}

// metricDefinition finds a metric name where Go code defines one: Name: "…" in
// prometheus.*Opts, prometheus.NewDesc("…", and the {"DCGM_FI_…", …} rows of the
// agent's DCGM field table.
var metricDefinition = regexp.MustCompile(`(?:Name:\s*|NewDesc\(\s*|\{\s*)"((?:gantry|DCGM_FI)_[A-Za-z0-9_]+)"`)

// TestExportedMetricsMatchSource fails when pkg/ defines a metric exportedMetrics lacks,
// or exportedMetrics lists one pkg/ no longer defines: the dashboards' check is only as
// good as the list.
func TestExportedMetricsMatchSource(t *testing.T) {
	defined := map[string]string{}
	root := repoPath(t, "pkg")
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return err
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		for _, m := range metricDefinition.FindAllStringSubmatch(string(src), -1) {
			rel, _ := filepath.Rel(repoRoot(t), path)
			defined[m[1]] = rel
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(defined) == 0 {
		t.Fatal("found no metric definitions under pkg/: has the way metrics are defined changed? Update metricDefinition.")
	}
	for name, file := range defined {
		if _, ok := exportedMetrics[name]; !ok {
			t.Errorf("%s defines metric %s, which exportedMetrics in test/deploy/dashboards_test.go lacks", file, name)
		}
	}
	for name := range exportedMetrics {
		if _, ok := defined[name]; !ok {
			t.Errorf("exportedMetrics lists %s, which nothing under pkg/ defines any more", name)
		}
	}
}

type dashboardFile struct {
	path string
	json map[string]any
}

func loadDashboards(t *testing.T) []dashboardFile {
	t.Helper()
	files, _ := filepath.Glob(repoPath(t, "deploy/grafana/*.json"))
	if len(files) != 3 {
		t.Fatalf("deploy/grafana holds %d dashboards, want 3 (GPUs, Scheduler, Queues)", len(files))
	}
	var out []dashboardFile
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		var d map[string]any
		if err := json.Unmarshal(b, &d); err != nil {
			t.Fatalf("%s: %v", f, err)
		}
		out = append(out, dashboardFile{path: filepath.Base(f), json: d})
	}
	return out
}

// panels returns every panel of a dashboard, the panels inside rows included.
func panels(list []any) []map[string]any {
	var out []map[string]any
	for _, p := range list {
		pm, ok := p.(map[string]any)
		if !ok {
			continue
		}
		out = append(out, pm)
		if inner, ok := pm["panels"].([]any); ok {
			out = append(out, panels(inner)...)
		}
	}
	return out
}

func templateVariables(d map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	templating, _ := d["templating"].(map[string]any)
	list, _ := templating["list"].([]any)
	for _, v := range list {
		vm, _ := v.(map[string]any)
		name, _ := vm["name"].(string)
		out[name] = vm
	}
	return out
}

var (
	grafanaDurations = regexp.MustCompile(`\$\{?(?:__rate_interval|__interval|__range)(?:_ms|_s)?\}?`)
	grafanaVariable  = regexp.MustCompile(`\$\{?([A-Za-z_][A-Za-z0-9_]*)(?::[a-z]+)?\}?`)
)

// withoutGrafanaVariables turns a panel's query into plain PromQL: Grafana's interval
// variables become 5m, and template variables (which the dashboards use only inside
// label matchers) become a regular expression.
func withoutGrafanaVariables(expr string) (string, []string) {
	expr = grafanaDurations.ReplaceAllString(expr, "5m")
	var vars []string
	for _, m := range grafanaVariable.FindAllStringSubmatch(expr, -1) {
		vars = append(vars, m[1])
	}
	return grafanaVariable.ReplaceAllString(expr, ".*"), vars
}

// checkQuery parses one query and returns what is wrong with it: a parse error, a
// metric Gantry does not export, or a label matcher on a label the metric lacks.
func checkQuery(expr string) []string {
	promql := parser.NewParser(parser.Options{})
	ast, err := promql.ParseExpr(expr)
	if err != nil {
		return []string{fmt.Sprintf("does not parse: %v", err)}
	}
	var problems []string
	selectors := 0
	parser.Inspect(ast, func(node parser.Node, _ []parser.Node) error {
		vs, ok := node.(*parser.VectorSelector)
		if !ok {
			return nil
		}
		selectors++
		name, info, known := exported(vs.Name)
		if !known {
			problems = append(problems, fmt.Sprintf("names %q, which Gantry does not export", vs.Name))
			return nil
		}
		for _, m := range vs.LabelMatchers {
			if m.Name == "__name__" || slices.Contains(info.labels, m.Name) || slices.Contains(targetLabels, m.Name) ||
				(m.Name == "le" && strings.HasSuffix(vs.Name, "_bucket")) {
				continue
			}
			problems = append(problems, fmt.Sprintf("matches label %q, which %s does not have (it has %v)", m.Name, name, info.labels))
		}
		return nil
	})
	if selectors == 0 {
		problems = append(problems, "selects no metric")
	}
	return problems
}

// exported resolves a selector's metric name, histogram series (_bucket, _sum,
// _count) included.
func exported(name string) (string, metricInfo, bool) {
	if info, ok := exportedMetrics[name]; ok {
		return name, info, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if info, found := exportedMetrics[base]; ok && found && info.kind == histogram {
			return base, info, true
		}
	}
	return "", metricInfo{}, false
}

func TestDashboardQueriesUseExportedMetrics(t *testing.T) {
	for _, d := range loadDashboards(t) {
		t.Run(d.path, func(t *testing.T) {
			vars := templateVariables(d.json)
			list, _ := d.json["panels"].([]any)
			queries := 0
			check := func(where, expr string) {
				queries++
				plain, used := withoutGrafanaVariables(expr)
				for _, v := range used {
					if _, ok := vars[v]; !ok {
						t.Errorf("%s: query uses $%s, which is not a variable of the dashboard: %s", where, v, expr)
					}
				}
				for _, p := range checkQuery(plain) {
					t.Errorf("%s: query %s: %s", where, p, expr)
				}
			}
			for _, p := range panels(list) {
				targets, _ := p["targets"].([]any)
				for _, tg := range targets {
					tm, _ := tg.(map[string]any)
					expr, _ := tm["expr"].(string)
					if strings.TrimSpace(expr) == "" {
						t.Errorf("panel %q has a target without a query", p["title"])
						continue
					}
					check(fmt.Sprintf("panel %q", p["title"]), expr)
				}
			}
			// Variables from label_values(selector, label): the selector is PromQL and
			// the label must be one the metric has.
			labelValues := regexp.MustCompile(`^label_values\((.+),\s*([A-Za-z_][A-Za-z0-9_]*)\)$`)
			for name, v := range vars {
				if v["type"] != "query" {
					continue
				}
				q, _ := v["query"].(map[string]any)
				query, _ := q["query"].(string)
				m := labelValues.FindStringSubmatch(query)
				if m == nil {
					t.Errorf("variable %s: query %q is not label_values(selector, label)", name, query)
					continue
				}
				check("variable "+name, m[1])
				plain, _ := withoutGrafanaVariables(m[1])
				if ast, err := parser.NewParser(parser.Options{}).ParseExpr(plain); err == nil {
					if vs, ok := ast.(*parser.VectorSelector); !ok {
						t.Errorf("variable %s: %s is not a metric selector", name, m[1])
					} else if metric, info, ok := exported(vs.Name); ok && !slices.Contains(info.labels, m[2]) && !slices.Contains(targetLabels, m[2]) {
						t.Errorf("variable %s: %s has no label %q (it has %v)", name, metric, m[2], info.labels)
					}
				}
			}
			if queries < 5 {
				t.Errorf("only %d queries found; has the dashboard's layout changed?", queries)
			}
		})
	}
}

// TestCheckQueryCatchesMistakes makes sure the dashboard check fails where it should.
func TestCheckQueryCatchesMistakes(t *testing.T) {
	for expr, want := range map[string]string{
		`rate(gantry_scheduler_pods_bound_total[5m])`:            "does not export",
		`DCGM_FI_DEV_GPU_UTIL{node="a"}`:                         `label "node"`,
		`gantry_queue_quota_bucket`:                              "does not export",
		`sum(rate(gantry_scheduler_pods_scheduled_total[5m]`:     "does not parse",
		`histogram_quantile(0.9, gantry_queue_allocated{le=""})`: `label "le"`,
	} {
		problems := strings.Join(checkQuery(expr), "; ")
		if !strings.Contains(problems, want) {
			t.Errorf("checkQuery(%s) = %q, want a problem mentioning %q", expr, problems, want)
		}
	}
	if p := checkQuery(`histogram_quantile(0.99, sum by (le) (rate(gantry_scheduler_cycle_duration_seconds_bucket{le!=""}[5m])))`); len(p) > 0 {
		t.Errorf("a valid histogram query was rejected: %v", p)
	}
}

func TestDashboardsUseDatasourceVariable(t *testing.T) {
	uids := map[string]string{}
	for _, d := range loadDashboards(t) {
		t.Run(d.path, func(t *testing.T) {
			uid, _ := d.json["uid"].(string)
			title, _ := d.json["title"].(string)
			if uid == "" || title == "" {
				t.Fatalf("dashboard without uid or title")
			}
			if other, dup := uids[uid]; dup {
				t.Errorf("uid %s is also %s's", uid, other)
			}
			uids[uid] = d.path
			ds := templateVariables(d.json)["datasource"]
			if ds == nil || ds["type"] != "datasource" || ds["query"] != "prometheus" {
				t.Fatalf("no ${datasource} variable of type datasource (prometheus): %v", ds)
			}
			isVar := func(v any) bool {
				m, _ := v.(map[string]any)
				return m != nil && m["uid"] == "${datasource}"
			}
			list, _ := d.json["panels"].([]any)
			ids := map[float64]bool{}
			for _, p := range panels(list) {
				id, _ := p["id"].(float64)
				if ids[id] {
					t.Errorf("panel id %v used twice", id)
				}
				ids[id] = true
				if p["type"] == "row" {
					continue
				}
				if !isVar(p["datasource"]) {
					t.Errorf("panel %q: datasource %v, want uid ${datasource}", p["title"], p["datasource"])
				}
				targets, _ := p["targets"].([]any)
				for _, tg := range targets {
					if tm, _ := tg.(map[string]any); !isVar(tm["datasource"]) {
						t.Errorf("panel %q: a target's datasource is %v, want uid ${datasource}", p["title"], tm["datasource"])
					}
				}
				if g, _ := p["gridPos"].(map[string]any); g == nil || g["x"].(float64)+g["w"].(float64) > 24 {
					t.Errorf("panel %q: gridPos %v outside the 24-column grid", p["title"], p["gridPos"])
				}
			}
		})
	}
}
