package gpu_test

import (
	"errors"
	"os"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/gpu/fake"
)

const mib = 1 << 20

func mustFleet(t *testing.T, profile string) *fake.Fleet {
	t.Helper()
	f, err := fake.New(profile, "node-a")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func mustDiscover(t *testing.T, lib nvml.Interface) *gpu.Inventory {
	t.Helper()
	inv, err := gpu.Discover(lib)
	if err != nil {
		t.Fatalf("Discover: %v", err)
	}
	return inv
}

func TestDiscoverFleets(t *testing.T) {
	tests := []struct {
		profile      string
		count        int
		product      string
		arch         string
		cc           string
		totalMiB     uint64
		nvlinks      int
		migCapable   bool
		numaKnown    bool
		wantBusID0   string
		wantNVMLBus0 string
	}{
		{"dgxh100", 8, "NVIDIA H100 80GB HBM3", "Hopper", "9.0", 81920, 18, true, true, "0000:1b:00.0", "00000000:1B:00.0"},
		{"dgxh200", 8, "NVIDIA H200 141GB HBM3e", "Hopper", "9.0", 144384, 18, true, true, "0000:1b:00.0", "00000000:1B:00.0"},
		{"dgxa100", 8, "NVIDIA A100-SXM4-40GB", "Ampere", "8.0", 40960, 12, true, true, "0000:1b:00.0", "00000000:1B:00.0"},
		{"1xA10G", 1, "NVIDIA A10G", "Ampere", "8.6", 23028, 0, false, true, "0000:1b:00.0", "00000000:1B:00.0"},
		{"2xL4", 2, "NVIDIA L4", "Ada Lovelace", "8.9", 23034, 0, false, true, "0000:1b:00.0", "00000000:1B:00.0"},
	}
	for _, tc := range tests {
		t.Run(tc.profile, func(t *testing.T) {
			inv := mustDiscover(t, mustFleet(t, tc.profile))
			if inv.DriverVersion != "550.54.15" || inv.CUDADriverVersion != "12.4" {
				t.Errorf("driver %q cuda %q, want 550.54.15 and 12.4", inv.DriverVersion, inv.CUDADriverVersion)
			}
			if len(inv.Devices) != tc.count {
				t.Fatalf("%d devices, want %d", len(inv.Devices), tc.count)
			}
			uuids := map[string]bool{}
			for i, d := range inv.Devices {
				if d.Index != i || d.Minor != i {
					t.Errorf("device %d: index %d minor %d", i, d.Index, d.Minor)
				}
				if !strings.HasPrefix(d.UUID, "GPU-") || uuids[d.UUID] {
					t.Errorf("device %d: UUID %q not a unique GPU UUID", i, d.UUID)
				}
				uuids[d.UUID] = true
				if d.ProductName != tc.product || d.Architecture != tc.arch || d.CUDAComputeCapability != tc.cc {
					t.Errorf("device %d: %q %q %q, want %q %q %q", i, d.ProductName, d.Architecture, d.CUDAComputeCapability, tc.product, tc.arch, tc.cc)
				}
				if !d.Memory.Known || d.Memory.TotalBytes != tc.totalMiB*mib {
					t.Errorf("device %d: memory %+v, want total %d MiB", i, d.Memory, tc.totalMiB)
				}
				if d.Memory.ReservedBytes == nil || d.Memory.UsedBytes != 0 ||
					d.Memory.FreeBytes != d.Memory.TotalBytes-*d.Memory.ReservedBytes {
					t.Errorf("device %d: v2 memory %+v: want reserved known, nothing used, the rest free", i, d.Memory)
				}
				if d.NVLinkCount != tc.nvlinks {
					t.Errorf("device %d: %d NVLinks, want %d", i, d.NVLinkCount, tc.nvlinks)
				}
				wantPeers := 0
				if tc.nvlinks > 0 {
					wantPeers = tc.count - 1 // NVSwitch: everyone reaches everyone
				}
				if len(d.NVLinkPeers) != wantPeers {
					t.Errorf("device %d: %d NVLink peers, want %d", i, len(d.NVLinkPeers), wantPeers)
				}
				if d.MIG.Capable != tc.migCapable || d.MIG.Enabled {
					t.Errorf("device %d: MIG %+v, want capable=%v and disabled", i, d.MIG, tc.migCapable)
				}
				if (d.NUMANode != nil) != tc.numaKnown {
					t.Errorf("device %d: NUMA node %v", i, d.NUMANode)
				}
				if d.Health.State != gpu.Healthy || len(d.Health.Reasons) != 0 {
					t.Errorf("device %d: health %+v, want healthy", i, d.Health)
				}
				if d.UtilizationPercent == nil || d.TemperatureCelsius == nil || d.PowerWatts == nil {
					t.Errorf("device %d: sensors missing", i)
				}
			}
			if d := inv.Devices[0]; d.PCIBusID != tc.wantBusID0 || d.NVMLPCIBusID != tc.wantNVMLBus0 {
				t.Errorf("bus id %q (NVML %q), want %q (%q)", d.PCIBusID, d.NVMLPCIBusID, tc.wantBusID0, tc.wantNVMLBus0)
			}
		})
	}
}

func TestFakeUUIDsAreStablePerSeed(t *testing.T) {
	a, _ := fake.New("dgxh100", "node-a")
	b, _ := fake.New("dgxh100", "node-a")
	c, _ := fake.New("dgxh100", "node-b")
	if a.GPUs[3].UUID() != b.GPUs[3].UUID() {
		t.Error("same profile and seed gave different UUIDs; an agent restart would lose its prepared claims")
	}
	if a.GPUs[3].UUID() == c.GPUs[3].UUID() {
		t.Error("different nodes got the same GPU UUID")
	}
}

func TestUnknownProfile(t *testing.T) {
	for _, p := range []string{"dgxz900", "0xH100", "3xNOPE", ""} {
		if _, err := fake.New(p, ""); err == nil {
			t.Errorf("profile %q accepted", p)
		}
	}
}

func TestLiveMemoryAndSensors(t *testing.T) {
	f := mustFleet(t, "dgxh200")
	g := f.GPUs[2]
	if err := g.SetProcesses(
		nvml.ProcessInfo{Pid: 100, UsedGpuMemory: 20 << 30},
		nvml.ProcessInfo{Pid: 200, UsedGpuMemory: 4 << 30},
	); err != nil {
		t.Fatal(err)
	}
	g.SetUtilization(87, 40)
	g.SetTemperature(71)
	g.SetPowerWatts(612.5)

	d := mustDiscover(t, f).Devices[2]
	if d.Memory.UsedBytes != 24<<30 {
		t.Errorf("used %d, want 24 GiB", d.Memory.UsedBytes)
	}
	if want := d.Memory.TotalBytes - *d.Memory.ReservedBytes - 24<<30; d.Memory.FreeBytes != want {
		t.Errorf("free %d, want %d", d.Memory.FreeBytes, want)
	}
	if len(d.Processes) != 2 || d.Processes[0].PID != 100 || d.Processes[0].UsedBytes != 20<<30 {
		t.Errorf("processes %+v", d.Processes)
	}
	if *d.UtilizationPercent != 87 || *d.MemoryUtilizationPercent != 40 || *d.TemperatureCelsius != 71 || *d.PowerWatts != 612.5 {
		t.Errorf("sensors util %d/%d temp %d power %v", *d.UtilizationPercent, *d.MemoryUtilizationPercent, *d.TemperatureCelsius, *d.PowerWatts)
	}
	if err := g.SetMemoryUsed(g.TotalBytes()); err == nil {
		t.Error("fake accepted more used memory than the GPU has")
	}
}

func TestMemoryFallsBackToV1(t *testing.T) {
	f := mustFleet(t, "1xA10G")
	if err := f.GPUs[0].SetMemoryUsed(1 << 30); err != nil {
		t.Fatal(err)
	}
	if err := f.GPUs[0].Unsupported("GetMemoryInfo_v2"); err != nil {
		t.Fatal(err)
	}
	m := mustDiscover(t, f).Devices[0].Memory
	if !m.Known || m.ReservedBytes != nil {
		t.Fatalf("memory %+v: want known, reservation unknown", m)
	}
	// v1 counts the driver's reservation as used.
	if m.UsedBytes <= 1<<30 || m.UsedBytes+m.FreeBytes != m.TotalBytes {
		t.Errorf("v1 memory %+v", m)
	}
}

// Each row switches off NVML calls the way old drivers, consumer cards or
// locked-down containers do, and checks the field degrades to unknown while
// the rest of the GPU is still reported.
func TestUnsupportedCallsDegradeToUnknown(t *testing.T) {
	tests := []struct {
		name        string
		unsupported []string
		check       func(d gpu.Device) string
	}{
		{"memory", []string{"GetMemoryInfo_v2", "GetMemoryInfo"}, func(d gpu.Device) string {
			if d.Memory.Known || d.Memory.TotalBytes != 0 {
				return "memory should be unknown"
			}
			return ""
		}},
		{"architecture", []string{"GetArchitecture"}, func(d gpu.Device) string {
			if d.Architecture != "Unknown" {
				return "architecture " + d.Architecture
			}
			return ""
		}},
		{"compute capability", []string{"GetCudaComputeCapability"}, func(d gpu.Device) string {
			if d.CUDAComputeCapability != "" {
				return "compute capability " + d.CUDAComputeCapability
			}
			return ""
		}},
		{"numa", []string{"GetNumaNodeId"}, func(d gpu.Device) string {
			if d.NUMANode != nil {
				return "NUMA node should be unknown"
			}
			return ""
		}},
		{"sensors", []string{"GetUtilizationRates", "GetTemperature", "GetPowerUsage", "GetTotalEnergyConsumption", "GetClockInfo"}, func(d gpu.Device) string {
			if d.UtilizationPercent != nil || d.TemperatureCelsius != nil || d.PowerWatts != nil || d.EnergyMillijoules != nil || d.SMClockMHz != nil {
				return "sensors should be unknown"
			}
			return ""
		}},
		{"pci", []string{"GetPciInfo"}, func(d gpu.Device) string {
			if d.PCIBusID != "" {
				return "bus id " + d.PCIBusID
			}
			return ""
		}},
		{"nvlink", []string{"GetNvLinkState"}, func(d gpu.Device) string {
			if d.NVLinkCount != 0 || len(d.NVLinkPeers) != 0 {
				return "NVLink should be absent"
			}
			return ""
		}},
		{"mig", []string{"GetMigMode"}, func(d gpu.Device) string {
			if d.MIG.Capable {
				return "MIG should be unknown"
			}
			return ""
		}},
		{"health signals", []string{"GetRemappedRows", "GetTotalEccErrors", "GetRetiredPagesPendingStatus"}, func(d gpu.Device) string {
			if d.Health.State != gpu.Healthy {
				return "a GPU without memory-error counters is not unhealthy"
			}
			return ""
		}},
		{"processes", []string{"GetComputeRunningProcesses"}, func(d gpu.Device) string {
			if d.Processes != nil {
				return "processes should be unknown"
			}
			return ""
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustFleet(t, "dgxh100")
			if err := f.GPUs[0].Unsupported(tc.unsupported...); err != nil {
				t.Fatal(err)
			}
			inv := mustDiscover(t, f)
			d := inv.Devices[0]
			if msg := tc.check(d); msg != "" {
				t.Error(msg)
			}
			// The GPU is still there and identified.
			if d.UUID == "" || d.ProductName == "" || len(inv.Devices) != 8 {
				t.Errorf("GPU lost its identity: %+v", d)
			}
			// The other GPUs are untouched.
			if o := inv.Devices[1]; !o.Memory.Known || o.Architecture != "Hopper" || o.UtilizationPercent == nil {
				t.Errorf("GPU 1 affected: %+v", o)
			}
		})
	}
	if err := mustFleet(t, "1xA10G").GPUs[0].Unsupported("NoSuchCall"); err == nil {
		t.Error("Unsupported accepted a method nvml.Device does not have")
	}
}

func TestA100WithMIG(t *testing.T) {
	f := mustFleet(t, "dgxa100")
	if err := f.GPUs[0].EnableMIG(nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	f.GPUs[0].SetMIGMemoryUsed(0, 2<<30)
	inv := mustDiscover(t, f)
	d := inv.Devices[0]
	if !d.MIG.Capable || !d.MIG.Enabled {
		t.Fatalf("MIG %+v, want enabled", d.MIG)
	}
	var profiles []string
	for _, m := range d.MIG.Devices {
		profiles = append(profiles, m.Profile)
		if !strings.HasPrefix(m.UUID, "MIG-") || !m.Memory.Known {
			t.Errorf("MIG device %+v", m)
		}
	}
	if got, want := strings.Join(profiles, ","), "3g.20gb,2g.10gb,1g.5gb,1g.5gb"; got != want {
		t.Errorf("MIG profiles %s, want %s", got, want)
	}
	if m := d.MIG.Devices[0]; m.Memory.UsedBytes != 2<<30 || m.SliceCount != 3 {
		t.Errorf("first MIG device %+v", m)
	}
	if o := inv.Devices[1]; o.MIG.Enabled || len(o.MIG.Devices) != 0 {
		t.Errorf("GPU 1 should not be in MIG mode: %+v", o.MIG)
	}
	if err := f.GPUs[1].EnableMIG(nvml.GPU_INSTANCE_PROFILE_7_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err == nil {
		t.Error("fake accepted 8 compute slices on a 7-slice GPU")
	}
	if err := mustFleet(t, "1xA10G").GPUs[0].EnableMIG(nvml.GPU_INSTANCE_PROFILE_1_SLICE); err == nil {
		t.Error("A10G accepted MIG")
	}
}

func TestMIGProfileNames(t *testing.T) {
	tests := []struct {
		slices    uint32
		memMB     uint64
		parentMiB uint64
		want      string
	}{
		{1, 4864, 40960, "1g.5gb"},
		{1, 9856, 40960, "1g.10gb"},
		{3, 19968, 40960, "3g.20gb"},
		{7, 40192, 40960, "7g.40gb"},
		{1, 9856, 81920, "1g.10gb"},
		{7, 80896, 81920, "7g.80gb"},
		{0, 4864, 40960, ""},
	}
	for _, tc := range tests {
		if got := gpu.MIGProfileName(tc.slices, tc.memMB, tc.parentMiB*mib); got != tc.want {
			t.Errorf("MIGProfileName(%d, %d, %d MiB) = %q, want %q", tc.slices, tc.memMB, tc.parentMiB, got, tc.want)
		}
	}
}

func TestMemoryErrorHealth(t *testing.T) {
	tests := []struct {
		name    string
		prepare func(g *fake.GPU)
		reason  string
	}{
		{"remap pending", func(g *fake.GPU) { g.SetRemappedRows(true, false) }, "row remapping pending"},
		{"remap failed", func(g *fake.GPU) { g.SetRemappedRows(false, true) }, "row remapping failed"},
		{"uncorrectable ECC", func(g *fake.GPU) { g.SetUncorrectableECC(3) }, "3 uncorrectable ECC errors"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := mustFleet(t, "dgxh100")
			tc.prepare(f.GPUs[5])
			inv := mustDiscover(t, f)
			h := inv.Devices[5].Health
			if h.State != gpu.Unhealthy || len(h.Reasons) != 1 || !strings.Contains(h.Reasons[0], tc.reason) {
				t.Errorf("health %+v, want unhealthy with %q", h, tc.reason)
			}
			if inv.Devices[4].Health.State != gpu.Healthy {
				t.Error("a neighbour GPU became unhealthy")
			}
		})
	}
}

func TestOpenWithoutDriver(t *testing.T) {
	_, _, err := gpu.Open("/nonexistent/" + gpu.LibraryName)
	if !errors.Is(err, gpu.ErrNoDriver) {
		t.Fatalf("Open of a missing library: %v, want ErrNoDriver", err)
	}
	if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, gpu.LibraryName) {
		t.Errorf("error %q should be one line naming %s", msg, gpu.LibraryName)
	}
	// On this machine's default search path too, unless it really has a driver.
	if _, err := os.Stat("/dev/nvidiactl"); err == nil {
		t.Skip("machine has an NVIDIA driver")
	}
	if _, _, err := gpu.Open(""); !errors.Is(err, gpu.ErrNoDriver) {
		t.Errorf("Open on a machine without driver: %v, want ErrNoDriver", err)
	}
}
