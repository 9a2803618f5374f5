// Package fake builds fake GPU fleets that stand in for real NVML in tests and
// in `gantry-node-agent --fake-gpus`. They are go-nvml's mock servers
// (dgxa100, dgxh100, dgxh200, ...) completed with what the node agent reads:
// live memory, processes, utilization, sensors, NVLink, MIG devices, XID
// events and memory errors, all changeable while the fleet is in use.
//
// Every NVML call that go-nvml's mocks leave unimplemented answers
// ERROR_NOT_SUPPORTED instead of panicking, so code under test meets the same
// "not supported" answers a real driver gives, and tests can switch off any
// call with GPU.Unsupported.
//
// It depends on go-nvml only; nothing here knows about Kubernetes.
package fake

import (
	"fmt"
	"reflect"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/gpus"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
	"github.com/google/uuid"
)

const mib = 1 << 20

// Extra models that go-nvml's mock catalogue lacks, with the memory sizes
// nvidia-smi reports on real cards.
var (
	a10g = gpus.Config{Name: "NVIDIA A10G", Architecture: nvml.DEVICE_ARCH_AMPERE, Brand: nvml.BRAND_NVIDIA,
		MemoryMB: 23028, CudaMajor: 8, CudaMinor: 6, PciDeviceId: 0x223710DE}
	l4 = gpus.Config{Name: "NVIDIA L4", Architecture: nvml.DEVICE_ARCH_ADA, Brand: nvml.BRAND_NVIDIA,
		MemoryMB: 23034, CudaMajor: 8, CudaMinor: 9, PciDeviceId: 0x27B810DE}
	t4 = gpus.Config{Name: "Tesla T4", Architecture: nvml.DEVICE_ARCH_TURING, Brand: nvml.BRAND_TESLA,
		MemoryMB: 15360, CudaMajor: 7, CudaMinor: 5, PciDeviceId: 0x1EB810DE}
)

func realName(c gpus.Config) gpus.Config {
	// go-nvml names one of its configs "Mock NVIDIA ..."; real drivers do not.
	c.Name = strings.TrimPrefix(c.Name, "Mock ")
	return c
}

// models maps the MODEL of an "NxMODEL" profile (case-insensitive) to a GPU.
var models = map[string]gpus.Config{
	"a10g":      a10g,
	"l4":        l4,
	"t4":        t4,
	"a30":       gpus.A30_PCIE_24GB,
	"a100":      realName(gpus.A100_SXM4_40GB),
	"a100-40gb": realName(gpus.A100_SXM4_40GB),
	"a100-80gb": gpus.A100_SXM4_80GB,
	"h100":      gpus.H100_SXM5_80GB,
	"h200":      gpus.H200_SXM5_141GB,
	"b200":      gpus.B200_SXM5_180GB,
}

// machine is a whole-server profile: its GPUs, how many NVLinks each has to
// the NVSwitches, and its driver.
type machine struct {
	gpu         gpus.Config
	count       int
	nvlinks     int
	driver      string
	cudaVersion int
}

var machines = map[string]machine{
	"dgxa100": {gpu: realName(gpus.A100_SXM4_40GB), count: 8, nvlinks: 12, driver: "550.54.15", cudaVersion: 12040},
	"dgxh100": {gpu: gpus.H100_SXM5_80GB, count: 8, nvlinks: 18, driver: "550.54.15", cudaVersion: 12040},
	"dgxh200": {gpu: gpus.H200_SXM5_141GB, count: 8, nvlinks: 18, driver: "550.54.15", cudaVersion: 12040},
}

var countedProfile = regexp.MustCompile(`^([0-9]+)[xX×](.+)$`)

// Profiles lists the accepted profile forms, for help texts.
func Profiles() string {
	var names []string
	for m := range models {
		names = append(names, m)
	}
	sort.Strings(names)
	return "dgxa100, dgxh100, dgxh200, or NxMODEL (e.g. 1xA10G) with MODEL one of " + strings.Join(names, ", ")
}

// Fleet is a fake machine. It is an nvml.Interface.
type Fleet struct {
	*server.Server
	GPUs   []*GPU
	events chan nvml.EventData
	life   lifecycle
}

