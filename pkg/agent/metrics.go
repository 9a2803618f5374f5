package agent

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/gpu"
)

// The DCGM exporter's label names, so that the public "NVIDIA DCGM Exporter
// Dashboard" and existing alerts work unchanged.
const (
	labelGPU           = "gpu"
	labelUUID          = "UUID"
	labelPCIBusID      = "pci_bus_id"
	labelDevice        = "device"
	labelModelName     = "modelName"
	labelHostname      = "Hostname"
	labelDriverVersion = "DCGM_FI_DRIVER_VERSION"
	labelContainer     = "container"
	labelNamespace     = "namespace"
	labelPod           = "pod"
)

// dcgmField is one DCGM exporter metric: its name, type and help exactly as in
// the exporter's default-counters.csv, and how to read it from a GPU.
type dcgmField struct {
	name  string
	kind  prometheus.ValueType
	help  string
	value func(d gpu.Device) (float64, bool)
}

const mibFloat = 1 << 20

var dcgmFields = []dcgmField{
	{"DCGM_FI_DEV_SM_CLOCK", prometheus.GaugeValue, "SM clock frequency (in MHz).", u32(func(d gpu.Device) *uint32 { return d.SMClockMHz })},
	{"DCGM_FI_DEV_MEM_CLOCK", prometheus.GaugeValue, "Memory clock frequency (in MHz).", u32(func(d gpu.Device) *uint32 { return d.MemoryClockMHz })},
	{"DCGM_FI_DEV_GPU_TEMP", prometheus.GaugeValue, "GPU temperature (in C).", u32(func(d gpu.Device) *uint32 { return d.TemperatureCelsius })},
	{"DCGM_FI_DEV_POWER_USAGE", prometheus.GaugeValue, "Power draw (in W).", func(d gpu.Device) (float64, bool) {
		if d.PowerWatts == nil {
			return 0, false
		}
		return *d.PowerWatts, true
	}},
	{"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", prometheus.CounterValue, "Total energy consumption since boot (in mJ).", func(d gpu.Device) (float64, bool) {
		if d.EnergyMillijoules == nil {
			return 0, false
		}
		return float64(*d.EnergyMillijoules), true
	}},
	{"DCGM_FI_DEV_GPU_UTIL", prometheus.GaugeValue, "GPU utilization (in %).", u32(func(d gpu.Device) *uint32 { return d.UtilizationPercent })},
	{"DCGM_FI_DEV_MEM_COPY_UTIL", prometheus.GaugeValue, "Memory utilization (in %).", u32(func(d gpu.Device) *uint32 { return d.MemoryUtilizationPercent })},
	{"DCGM_FI_DEV_XID_ERRORS", prometheus.GaugeValue, "Value of the last XID error encountered.", func(d gpu.Device) (float64, bool) {
		return float64(d.Health.LastAnyXID), true
	}},
	{"DCGM_FI_DEV_ENC_UTIL", prometheus.GaugeValue, "Encoder utilization (in %).", u32(func(d gpu.Device) *uint32 { return d.EncoderUtilizationPercent })},
	{"DCGM_FI_DEV_DEC_UTIL", prometheus.GaugeValue, "Decoder utilization (in %).", u32(func(d gpu.Device) *uint32 { return d.DecoderUtilizationPercent })},
	{"DCGM_FI_DEV_PCIE_REPLAY_COUNTER", prometheus.CounterValue, "Total number of PCIe retries.", u64(func(d gpu.Device) *uint64 { return d.PCIeReplays })},
	{"DCGM_FI_PROF_PCIE_TX_BYTES", prometheus.GaugeValue, "The rate of data transmitted over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", u64(func(d gpu.Device) *uint64 { return d.PCIeTxBytesPerSecond })},
	{"DCGM_FI_PROF_PCIE_RX_BYTES", prometheus.GaugeValue, "The rate of data received over the PCIe bus - including both protocol headers and data payloads - in bytes per second.", u64(func(d gpu.Device) *uint64 { return d.PCIeRxBytesPerSecond })},
	{"DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS", prometheus.CounterValue, "Number of remapped rows for correctable errors", u64(func(d gpu.Device) *uint64 { return d.RemappedRowsCorrectable })},
	{"DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS", prometheus.CounterValue, "Number of remapped rows for uncorrectable errors", u64(func(d gpu.Device) *uint64 { return d.RemappedRowsUncorrectable })},
	{"DCGM_FI_DEV_ROW_REMAP_FAILURE", prometheus.GaugeValue, "Whether remapping of rows has failed", func(d gpu.Device) (float64, bool) {
		if d.RowRemapFailed == nil {
			return 0, false
		}
		if *d.RowRemapFailed {
			return 1, true
		}
		return 0, true
	}},
	{"DCGM_FI_DEV_FB_FREE", prometheus.GaugeValue, "Framebuffer memory free (in MiB).", func(d gpu.Device) (float64, bool) {
		return float64(d.Memory.FreeBytes) / mibFloat, d.Memory.Known
	}},
	{"DCGM_FI_DEV_FB_USED", prometheus.GaugeValue, "Framebuffer memory used (in MiB).", func(d gpu.Device) (float64, bool) {
		return float64(d.Memory.UsedBytes) / mibFloat, d.Memory.Known
	}},
	{"DCGM_FI_DEV_FB_RESERVED", prometheus.GaugeValue, "Framebuffer memory reserved (in MiB).", func(d gpu.Device) (float64, bool) {
		if d.Memory.ReservedBytes == nil {
			return 0, false
		}
		return float64(*d.Memory.ReservedBytes) / mibFloat, true
	}},
}

