package gpu

import "time"

// Inventory is one consistent reading of every GPU on a machine.
type Inventory struct {
	// DriverVersion is the kernel driver version, e.g. "550.54.15"; empty if unknown.
	DriverVersion string
	// CUDADriverVersion is the newest CUDA version the driver supports,
	// e.g. "12.4"; empty if unknown.
	CUDADriverVersion string
	// Devices are ordered by NVML index.
	Devices []Device
	// SampledAt is when the reading was taken.
	SampledAt time.Time
}

// Device is one physical GPU. Optional numbers are pointers: nil means the
// driver or the GPU could not tell.
type Device struct {
	Index int
	// Minor is the N in /dev/nvidiaN; -1 if unknown.
	Minor       int
	UUID        string
	ProductName string
	// Architecture is as NVIDIA writes it (go-nvlib): "Ampere", "Hopper",
	// "Ada Lovelace"; "Unknown" if NVML cannot say.
	Architecture string
	// Brand is NVML's brand as go-nvlib writes it: "Nvidia", "Tesla", ...
	Brand string
	// CUDAComputeCapability is "major.minor", e.g. "9.0"; empty if unknown.
	CUDAComputeCapability string
	// PCIBusID is in the canonical Linux form "dddd:bb:dd.f" (lower case), as
	// the resource.kubernetes.io/pciBusID attribute requires.
	PCIBusID string
	// NVMLPCIBusID is the bus id exactly as NVML spells it
	// ("00000000:07:00.0"), which is what the DCGM exporter puts in labels.
	NVMLPCIBusID string
	// PCIeRoot is the PCIe root complex ("pci0000:00"), from sysfs; empty
	// if unknown (the agent fills it, NVML cannot tell).
	PCIeRoot string
	NUMANode *int

	Memory Memory
	MIG    MIG

	// NVLinkCount is the number of active NVLinks.
	NVLinkCount int
	// NVLinkPeers are the UUIDs of the GPUs this one reaches over NVLink,
	// directly or through NVSwitches.
	NVLinkPeers []string

	// UtilizationPercent is the share of the last sample period in which a
	// kernel ran; MemoryUtilizationPercent the share in which memory was read
	// or written.
	UtilizationPercent       *uint32
	MemoryUtilizationPercent *uint32
	TemperatureCelsius       *uint32
	PowerWatts               *float64
	// EnergyMillijoules is the energy used since the driver was loaded.
	EnergyMillijoules *uint64
	SMClockMHz        *uint32
	MemoryClockMHz    *uint32

	// Row remapping (Ampere and newer): rows remapped for correctable and
	// uncorrectable errors, and whether remapping failed.
	RemappedRowsCorrectable, RemappedRowsUncorrectable *uint64
	RowRemapFailed                                     *bool
	// PCIeReplays is the PCIe replay (retry) counter.
	PCIeReplays *uint64
	// PCIeTxBytesPerSecond and PCIeRxBytesPerSecond are the PCIe throughput
	// NVML measured over its last 20 ms window (it reports KB/s).
	PCIeTxBytesPerSecond, PCIeRxBytesPerSecond *uint64
	// EncoderUtilizationPercent and DecoderUtilizationPercent are the video
	// engines' utilization.
	EncoderUtilizationPercent, DecoderUtilizationPercent *uint32

	// Processes are the compute processes running on the GPU (or on its MIG devices).
	Processes []Process

	Health Health
}

// Memory is GPU framebuffer memory in bytes. When only the v1 NVML memory call
// is available, ReservedBytes is unknown (nil) and UsedBytes includes the
// driver's reservation, as NVML v1 reports it.
type Memory struct {
	Known         bool
	TotalBytes    uint64
	ReservedBytes *uint64
	UsedBytes     uint64
	FreeBytes     uint64
}

// MIG is the Multi-Instance GPU state of a GPU.
type MIG struct {
	// Capable reports whether the GPU supports MIG at all.
	Capable bool
	// Enabled is the current (not pending) MIG mode.
	Enabled bool
	Devices []MIGDevice
}

// MIGDevice is one MIG instance (a GPU instance with one compute instance).
type MIGDevice struct {
	UUID string
	// Index is the MIG device's handle index on its parent
	// (nvmlDeviceGetMigDeviceHandleByIndex), NVIDIA's DRA driver's "index".
	Index int
	// Profile is NVIDIA's name for the instance shape, e.g. "1g.5gb".
	Profile             string
	GPUInstanceID       int
	ComputeInstanceID   int
	SliceCount          uint32
	MultiprocessorCount uint32
	// Engine counts of the instance.
	CopyEngines, Decoders, Encoders, JPEGEngines, OFAEngines uint32
	Memory                                                   Memory
}

// Process is one process holding GPU memory.
type Process struct {
	PID       uint32
	UsedBytes uint64
	// MIGDeviceUUID is set when the process runs on a MIG device.
	MIGDeviceUUID string
}

// HealthState is the coarse health of a GPU.
type HealthState string

const (
	Healthy   HealthState = "Healthy"
	Unhealthy HealthState = "Unhealthy"
	// HealthUnknown means no health signal could be read at all.
	HealthUnknown HealthState = "Unknown"
)

// Health is a GPU's health and the reasons it is not healthy.
type Health struct {
	State HealthState
	// Reasons are short, stable, human-readable causes, e.g. "xid 79: GPU has fallen off the bus".
	Reasons []string
	// LastXID is the last critical XID seen on this GPU, 0 if none.
	LastXID uint64
	// LastAnyXID is the last XID of any kind (what DCGM's XID_ERRORS
	// reports), application XIDs included; 0 if none.
	LastAnyXID uint64
}