// GPU is one fake GPU. Its setters are safe to call while the fleet is read
// from other goroutines; Unsupported and EnableMIG are not.
type GPU struct {
	dev   *server.Device
	fleet *Fleet
	seed  string
	busID string
	numa  int
	links int
	mu    sync.Mutex
	state liveState
	migs  []*migDevice
}

type liveState struct {
	reservedBytes  uint64
	usedBytes      uint64
	processes      []nvml.ProcessInfo
	utilGPU        uint32
	utilMemory     uint32
	temperatureC   uint32
	powerMilliwatt uint32
	energyMJ       uint64
	remapPending   bool
	remapFailed    bool
	eccUncorrected uint64
	pcieTxKBps     uint32
	pcieRxKBps     uint32
	pcieReplays    int
	encoderPercent uint32
	decoderPercent uint32
}

type migDevice struct {
	mock.Device
	uuid      string
	gi        nvml.GpuInstance
	giID      int
	ciID      int
	profile   nvml.GpuInstanceProfileInfo
	usedBytes uint64
}

// busNumbers are the PCI buses of a DGX H100's GPUs, to look like a real machine.
var busNumbers = []uint32{0x1b, 0x43, 0x52, 0x61, 0x9d, 0xc3, 0xd1, 0xdf}

// New builds the fleet named by profile: "dgxa100", "dgxh100", "dgxh200", or
// "NxMODEL" such as "1xA10G" or "4xH100". seed makes UUIDs stable across
// processes (use the node name); the same profile and seed give the same UUIDs.
func New(profile, seed string) (*Fleet, error) {
	m, err := parseProfile(profile)
	if err != nil {
		return nil, err
	}
	if seed == "" {
		seed = profile
	}
	s, err := server.New(
		server.WithGPUs(gpus.Multiple(m.count, m.gpu)...),
		server.WithDriverVersion(m.driver),
		server.WithNVMLVersion("12."+m.driver),
		server.WithCUDADriverVersion(m.cudaVersion),
	)
	if err != nil {
		return nil, fmt.Errorf("build fake fleet %q: %w", profile, err)
	}
	f := &Fleet{Server: s, events: make(chan nvml.EventData, 64)}
	fillUnsupported(reflect.ValueOf(&s.Interface).Elem())
	fillUnsupported(reflect.ValueOf(&s.ExtendedInterface).Elem())
	s.EventSetCreateFunc = f.newEventSet
	f.installLifecycle()
	byUUID := s.DeviceGetHandleByUUIDFunc
	s.DeviceGetHandleByUUIDFunc = func(id string) (nvml.Device, nvml.Return) {
		for _, g := range f.GPUs {
			for _, m := range g.migs {
				if m.uuid == id {
					return m, nvml.SUCCESS
				}
			}
		}
		return byUUID(id)
	}

	for i, d := range s.Devices {
		dev := d.(*server.Device)
		bus := uint32(0xe0 + i)
		if i < len(busNumbers) {
			bus = busNumbers[i]
		}
		g := &GPU{
			dev:   dev,
			fleet: f,
			seed:  fmt.Sprintf("%s/%d", seed, i),
			busID: fmt.Sprintf("%08X:%02X:00.0", 0, bus),
			numa:  i * 2 / max(m.count, 1), // half the GPUs on each socket
			links: m.nvlinks,
		}
		total := m.gpu.MemoryMB * mib
		// Drivers keep roughly half a percent of memory for themselves.
		g.state = liveState{reservedBytes: (total / 200) / mib * mib, temperatureC: 32, powerMilliwatt: 70000}
		dev.UUID = "GPU-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(g.seed)).String()
		dev.PciBusID = strings.ToLower(g.busID)
		fillUnsupported(reflect.ValueOf(&dev.Device).Elem())
		g.install()
		f.GPUs = append(f.GPUs, g)
	}
	return f, nil
}