func u64(get func(gpu.Device) *uint64) func(gpu.Device) (float64, bool) {
	return func(d gpu.Device) (float64, bool) {
		if v := get(d); v != nil {
			return float64(*v), true
		}
		return 0, false
	}
}

func u32(get func(gpu.Device) *uint32) func(gpu.Device) (float64, bool) {
	return func(d gpu.Device) (float64, bool) {
		if v := get(d); v != nil {
			return float64(*v), true
		}
		return 0, false
	}
}

// Metrics is a Prometheus collector of the node's GPUs in the DCGM
// exporter's format, plus gantry_gpu_* metrics for prepared memory shares.
// It reads the agent's latest inventory at scrape time.
type Metrics struct {
	// NoDCGMSeries leaves out the DCGM_FI_* series, for nodes where
	// dcgm-exporter also runs (Gantry's own series stay).
	NoDCGMSeries bool
	hostname     string
	snapshot     *Snapshot
	allocations  func() []Allocation
	pods         PodResourcesLister
	podsTimeout  time.Duration
}

// NewMetrics builds the collector. pods may be nil (no pod attribution);
// allocations may be nil (no gantry share metrics).
func NewMetrics(hostname string, snapshot *Snapshot, allocations func() []Allocation, pods PodResourcesLister) *Metrics {
	return &Metrics{hostname: hostname, snapshot: snapshot, allocations: allocations, pods: pods, podsTimeout: 2 * time.Second}
}

// Describe sends nothing: the collector is unchecked because, as in the DCGM
// exporter, a GPU's series carry pod labels only while a pod holds it.
func (m *Metrics) Describe(chan<- *prometheus.Desc) {}

