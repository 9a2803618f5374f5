package gpu

import (
	"fmt"
	nvdev "github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"math"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// Discover reads every GPU that lib exposes. lib must already be initialized
// (see Open). It fails only when the GPUs cannot be enumerated at all; a call
// that one GPU or driver does not support leaves that field unknown.
func Discover(lib nvml.Interface) (*Inventory, error) {
	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, fmt.Errorf("count GPUs through NVML: %w", ret)
	}
	inv := &Inventory{SampledAt: time.Now()}
	if v, ret := lib.SystemGetDriverVersion(); ret == nvml.SUCCESS {
		inv.DriverVersion = v
	}
	if v, ret := lib.SystemGetCudaDriverVersion(); ret == nvml.SUCCESS && v > 0 {
		inv.CUDADriverVersion = fmt.Sprintf("%d.%d", v/1000, (v%1000)/10)
	}

	links := make([]nvlinkEnds, count)
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			// A GPU that cannot even be opened must stay visible, as unhealthy,
			// so that operators see it and nothing is scheduled onto it.
			inv.Devices = append(inv.Devices, Device{
				Index: i, Minor: -1, Architecture: "Unknown",
				Health: Health{State: Unhealthy, Reasons: []string{"cannot open GPU: " + ret.Error()}},
			})
			continue
		}
		d, ends := readDevice(i, dev)
		inv.Devices = append(inv.Devices, d)
		links[i] = ends
	}
	resolveNVLinkPeers(inv.Devices, links)
	return inv, nil
}

// nvlinkEnds is what the active NVLinks of one GPU connect to.
type nvlinkEnds struct {
	gpuBusIDs []string // canonical bus ids of directly connected GPUs
	switched  bool     // at least one link goes to an NVSwitch
}

// callTracker remembers whether any call reported that the GPU is gone, which
// is the one failure that makes a GPU unhealthy by itself.
type callTracker struct{ lost bool }

func (c *callTracker) ok(ret nvml.Return) bool {
	if ret == nvml.ERROR_GPU_IS_LOST {
		c.lost = true
	}
	return ret == nvml.SUCCESS
}

func readDevice(index int, dev nvml.Device) (Device, nvlinkEnds) {
	var c callTracker
	d := Device{Index: index, Minor: -1, Architecture: "Unknown"}

	if v, ret := dev.GetMinorNumber(); c.ok(ret) {
		d.Minor = v
	}
	if v, ret := dev.GetUUID(); c.ok(ret) {
		d.UUID = v
	}
	if v, ret := dev.GetName(); c.ok(ret) {
		d.ProductName = v
	}
	// NVIDIA's own spellings (go-nvlib), as its DRA driver publishes them.
	nd, _ := nvdev.New(nil).NewDevice(dev)
	if v, err := nd.GetArchitectureAsString(); err == nil {
		d.Architecture = v
	}
	if v, err := nd.GetBrandAsString(); err == nil {
		d.Brand = v
	}
	if major, minor, ret := dev.GetCudaComputeCapability(); c.ok(ret) {
		d.CUDAComputeCapability = fmt.Sprintf("%d.%d", major, minor)
	}
	if p, ret := dev.GetPciInfo(); c.ok(ret) {
		d.NVMLPCIBusID = busIDString(p.BusId)
		d.PCIBusID = CanonicalPCIBusID(d.NVMLPCIBusID)
	}
	if v, ret := dev.GetNumaNodeId(); c.ok(ret) && v >= 0 {
		d.NUMANode = &v
	}
	d.Memory = readMemory(dev, &c)
	d.MIG = readMIG(dev, d.Memory.TotalBytes, &c)

	if u, ret := dev.GetUtilizationRates(); c.ok(ret) {
		d.UtilizationPercent, d.MemoryUtilizationPercent = &u.Gpu, &u.Memory
	}
	if v, ret := dev.GetTemperature(nvml.TEMPERATURE_GPU); c.ok(ret) {
		d.TemperatureCelsius = &v
	}
	if v, ret := dev.GetPowerUsage(); c.ok(ret) {
		w := float64(v) / 1000 // NVML reports milliwatts
		d.PowerWatts = &w
	}
	if v, ret := dev.GetTotalEnergyConsumption(); c.ok(ret) {
		d.EnergyMillijoules = &v
	}
	if v, ret := dev.GetClockInfo(nvml.CLOCK_SM); c.ok(ret) {
		d.SMClockMHz = &v
	}
	if v, ret := dev.GetClockInfo(nvml.CLOCK_MEM); c.ok(ret) {
		d.MemoryClockMHz = &v
	}
	readCounters(dev, &d, &c)
	d.Processes = readProcesses(dev, d.MIG, &c)

	ends := readNVLinks(dev, &d, &c)
	d.Health = readMemoryHealth(dev, &c)
	if c.lost {
		d.Health.State = Unhealthy
		d.Health.Reasons = append(d.Health.Reasons, "GPU is lost (fell off the bus): reset or replace it")
	}
	return d, ends
}