func parseProfile(profile string) (machine, error) {
	p := strings.ToLower(strings.TrimSpace(profile))
	if m, ok := machines[p]; ok {
		return m, nil
	}
	if sub := countedProfile.FindStringSubmatch(p); sub != nil {
		n, err := strconv.Atoi(sub[1])
		if err == nil && n > 0 && n <= 64 {
			if c, ok := models[sub[2]]; ok {
				return machine{gpu: c, count: n, driver: "550.54.15", cudaVersion: 12040}, nil
			}
		}
	}
	return machine{}, fmt.Errorf("unknown fake GPU profile %q: want %s", profile, Profiles())
}

// TotalBytes is the GPU's framebuffer size.
func (g *GPU) TotalBytes() uint64 { return g.dev.Config.MemoryMB * mib }

// UUID is the GPU's UUID.
func (g *GPU) UUID() string { return g.dev.UUID }

// SetMemoryUsed sets the memory that processes use, in bytes.
func (g *GPU) SetMemoryUsed(bytes uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if bytes > g.TotalBytes()-g.state.reservedBytes {
		return fmt.Errorf("GPU %d: %d bytes used exceeds the %d bytes not reserved by the driver", g.dev.Index, bytes, g.TotalBytes()-g.state.reservedBytes)
	}
	g.state.usedBytes = bytes
	return nil
}

// SetProcesses replaces the processes on the GPU; used memory becomes their sum.
func (g *GPU) SetProcesses(procs ...nvml.ProcessInfo) error {
	var sum uint64
	for _, p := range procs {
		sum += p.UsedGpuMemory
	}
	if err := g.SetMemoryUsed(sum); err != nil {
		return err
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.processes = append([]nvml.ProcessInfo(nil), procs...)
	return nil
}

// SetUtilization sets the GPU and memory utilization in percent.
func (g *GPU) SetUtilization(gpuPercent, memoryPercent uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.utilGPU, g.state.utilMemory = gpuPercent, memoryPercent
}

// SetPCIe sets the PCIe throughput (KB/s, as NVML reports it) and replay counter.
func (g *GPU) SetPCIe(txKBps, rxKBps uint32, replays int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.pcieTxKBps, g.state.pcieRxKBps, g.state.pcieReplays = txKBps, rxKBps, replays
}

// SetVideoUtilization sets the encoder and decoder utilization in percent.
func (g *GPU) SetVideoUtilization(encoderPercent, decoderPercent uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.encoderPercent, g.state.decoderPercent = encoderPercent, decoderPercent
}

// SetTemperature sets the GPU temperature in °C.
func (g *GPU) SetTemperature(celsius uint32) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.temperatureC = celsius
}

// SetPowerWatts sets the power draw.
func (g *GPU) SetPowerWatts(watts float64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.powerMilliwatt = uint32(watts * 1000)
}

// SetRemappedRows sets the row-remapping state (Ampere and newer).
func (g *GPU) SetRemappedRows(pending, failed bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.remapPending, g.state.remapFailed = pending, failed
}

// SetUncorrectableECC sets the volatile uncorrectable ECC error count.
func (g *GPU) SetUncorrectableECC(n uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.state.eccUncorrected = n
}

// InjectXID delivers an XID event for this GPU to every event set.
func (g *GPU) InjectXID(xid uint64) {
	g.fleet.events <- nvml.EventData{Device: g.dev, EventType: nvml.EventTypeXidCriticalError, EventData: xid}
}

// Unsupported makes the named nvml.Device methods (e.g. "GetMemoryInfo_v2")
// answer ERROR_NOT_SUPPORTED from now on.
func (g *GPU) Unsupported(methods ...string) error {
	v := reflect.ValueOf(&g.dev.Device).Elem()
	for _, m := range methods {
		f := v.FieldByName(m + "Func")
		if !f.IsValid() || f.Kind() != reflect.Func {
			return fmt.Errorf("nvml.Device has no method %q", m)
		}
		f.Set(notSupported(f.Type()))
	}
	return nil
}