var (
	gantryGPULabels   = []string{labelGPU, labelUUID, labelHostname}
	gantryClaimLabels = []string{labelGPU, labelUUID, labelHostname, "claim_namespace", "claim_name", "claim_uid"}

	allocatedDesc = prometheus.NewDesc("gantry_gpu_memory_allocated_bytes",
		"GPU memory prepared for ResourceClaims on this GPU (sum of their shares), in bytes.", gantryGPULabels, nil)
	healthyDesc = prometheus.NewDesc("gantry_gpu_healthy",
		"1 if the GPU is healthy, 0 if it is unhealthy or its health is unknown.", gantryGPULabels, nil)
	claimBytesDesc = prometheus.NewDesc("gantry_gpu_claim_memory_bytes",
		"GPU memory share of one ResourceClaim on this GPU, in bytes.", gantryClaimLabels, nil)
	nvmlUpDesc = prometheus.NewDesc("gantry_gpu_nvml_up",
		"1 while NVML answers and GPU readings are live; 0 while they are stale (driver gone, hung, or released for an upgrade) and GPU series are not served.", []string{labelHostname}, nil)
	sampleAgeDesc = prometheus.NewDesc("gantry_gpu_sample_age_seconds",
		"Seconds since the last successful reading of the node's GPUs.", []string{labelHostname}, nil)
	claimFractionDesc = prometheus.NewDesc("gantry_gpu_claim_memory_fraction",
		"GPU memory share of one ResourceClaim as a fraction of the GPU's memory.", gantryClaimLabels, nil)
)

// Collect implements prometheus.Collector. While readings are stale, the
// GPU series are not served (a last reading is not a live value); the
// sample age and gantry_gpu_nvml_up say why they are missing.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	inv, stale := m.snapshot.Get(), m.snapshot.Staleness()
	up := 1.0
	if inv == nil || stale.Stale {
		up = 0
	}
	ch <- prometheus.MustNewConstMetric(nvmlUpDesc, prometheus.GaugeValue, up, m.hostname)
	if inv == nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(sampleAgeDesc, prometheus.GaugeValue, time.Since(inv.SampledAt).Seconds(), m.hostname)
	if stale.Stale {
		m.collectShares(ch, inv)
		return
	}
	holders := m.containers(inv)
	for _, d := range inv.Devices {
		if d.UUID == "" {
			continue
		}
		base := []string{strconv.Itoa(d.Index), d.UUID, d.NVMLPCIBusID, fmt.Sprintf("nvidia%d", d.Minor), d.ProductName, m.hostname, inv.DriverVersion}
		names := []string{labelGPU, labelUUID, labelPCIBusID, labelDevice, labelModelName, labelHostname, labelDriverVersion}
		// One series per container holding the GPU, as the DCGM exporter does.
		labelSets := [][]string{base}
		withPods := append(append([]string(nil), names...), labelContainer, labelNamespace, labelPod)
		if refs := holders[d.UUID]; len(refs) > 0 {
			labelSets = labelSets[:0]
			for _, r := range refs {
				labelSets = append(labelSets, append(append([]string(nil), base...), r.Container, r.Namespace, r.Pod))
			}
		}
		for _, f := range dcgmFields {
			if m.NoDCGMSeries {
				break
			}
			v, ok := f.value(d)
			if !ok {
				continue
			}
			for _, ls := range labelSets {
				ln := names
				if len(ls) > len(names) {
					ln = withPods
				}
				ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(f.name, f.help, ln, nil), f.kind, v, ls...)
			}
		}
		m.collectMIG(ch, inv, d, base, names)
		healthy := 0.0
		if d.Health.State == gpu.Healthy {
			healthy = 1
		}
		ch <- prometheus.MustNewConstMetric(healthyDesc, prometheus.GaugeValue, healthy, strconv.Itoa(d.Index), d.UUID, m.hostname)
	}
	m.collectShares(ch, inv)
}

// The DCGM exporter's labels of a MIG device's series.
const (
	labelMIGProfile = "GPU_I_PROFILE"
	labelMIGID      = "GPU_I_ID"
)

var migLabels = []string{labelGPU, labelUUID, labelHostname, "mig_uuid", labelMIGProfile, labelMIGID, "GPU_CI_ID"}