// readMemory prefers the v2 call, which separates the driver's reservation
// from memory used by processes; v1 counts the reservation as used.
func readMemory(dev nvml.Device, c *callTracker) Memory {
	if m, ret := dev.GetMemoryInfo_v2(); c.ok(ret) {
		reserved := m.Reserved
		return Memory{Known: true, TotalBytes: m.Total, ReservedBytes: &reserved, UsedBytes: m.Used, FreeBytes: m.Free}
	}
	if m, ret := dev.GetMemoryInfo(); c.ok(ret) {
		return Memory{Known: true, TotalBytes: m.Total, UsedBytes: m.Used, FreeBytes: m.Free}
	}
	return Memory{}
}

func readMIG(dev nvml.Device, parentTotal uint64, c *callTracker) MIG {
	current, _, ret := dev.GetMigMode()
	if !c.ok(ret) {
		return MIG{}
	}
	mig := MIG{Capable: true, Enabled: current == nvml.DEVICE_MIG_ENABLE}
	if !mig.Enabled {
		return mig
	}
	max, ret := dev.GetMaxMigDeviceCount()
	if !c.ok(ret) {
		return mig
	}
	for i := 0; i < max; i++ {
		h, ret := dev.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue // empty slots are ERROR_NOT_FOUND
		}
		md := MIGDevice{Index: i, GPUInstanceID: -1, ComputeInstanceID: -1}
		if v, ret := h.GetUUID(); c.ok(ret) {
			md.UUID = v
		}
		if v, ret := h.GetGpuInstanceId(); c.ok(ret) {
			md.GPUInstanceID = v
		}
		if v, ret := h.GetComputeInstanceId(); c.ok(ret) {
			md.ComputeInstanceID = v
		}
		if a, ret := h.GetAttributes(); c.ok(ret) {
			md.SliceCount = a.GpuInstanceSliceCount
			md.MultiprocessorCount = a.MultiprocessorCount
			md.CopyEngines, md.Decoders, md.Encoders = a.SharedCopyEngineCount, a.SharedDecoderCount, a.SharedEncoderCount
			md.JPEGEngines, md.OFAEngines = a.SharedJpegCount, a.SharedOfaCount
			md.Profile = MIGProfileName(a.GpuInstanceSliceCount, a.MemorySizeMB, parentTotal)
		}
		md.Memory = readMemory(h, c)
		mig.Devices = append(mig.Devices, md)
	}
	sort.Slice(mig.Devices, func(a, b int) bool { return mig.Devices[a].GPUInstanceID < mig.Devices[b].GPUInstanceID })
	return mig
}

// MIGProfileName names a MIG instance the way nvidia-smi does ("3g.20gb"):
// its memory as a fraction of the parent's, rounded up to eighths, times the
// parent's memory in whole GB. Rounding to eighths is what makes a 4864 MiB
// slice of a 40 GB A100 read "5gb".
func MIGProfileName(slices uint32, memoryMB, parentTotalBytes uint64) string {
	parentMB := parentTotalBytes / (1 << 20)
	if parentMB == 0 || slices == 0 {
		return ""
	}
	fraction := math.Ceil(float64(memoryMB)/float64(parentMB)*8) / 8
	parentGB := float64((parentTotalBytes + (1 << 30) - 1) / (1 << 30))
	return fmt.Sprintf("%dg.%dgb", slices, int(math.Round(fraction*parentGB)))
}

func readProcesses(dev nvml.Device, mig MIG, c *callTracker) []Process {
	var out []Process
	if !mig.Enabled {
		if ps, ret := dev.GetComputeRunningProcesses(); c.ok(ret) {
			for _, p := range ps {
				out = append(out, Process{PID: p.Pid, UsedBytes: p.UsedGpuMemory})
			}
		}
		return out
	}
	// With MIG on, NVML lists processes per MIG device.
	for i := range mig.Devices {
		md := &mig.Devices[i]
		h, ret := dev.GetMigDeviceHandleByIndex(md.Index)
		if ret != nvml.SUCCESS {
			continue
		}
		ps, ret := h.GetComputeRunningProcesses()
		if !c.ok(ret) {
			continue
		}
		for _, p := range ps {
			out = append(out, Process{PID: p.Pid, UsedBytes: p.UsedGpuMemory, MIGDeviceUUID: md.UUID})
		}
	}
	return out
}

func readNVLinks(dev nvml.Device, d *Device, c *callTracker) nvlinkEnds {
	var ends nvlinkEnds
	for link := 0; link < nvml.NVLINK_MAX_LINKS; link++ {
		state, ret := dev.GetNvLinkState(link)
		if ret == nvml.ERROR_NOT_SUPPORTED && link == 0 {
			break // no NVLink on this GPU
		}
		if !c.ok(ret) || state != nvml.FEATURE_ENABLED {
			continue
		}
		d.NVLinkCount++
		if t, ret := dev.GetNvLinkRemoteDeviceType(link); c.ok(ret) && t == nvml.NVLINK_DEVICE_TYPE_SWITCH {
			ends.switched = true
			continue
		}
		if p, ret := dev.GetNvLinkRemotePciInfo(link); c.ok(ret) {
			ends.gpuBusIDs = append(ends.gpuBusIDs, CanonicalPCIBusID(busIDString(p.BusId)))
		}
	}
	return ends
}