// EnableMIG turns MIG mode on and creates one GPU instance (with one compute
// instance) per GPU instance profile id, e.g. nvml.GPU_INSTANCE_PROFILE_3_SLICE.
func (g *GPU) EnableMIG(profileIDs ...int) error {
	cfg := g.dev.Config.MIGProfiles
	if len(cfg.GpuInstanceProfiles) == 0 {
		return fmt.Errorf("%s does not support MIG", g.dev.Config.Name)
	}
	var slices uint32
	for _, id := range profileIDs {
		info, ok := cfg.GpuInstanceProfiles[id]
		if !ok {
			return fmt.Errorf("%s has no MIG profile %d", g.dev.Config.Name, id)
		}
		slices += info.SliceCount
	}
	if slices > 7 {
		return fmt.Errorf("MIG profiles need %d compute slices, the GPU has 7", slices)
	}
	if _, ret := g.dev.SetMigMode(nvml.DEVICE_MIG_ENABLE); ret != nvml.SUCCESS {
		return fmt.Errorf("enable MIG: %w", ret)
	}
	for n, id := range profileIDs {
		info := cfg.GpuInstanceProfiles[id]
		gi, ret := g.dev.CreateGpuInstance(&info)
		if ret != nvml.SUCCESS {
			return fmt.Errorf("create GPU instance: %w", ret)
		}
		giInfo, _ := gi.GetInfo()
		ci, err := fullComputeInstance(gi, info.SliceCount)
		if err != nil {
			return err
		}
		ciInfo, _ := ci.GetInfo()
		md := &migDevice{
			uuid:    "MIG-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(fmt.Sprintf("%s/mig/%d", g.seed, n))).String(),
			gi:      gi,
			giID:    int(giInfo.Id),
			ciID:    int(ciInfo.Id),
			profile: info,
		}
		g.installMIG(md)
		g.migs = append(g.migs, md)
	}
	return nil
}

// SetMIGMemoryUsed sets the memory used on the n-th MIG device.
func (g *GPU) SetMIGMemoryUsed(n int, bytes uint64) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.migs[n].usedBytes = bytes
}