var (
	migMemoryDesc = prometheus.NewDesc("gantry_gpu_mig_memory_total_bytes",
		"Memory of one MIG device (GPU instance), in bytes; one series per MIG device of a GPU in MIG mode.", migLabels, nil)
	migSMDesc = prometheus.NewDesc("gantry_gpu_mig_multiprocessors",
		"Streaming multiprocessors of one MIG device (compute instance).", migLabels, nil)
)

// collectMIG serves a MIG-mode GPU's devices: the DCGM exporter's memory series
// per GPU instance (its labels plus GPU_I_PROFILE and GPU_I_ID, as
// dcgm-exporter labels MIG series) and Gantry's size of each MIG device.
func (m *Metrics) collectMIG(ch chan<- prometheus.Metric, inv *gpu.Inventory, d gpu.Device, base, names []string) {
	if !d.MIG.Enabled {
		return
	}
	ln := append(append([]string(nil), names...), labelMIGProfile, labelMIGID)
	for _, mig := range d.MIG.Devices {
		labels := []string{strconv.Itoa(d.Index), d.UUID, m.hostname, mig.UUID, mig.Profile, strconv.Itoa(mig.GPUInstanceID), strconv.Itoa(mig.ComputeInstanceID)}
		if mig.Memory.Known {
			ch <- prometheus.MustNewConstMetric(migMemoryDesc, prometheus.GaugeValue, float64(mig.Memory.TotalBytes), labels...)
		}
		ch <- prometheus.MustNewConstMetric(migSMDesc, prometheus.GaugeValue, float64(mig.MultiprocessorCount), labels...)
		if m.NoDCGMSeries || !mig.Memory.Known {
			continue
		}
		ls := append(append([]string(nil), base...), mig.Profile, strconv.Itoa(mig.GPUInstanceID))
		for name, v := range map[string]uint64{"DCGM_FI_DEV_FB_USED": mig.Memory.UsedBytes, "DCGM_FI_DEV_FB_FREE": mig.Memory.FreeBytes} {
			ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(name, fbHelp[name], ln, nil), prometheus.GaugeValue, float64(v)/mibFloat, ls...)
		}
	}
}

var fbHelp = map[string]string{
	"DCGM_FI_DEV_FB_USED": "Framebuffer memory used (in MiB).",
	"DCGM_FI_DEV_FB_FREE": "Framebuffer memory free (in MiB).",
}

func (m *Metrics) collectShares(ch chan<- prometheus.Metric, inv *gpu.Inventory) {
	if m.allocations == nil {
		return
	}
	allocated := map[string]int64{}
	for _, a := range m.allocations() {
		allocated[a.UUID] += a.MemoryBytes
		g, ok := deviceByName(inv, a.Device)
		if !ok {
			continue
		}
		labels := []string{strconv.Itoa(g.Index), a.UUID, m.hostname, a.ClaimNamespace, a.ClaimName, string(a.ClaimUID)}
		ch <- prometheus.MustNewConstMetric(claimBytesDesc, prometheus.GaugeValue, float64(a.MemoryBytes), labels...)
		if a.TotalBytes > 0 {
			ch <- prometheus.MustNewConstMetric(claimFractionDesc, prometheus.GaugeValue, float64(a.MemoryBytes)/float64(a.TotalBytes), labels...)
		}
	}
	for _, d := range inv.Devices {
		if d.UUID == "" {
			continue
		}
		ch <- prometheus.MustNewConstMetric(allocatedDesc, prometheus.GaugeValue, float64(allocated[d.UUID]), strconv.Itoa(d.Index), d.UUID, m.hostname)
	}
}

func (m *Metrics) containers(inv *gpu.Inventory) map[string][]containerRef {
	if m.pods == nil {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), m.podsTimeout)
	defer cancel()
	pods, err := m.pods.List(ctx)
	if err != nil {
		// Metrics without pod labels beat no metrics.
		klog.V(2).InfoS("No pod attribution for GPU metrics", "err", err)
		return nil
	}
	return containersByGPU(pods, inv)
}
