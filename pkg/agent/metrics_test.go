package agent

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sort"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	podresourcesv1 "k8s.io/kubelet/pkg/apis/podresources/v1"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/pkg/names"
)

type fakePods []*podresourcesv1.PodResources

func (f fakePods) List(context.Context) ([]*podresourcesv1.PodResources, error) { return f, nil }

// scrape serves the collector on /metrics and parses the text exposition, as Prometheus would.
func scrape(t *testing.T, c prometheus.Collector) map[string]*dto.MetricFamily {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("scrape status %s", resp.Status)
	}
	parser := expfmt.NewTextParser(model.LegacyValidation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse exposition: %v", err)
	}
	return fams
}

func labelsOf(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

func value(m *dto.Metric) float64 {
	if m.GetGauge() != nil {
		return m.GetGauge().GetValue()
	}
	return m.GetCounter().GetValue()
}

// find returns the series of family name whose labels include want.
func find(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) []*dto.Metric {
	t.Helper()
	fam, ok := fams[name]
	if !ok {
		t.Fatalf("metric %s missing", name)
	}
	var out []*dto.Metric
	for _, m := range fam.GetMetric() {
		ls := labelsOf(m)
		match := true
		for k, v := range want {
			if ls[k] != v {
				match = false
			}
		}
		if match {
			out = append(out, m)
		}
	}
	return out
}

func TestScrapeMatchesDCGMExporter(t *testing.T) {
	f, _ := discover(t, "dgxh100")
	if err := f.GPUs[2].SetMemoryUsed(20 << 30); err != nil {
		t.Fatal(err)
	}
	f.GPUs[2].SetPowerWatts(300.5)
	f.GPUs[2].SetUtilization(93, 41)
	f.GPUs[2].SetTemperature(66)
	inv := mustRediscover(t, f)
	snap := NewSnapshot(inv)

	// Names, types and help exactly as in the DCGM exporter's default-counters.csv.
	want := []struct{ name, kind, help string }{
		{"DCGM_FI_DEV_SM_CLOCK", "GAUGE", "SM clock frequency (in MHz)."},
		{"DCGM_FI_DEV_MEM_CLOCK", "GAUGE", "Memory clock frequency (in MHz)."},
		{"DCGM_FI_DEV_GPU_TEMP", "GAUGE", "GPU temperature (in C)."},
		{"DCGM_FI_DEV_POWER_USAGE", "GAUGE", "Power draw (in W)."},
		{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "COUNTER", "Total energy consumption since boot (in mJ)."},
		{"DCGM_FI_DEV_GPU_UTIL", "GAUGE", "GPU utilization (in %)."},
		{"DCGM_FI_DEV_MEM_COPY_UTIL", "GAUGE", "Memory utilization (in %)."},
		{"DCGM_FI_DEV_XID_ERRORS", "GAUGE", "Value of the last XID error encountered."},
		{"DCGM_FI_DEV_FB_FREE", "GAUGE", "Framebuffer memory free (in MiB)."},
		{"DCGM_FI_DEV_FB_USED", "GAUGE", "Framebuffer memory used (in MiB)."},
		{"DCGM_FI_DEV_FB_RESERVED", "GAUGE", "Framebuffer memory reserved (in MiB)."},
	}
	fams := scrape(t, NewMetrics(testNode, snap, nil, nil))
	for _, w := range want {
		fam, ok := fams[w.name]
		if !ok {
			t.Errorf("%s missing", w.name)
			continue
		}
		if fam.GetType().String() != w.kind || fam.GetHelp() != w.help || len(fam.GetMetric()) != 8 {
			t.Errorf("%s: %s %q with %d series, want %s %q with 8", w.name, fam.GetType(), fam.GetHelp(), len(fam.GetMetric()), w.kind, w.help)
		}
	}

	series := find(t, fams, "DCGM_FI_DEV_FB_USED", map[string]string{"gpu": "2"})
	if len(series) != 1 {
		t.Fatalf("%d FB_USED series for gpu 2", len(series))
	}
	gotLabels := labelsOf(series[0])
	wantLabels := map[string]string{
		"gpu": "2", "UUID": inv.Devices[2].UUID, "pci_bus_id": "00000000:52:00.0", "device": "nvidia2",
		"modelName": "NVIDIA H100 80GB HBM3", "Hostname": testNode, "DCGM_FI_DRIVER_VERSION": "550.54.15",
	}
	if len(gotLabels) != len(wantLabels) {
		t.Errorf("labels %v, want exactly %v", gotLabels, wantLabels)
	}
	for k, v := range wantLabels {
		if gotLabels[k] != v {
			t.Errorf("label %s=%q, want %q", k, gotLabels[k], v)
		}
	}
	checks := map[string]float64{
		"DCGM_FI_DEV_FB_USED": 20480, "DCGM_FI_DEV_POWER_USAGE": 300.5, "DCGM_FI_DEV_GPU_UTIL": 93,
		"DCGM_FI_DEV_MEM_COPY_UTIL": 41, "DCGM_FI_DEV_GPU_TEMP": 66,
		"DCGM_FI_DEV_FB_FREE": float64(inv.Devices[2].Memory.FreeBytes) / (1 << 20),
	}
	for name, v := range checks {
		if got := value(find(t, fams, name, map[string]string{"gpu": "2"})[0]); got != v {
			t.Errorf("%s = %v, want %v", name, got, v)
		}
	}
}

func TestScrapeAttributesPodsAndShares(t *testing.T) {
	e := newDriverEnv(t, "dgxh100")
	d := e.start(t, nil)
	claim := allocatedClaim("uid-1", "llm", share{device: "gpu-2", memory: "20Gi", shareID: "s1"})
	if r := prepare(t, d, claim)[claim.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	inv := e.snapshot.Get()
	pods := fakePods{
		{Name: "llm-0", Namespace: "team-a", Containers: []*podresourcesv1.ContainerResources{{
			Name: "vllm",
			DynamicResources: []*podresourcesv1.DynamicResource{{ClaimName: "llm", ClaimNamespace: "team-a",
				ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: names.DriverName, PoolName: testNode, DeviceName: "gpu-2"}}}},
		}}},
		{Name: "legacy", Namespace: "team-b", Containers: []*podresourcesv1.ContainerResources{{
			Name:    "train",
			Devices: []*podresourcesv1.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: []string{inv.Devices[5].UUID}}},
		}}},
		{Name: "other-driver", Namespace: "team-c", Containers: []*podresourcesv1.ContainerResources{{
			Name:             "x",
			DynamicResources: []*podresourcesv1.DynamicResource{{ClaimResources: []*podresourcesv1.ClaimResource{{DriverName: "net.example.com", DeviceName: "gpu-0"}}}},
		}}},
	}
	fams := scrape(t, NewMetrics(testNode, e.snapshot, d.Allocations, pods))

	for gpuIndex, want := range map[string]map[string]string{
		"2": {"pod": "llm-0", "namespace": "team-a", "container": "vllm"},
		"5": {"pod": "legacy", "namespace": "team-b", "container": "train"},
	} {
		s := find(t, fams, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": gpuIndex})
		if len(s) != 1 {
			t.Fatalf("gpu %s: %d series", gpuIndex, len(s))
		}
		for k, v := range want {
			if got := labelsOf(s[0])[k]; got != v {
				t.Errorf("gpu %s: %s=%q, want %q", gpuIndex, k, got, v)
			}
		}
	}
	if s := find(t, fams, "DCGM_FI_DEV_GPU_UTIL", map[string]string{"gpu": "0"}); len(s) != 1 || labelsOf(s[0])["pod"] != "" {
		t.Errorf("gpu 0 is held by no pod of this driver, got %v", s)
	}

	alloc := map[string]float64{}
	for _, m := range fams["gantry_gpu_memory_allocated_bytes"].GetMetric() {
		alloc[labelsOf(m)["gpu"]] = value(m)
	}
	if alloc["2"] != 20<<30 || alloc["0"] != 0 || len(alloc) != 8 {
		t.Errorf("allocated bytes %v", alloc)
	}
	want := map[string]string{"gpu": "2", "claim_namespace": "team-a", "claim_name": "llm", "claim_uid": "uid-1"}
	if s := find(t, fams, "gantry_gpu_claim_memory_fraction", want); len(s) != 1 || value(s[0]) != float64(20<<30)/float64(ShareableBytes(e.snapshot.Get().Devices[2].Memory)) {
		t.Errorf("claim fraction series %v", s)
	}
	var names []string
	for n := range fams {
		if strings.HasPrefix(n, "gantry_") {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	if got := strings.Join(names, ","); got != "gantry_gpu_claim_memory_bytes,gantry_gpu_claim_memory_fraction,gantry_gpu_healthy,gantry_gpu_memory_allocated_bytes,gantry_gpu_nvml_up,gantry_gpu_sample_age_seconds" {
		t.Errorf("gantry metrics %s", got)
	}
}

// DCGM's XID_ERRORS is the last XID of any kind, application XIDs too;
// health ignores those. The switch for dcgm-exporter nodes drops the
// DCGM series and keeps Gantry's.
func TestXIDSemanticsAndDCGMSwitch(t *testing.T) {
	f, inv := discover(t, "2xH100")
	tr := gpu.NewHealthTracker()
	tr.RecordXID(f.GPUs[0].UUID(), 79)
	tr.RecordXID(f.GPUs[0].UUID(), 13) // application error, after the critical one
	inv = mustRediscover(t, f)
	tr.Apply(inv)
	fams := scrape(t, NewMetrics(testNode, NewSnapshot(inv), nil, nil))
	if v := value(find(t, fams, "DCGM_FI_DEV_XID_ERRORS", map[string]string{"gpu": "0"})[0]); v != 13 {
		t.Errorf("XID_ERRORS %v, want 13 (the last XID of any kind)", v)
	}
	if inv.Devices[0].Health.LastXID != 79 || inv.Devices[0].Health.State != gpu.Unhealthy {
		t.Errorf("health %+v: the critical XID 79 must still make the GPU unhealthy", inv.Devices[0].Health)
	}
	for _, name := range []string{"DCGM_FI_DEV_ENC_UTIL", "DCGM_FI_DEV_DEC_UTIL", "DCGM_FI_DEV_PCIE_REPLAY_COUNTER",
		"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"} {
		if len(find(t, fams, name, map[string]string{"gpu": "1"})) != 1 {
			t.Errorf("%s: want one series for gpu 1", name)
		}
	}
	m := NewMetrics(testNode, NewSnapshot(inv), nil, nil)
	m.NoDCGMSeries = true
	for name := range scrape(t, m) {
		if strings.HasPrefix(name, "DCGM_") {
			t.Errorf("%s served with the DCGM series off", name)
		}
	}
}

// PCIe throughput and replays and the video engines follow NVML's readings,
// in DCGM's units (bytes per second; NVML reports KB/s).
func TestPCIeAndVideoSeriesFollowNVML(t *testing.T) {
	f, _ := discover(t, "2xH100")
	f.GPUs[1].SetPCIe(1000, 250, 7)
	f.GPUs[1].SetVideoUtilization(40, 15)
	fams := scrape(t, NewMetrics(testNode, NewSnapshot(mustRediscover(t, f)), nil, nil))
	for name, want := range map[string]float64{
		"DCGM_FI_PROF_PCIE_TX_BYTES":      1000 * 1024,
		"DCGM_FI_PROF_PCIE_RX_BYTES":      250 * 1024,
		"DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 7,
		"DCGM_FI_DEV_ENC_UTIL":            40,
		"DCGM_FI_DEV_DEC_UTIL":            15,
	} {
		s := find(t, fams, name, map[string]string{"gpu": "1"})
		if len(s) != 1 || value(s[0]) != want {
			t.Errorf("%s of gpu 1: %v, want %v", name, s, want)
		}
		if s := find(t, fams, name, map[string]string{"gpu": "0"}); len(s) != 1 || value(s[0]) != 0 {
			t.Errorf("%s of gpu 0: %v, want 0", name, s)
		}
	}
}

// An A100 in MIG mode: one memory series per MIG device, labelled as
// dcgm-exporter labels MIG series (GPU_I_PROFILE, GPU_I_ID), and Gantry's
// size of each MIG device; none for GPUs not in MIG mode.
func TestMIGSeries(t *testing.T) {
	f, _ := discover(t, "2xA100")
	if err := f.GPUs[1].EnableMIG(nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	f.GPUs[1].SetMIGMemoryUsed(0, 3<<30)
	inv := mustRediscover(t, f)
	fams := scrape(t, NewMetrics(testNode, NewSnapshot(inv), nil, nil))
	migs := inv.Devices[1].MIG.Devices
	if len(migs) != 2 {
		t.Fatalf("%d MIG devices", len(migs))
	}
	for i, m := range migs {
		want := map[string]string{"gpu": "1", "GPU_I_PROFILE": m.Profile, "GPU_I_ID": fmt.Sprint(m.GPUInstanceID)}
		used := find(t, fams, "DCGM_FI_DEV_FB_USED", want)
		if len(used) != 1 {
			t.Fatalf("FB_USED of MIG %s: %v", m.Profile, used)
		}
		wantUsed := 0.0
		if i == 0 {
			wantUsed = 3 << 10
		}
		if value(used[0]) != wantUsed {
			t.Errorf("FB_USED of MIG %s = %v MiB, want %v", m.Profile, value(used[0]), wantUsed)
		}
		if free := find(t, fams, "DCGM_FI_DEV_FB_FREE", want); len(free) != 1 || value(free[0]) != float64(m.Memory.FreeBytes)/(1<<20) {
			t.Errorf("FB_FREE of MIG %s: %v", m.Profile, free)
		}
		total := find(t, fams, "gantry_gpu_mig_memory_total_bytes", map[string]string{"gpu": "1", "mig_uuid": m.UUID, "GPU_I_PROFILE": m.Profile})
		if len(total) != 1 || value(total[0]) != float64(m.Memory.TotalBytes) || m.Memory.TotalBytes == 0 {
			t.Errorf("MIG %s size: %v, want %d", m.Profile, total, m.Memory.TotalBytes)
		}
	}
	if n := len(fams["gantry_gpu_mig_memory_total_bytes"].GetMetric()); n != 2 {
		t.Errorf("%d MIG size series, want 2 (GPU 0 is not in MIG mode)", n)
	}
	if n := len(fams["gantry_gpu_mig_multiprocessors"].GetMetric()); n != 2 {
		t.Errorf("%d MIG multiprocessor series, want 2", n)
	}
}