func (g *GPU) install() {
	d := g.dev
	d.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
		p := nvml.PciInfo{PciDeviceId: d.Config.PciDeviceId}
		for i, c := range g.busID {
			p.BusId[i] = int8(c)
		}
		fmt.Sscanf(g.busID, "%x:%x:%x", &p.Domain, &p.Bus, &p.Device)
		return p, nvml.SUCCESS
	}
	d.GetNumaNodeIdFunc = func() (int, nvml.Return) { return g.numa, nvml.SUCCESS }
	// NVIDIA's CDI library asks each handle whether it is a MIG device.
	d.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return false, nvml.SUCCESS }
	d.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		total, used := g.TotalBytes(), g.state.usedBytes+g.state.reservedBytes
		// v1 counts the driver's reservation as used.
		return nvml.Memory{Total: total, Used: used, Free: total - used}, nvml.SUCCESS
	}
	d.GetMemoryInfo_v2Func = func() (nvml.Memory_v2, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		total := g.TotalBytes()
		return nvml.Memory_v2{Version: 2, Total: total, Reserved: g.state.reservedBytes, Used: g.state.usedBytes,
			Free: total - g.state.reservedBytes - g.state.usedBytes}, nvml.SUCCESS
	}
	d.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return append([]nvml.ProcessInfo(nil), g.state.processes...), nvml.SUCCESS
	}
	d.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return nvml.Utilization{Gpu: g.state.utilGPU, Memory: g.state.utilMemory}, nvml.SUCCESS
	}
	d.GetTemperatureFunc = func(s nvml.TemperatureSensors) (uint32, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.state.temperatureC, nvml.SUCCESS
	}
	d.GetPowerUsageFunc = func() (uint32, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.state.powerMilliwatt, nvml.SUCCESS
	}
	start := time.Now()
	d.GetTotalEnergyConsumptionFunc = func() (uint64, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		// Energy grows with the current draw, so it is monotonic like the real counter.
		return uint64(time.Since(start).Seconds() * float64(g.state.powerMilliwatt)), nvml.SUCCESS
	}
	d.GetClockInfoFunc = func(t nvml.ClockType) (uint32, nvml.Return) {
		switch t {
		case nvml.CLOCK_SM:
			return 1980, nvml.SUCCESS
		case nvml.CLOCK_MEM:
			return 2619, nvml.SUCCESS
		}
		return 0, nvml.ERROR_NOT_SUPPORTED
	}
	d.GetRemappedRowsFunc = func() (int, int, bool, bool, nvml.Return) {
		if d.Config.Architecture < nvml.DEVICE_ARCH_AMPERE {
			return 0, 0, false, false, nvml.ERROR_NOT_SUPPORTED
		}
		g.mu.Lock()
		defer g.mu.Unlock()
		return 0, 0, g.state.remapPending, g.state.remapFailed, nvml.SUCCESS
	}
	d.GetPcieReplayCounterFunc = func() (int, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.state.pcieReplays, nvml.SUCCESS
	}
	d.GetPcieThroughputFunc = func(c nvml.PcieUtilCounter) (uint32, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		switch c {
		case nvml.PCIE_UTIL_TX_BYTES:
			return g.state.pcieTxKBps, nvml.SUCCESS
		case nvml.PCIE_UTIL_RX_BYTES:
			return g.state.pcieRxKBps, nvml.SUCCESS
		}
		return 0, nvml.ERROR_INVALID_ARGUMENT
	}
	d.GetEncoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.state.encoderPercent, 167000, nvml.SUCCESS
	}
	d.GetDecoderUtilizationFunc = func() (uint32, uint32, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.state.decoderPercent, 167000, nvml.SUCCESS
	}
	d.GetTotalEccErrorsFunc = func(nvml.MemoryErrorType, nvml.EccCounterType) (uint64, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		return g.state.eccUncorrected, nvml.SUCCESS
	}
	d.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
		if g.links == 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		if link >= g.links {
			return 0, nvml.ERROR_INVALID_ARGUMENT
		}
		return nvml.FEATURE_ENABLED, nvml.SUCCESS
	}
	d.GetNvLinkRemoteDeviceTypeFunc = func(int) (nvml.IntNvLinkDeviceType, nvml.Return) {
		return nvml.NVLINK_DEVICE_TYPE_SWITCH, nvml.SUCCESS
	}
	d.GetGpuInstanceByIdFunc = func(id int) (nvml.GpuInstance, nvml.Return) {
		for _, m := range g.migs {
			if m.giID == id {
				return m.gi, nvml.SUCCESS
			}
		}
		return nil, nvml.ERROR_NOT_FOUND
	}
	d.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) {
		if len(d.Config.MIGProfiles.GpuInstanceProfiles) == 0 {
			return 0, nvml.ERROR_NOT_SUPPORTED
		}
		return 7, nvml.SUCCESS
	}
	d.GetMigDeviceHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if i < 0 || i >= len(g.migs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		return g.migs[i], nvml.SUCCESS
	}
	if len(d.Config.MIGProfiles.GpuInstanceProfiles) == 0 {
		// GPUs without MIG answer "not supported", not "disabled".
		d.GetMigModeFunc = func() (int, int, nvml.Return) { return 0, 0, nvml.ERROR_NOT_SUPPORTED }
	}
	d.GetSupportedEventTypesFunc = func() (uint64, nvml.Return) { return nvml.EventTypeXidCriticalError, nvml.SUCCESS }
	d.RegisterEventsFunc = func(uint64, nvml.EventSet) nvml.Return { return nvml.SUCCESS }
}

func (g *GPU) installMIG(md *migDevice) {
	fillUnsupported(reflect.ValueOf(&md.Device).Elem())
	md.GetUUIDFunc = func() (string, nvml.Return) { return md.uuid, nvml.SUCCESS }
	md.IsMigDeviceHandleFunc = func() (bool, nvml.Return) { return true, nvml.SUCCESS }
	index := len(g.migs) // installMIG runs before md is appended
	md.GetIndexFunc = func() (int, nvml.Return) { return index, nvml.SUCCESS }
	md.GetDeviceHandleFromMigDeviceHandleFunc = func() (nvml.Device, nvml.Return) { return g.dev, nvml.SUCCESS }
	md.GetGpuInstanceIdFunc = func() (int, nvml.Return) { return md.giID, nvml.SUCCESS }
	md.GetComputeInstanceIdFunc = func() (int, nvml.Return) { return md.ciID, nvml.SUCCESS }
	md.GetAttributesFunc = func() (nvml.DeviceAttributes, nvml.Return) {
		return nvml.DeviceAttributes{
			MultiprocessorCount:       md.profile.MultiprocessorCount,
			SharedCopyEngineCount:     md.profile.CopyEngineCount,
			SharedDecoderCount:        md.profile.DecoderCount,
			SharedEncoderCount:        md.profile.EncoderCount,
			SharedJpegCount:           md.profile.JpegCount,
			SharedOfaCount:            md.profile.OfaCount,
			GpuInstanceSliceCount:     md.profile.SliceCount,
			ComputeInstanceSliceCount: md.profile.SliceCount,
			MemorySizeMB:              md.profile.MemorySizeMB,
		}, nvml.SUCCESS
	}
	md.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
		g.mu.Lock()
		defer g.mu.Unlock()
		total := md.profile.MemorySizeMB * mib
		return nvml.Memory{Total: total, Used: md.usedBytes, Free: total - md.usedBytes}, nvml.SUCCESS
	}
	md.GetComputeRunningProcessesFunc = func() ([]nvml.ProcessInfo, nvml.Return) { return nil, nvml.SUCCESS }
}