// resolveNVLinkPeers turns link ends into peer UUIDs. GPUs behind NVSwitches
// form one fully connected fabric, so each reaches every other switched GPU.
// A remote bus id that is no local GPU (an older driver that cannot tell
// device types) is taken to be a switch.
func resolveNVLinkPeers(devs []Device, links []nvlinkEnds) {
	byBus := map[string]int{}
	for i, d := range devs {
		if d.PCIBusID != "" {
			byBus[d.PCIBusID] = i
		}
	}
	for i := range links {
		kept := links[i].gpuBusIDs[:0]
		for _, bus := range links[i].gpuBusIDs {
			if _, ok := byBus[bus]; ok {
				kept = append(kept, bus)
			} else {
				links[i].switched = true
			}
		}
		links[i].gpuBusIDs = kept
	}
	for i := range devs {
		peers := map[string]bool{}
		for _, bus := range links[i].gpuBusIDs {
			if j := byBus[bus]; j != i && devs[j].UUID != "" {
				peers[devs[j].UUID] = true
			}
		}
		if links[i].switched {
			for j := range devs {
				if j != i && links[j].switched && devs[j].UUID != "" {
					peers[devs[j].UUID] = true
				}
			}
		}
		for uuid := range peers {
			devs[i].NVLinkPeers = append(devs[i].NVLinkPeers, uuid)
		}
		sort.Strings(devs[i].NVLinkPeers)
	}
}

// readMemoryHealth checks the memory error signals that mean a GPU must be
// reset or replaced. XIDs are event-driven and merged later (HealthTracker).
func readMemoryHealth(dev nvml.Device, c *callTracker) Health {
	h := Health{State: Healthy}
	if _, _, pending, failed, ret := dev.GetRemappedRows(); c.ok(ret) {
		if failed {
			h.Reasons = append(h.Reasons, "row remapping failed: replace the GPU")
		}
		if pending {
			h.Reasons = append(h.Reasons, "row remapping pending: reset the GPU")
		}
	}
	if v, ret := dev.GetRetiredPagesPendingStatus(); c.ok(ret) && v == nvml.FEATURE_ENABLED {
		h.Reasons = append(h.Reasons, "retired pages pending: reset the GPU")
	}
	if n, ret := dev.GetTotalEccErrors(nvml.MEMORY_ERROR_TYPE_UNCORRECTED, nvml.VOLATILE_ECC); c.ok(ret) && n > 0 {
		h.Reasons = append(h.Reasons, fmt.Sprintf("%d uncorrectable ECC errors since the last reset", n))
	}
	if len(h.Reasons) > 0 {
		h.State = Unhealthy
	}
	return h
}

func busIDString(raw [32]int8) string {
	var b strings.Builder
	for _, c := range raw {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return b.String()
}

// CanonicalPCIBusID turns NVML's "00000000:07:00.0" into the Linux form
// "0000:07:00.0". Input that does not parse is returned lower-cased.
func CanonicalPCIBusID(nvmlBusID string) string {
	s := strings.ToLower(strings.TrimSpace(nvmlBusID))
	domain, rest, ok := strings.Cut(s, ":")
	if !ok {
		return s
	}
	d, err := strconv.ParseUint(domain, 16, 32)
	if err != nil || d > 0xffff {
		return s
	}
	return fmt.Sprintf("%04x:%s", d, rest)
}

// readCounters reads the DCGM exporter's reliability and video-engine fields.
func readCounters(dev nvml.Device, d *Device, c *callTracker) {
	if corr, unc, _, failed, ret := dev.GetRemappedRows(); c.ok(ret) {
		cv, uv := uint64(corr), uint64(unc)
		d.RemappedRowsCorrectable, d.RemappedRowsUncorrectable, d.RowRemapFailed = &cv, &uv, &failed
	}
	if v, ret := dev.GetPcieReplayCounter(); c.ok(ret) {
		n := uint64(v)
		d.PCIeReplays = &n
	}
	if v, ret := dev.GetPcieThroughput(nvml.PCIE_UTIL_TX_BYTES); c.ok(ret) {
		n := uint64(v) * 1024
		d.PCIeTxBytesPerSecond = &n
	}
	if v, ret := dev.GetPcieThroughput(nvml.PCIE_UTIL_RX_BYTES); c.ok(ret) {
		n := uint64(v) * 1024
		d.PCIeRxBytesPerSecond = &n
	}
	if v, _, ret := dev.GetEncoderUtilization(); c.ok(ret) {
		d.EncoderUtilizationPercent = &v
	}
	if v, _, ret := dev.GetDecoderUtilization(); c.ok(ret) {
		d.DecoderUtilizationPercent = &v
	}
}