func (f *Fleet) newEventSet() (nvml.EventSet, nvml.Return) {
	set := &mock.EventSet{}
	fillUnsupported(reflect.ValueOf(set).Elem())
	set.WaitFunc = func(timeoutMillis uint32) (nvml.EventData, nvml.Return) {
		select {
		case ev := <-f.events:
			return ev, nvml.SUCCESS
		case <-time.After(time.Duration(timeoutMillis) * time.Millisecond):
			return nvml.EventData{}, nvml.ERROR_TIMEOUT
		}
	}
	set.FreeFunc = func() nvml.Return { return nvml.SUCCESS }
	return set, nvml.SUCCESS
}

// returnType is nvml.Return, the status every NVML call ends with.
var returnType = reflect.TypeOf(nvml.SUCCESS)

// fillUnsupported gives every unset XxxFunc field of a go-nvml mock an
// implementation that answers ERROR_NOT_SUPPORTED with zero values.
func fillUnsupported(mockStruct reflect.Value) {
	t := mockStruct.Type()
	for i := 0; i < t.NumField(); i++ {
		f := mockStruct.Field(i)
		if t.Field(i).Type.Kind() != reflect.Func || !strings.HasSuffix(t.Field(i).Name, "Func") || !f.IsNil() || !f.CanSet() {
			continue
		}
		f.Set(notSupported(f.Type()))
	}
}

func notSupported(fn reflect.Type) reflect.Value {
	return reflect.MakeFunc(fn, func([]reflect.Value) []reflect.Value {
		out := make([]reflect.Value, fn.NumOut())
		for i := range out {
			out[i] = reflect.Zero(fn.Out(i))
			if fn.Out(i) == returnType {
				out[i] = reflect.ValueOf(nvml.ERROR_NOT_SUPPORTED)
			}
		}
		return out
	})
}

// fullComputeInstance creates the compute instance that spans a GPU
// instance of `slices` slices, as `nvidia-smi mig -cgi ... -C` does.
func fullComputeInstance(gi nvml.GpuInstance, slices uint32) (nvml.ComputeInstance, error) {
	sgi, ok := gi.(*server.GpuInstance)
	if !ok {
		return nil, fmt.Errorf("unexpected GPU instance type %T", gi)
	}
	for id := 0; id < nvml.COMPUTE_INSTANCE_PROFILE_COUNT; id++ {
		info, ret := gi.GetComputeInstanceProfileInfo(id, nvml.COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
		if ret != nvml.SUCCESS || info.SliceCount != slices {
			continue
		}
		ci, ret := gi.CreateComputeInstance(&info)
		if ret != nvml.SUCCESS {
			return nil, fmt.Errorf("create compute instance: %w", ret)
		}
		sgi.GetComputeInstanceByIdFunc = func(id int) (nvml.ComputeInstance, nvml.Return) {
			if info, _ := ci.GetInfo(); int(info.Id) == id {
				return ci, nvml.SUCCESS
			}
			return nil, nvml.ERROR_NOT_FOUND
		}
		return ci, nil
	}
	return nil, fmt.Errorf("no compute instance profile of %d slices", slices)
}
