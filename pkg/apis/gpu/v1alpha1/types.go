package v1alpha1

import (
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// GPUNode is the live state of the GPUs of the node it is named after. It has
// no spec: the node agent on that node owns it and writes only its status.
//
// +kubebuilder:object:root=true
// +kubebuilder:resource:scope=Cluster,shortName=gpun
// +kubebuilder:subresource:status
// +kubebuilder:printcolumn:name="GPUs",type=integer,JSONPath=`.status.gpuCount`
// +kubebuilder:printcolumn:name="Healthy",type=integer,JSONPath=`.status.healthyCount`
// +kubebuilder:printcolumn:name="Driver",type=string,JSONPath=`.status.driverVersion`
// +kubebuilder:printcolumn:name="Sampled",type=date,JSONPath=`.status.sampleTime`
type GPUNode struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// +optional
	Status GPUNodeStatus `json:"status,omitempty"`
}

// GPUNodeStatus is one reading of every GPU on the node.
type GPUNodeStatus struct {
	// SampleTime is when the values below were measured.
	// +optional
	SampleTime metav1.Time `json:"sampleTime,omitempty"`
	// DriverVersion is the NVIDIA kernel driver version, e.g. "550.54.15".
	// +optional
	DriverVersion string `json:"driverVersion,omitempty"`
	// CUDADriverVersion is the newest CUDA version the driver supports, e.g. "12.4".
	// +optional
	CUDADriverVersion string `json:"cudaDriverVersion,omitempty"`
	// GPUCount is the number of GPUs listed.
	GPUCount int32 `json:"gpuCount"`
	// HealthyCount is the number of GPUs whose health is Healthy.
	HealthyCount int32 `json:"healthyCount"`
	// GPUs are ordered by NVML index.
	// +optional
	// +listType=map
	// +listMapKey=uuid
	GPUs []GPUStatus `json:"gpus,omitempty"`
	// Conditions: Stale (True while the agent has no live reading: NVML is
	// gone, not answering, or released for a driver upgrade; the values
	// above are then the last good reading, taken at sampleTime).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
}

// GPUNodeConditionStale is True while the GPUs' values are not live.
const GPUNodeConditionStale = "Stale"

// Health is the coarse health of a GPU.
// +kubebuilder:validation:Enum=Healthy;Unhealthy;Unknown
type Health string

const (
	Healthy   Health = "Healthy"
	Unhealthy Health = "Unhealthy"
	// HealthUnknown means the agent could not read any health signal.
	HealthUnknown Health = "Unknown"
)

// GPUStatus is the state of one GPU.
type GPUStatus struct {
	// UUID is the GPU's NVML UUID ("GPU-...").
	UUID string `json:"uuid"`
	// Index is the NVML index.
	Index int32 `json:"index"`
	// Device is the GPU's device name in the node's gpu.gantry.dev ResourceSlice.
	// +optional
	Device string `json:"device,omitempty"`
	// ProductName is NVML's name, e.g. "NVIDIA H100 80GB HBM3".
	// +optional
	ProductName string `json:"productName,omitempty"`

	// MemoryTotal is the framebuffer size as NVML reports it. Memory fields
	// are absent when the driver cannot report memory.
	// +optional
	MemoryTotal *resource.Quantity `json:"memoryTotal,omitempty"`
	// MemoryUsed is memory in use by processes (and, with drivers that cannot
	// tell them apart, by the driver's reservation).
	// +optional
	MemoryUsed *resource.Quantity `json:"memoryUsed,omitempty"`
	// MemoryFree is memory a new process can allocate now.
	// +optional
	MemoryFree *resource.Quantity `json:"memoryFree,omitempty"`
	// MemoryReserved is memory the driver keeps for itself, when known.
	// +optional
	MemoryReserved *resource.Quantity `json:"memoryReserved,omitempty"`
	// UtilizationPercent is the share of the last sample period in which a kernel ran.
	// +optional
	UtilizationPercent *int32 `json:"utilizationPercent,omitempty"`

	// Processes hold GPU memory now.
	// +optional
	// +listType=atomic
	Processes []GPUProcess `json:"processes,omitempty"`

	// MIG lists the MIG devices when MIG mode is on.
	// +optional
	// +listType=atomic
	MIG []MIGDeviceStatus `json:"mig,omitempty"`

	// Health is Healthy, Unhealthy or Unknown.
	Health Health `json:"health"`
	// HealthReasons explain an unhealthy GPU, e.g. "xid 79: GPU has fallen off the bus".
	// +optional
	// +listType=atomic
	HealthReasons []string `json:"healthReasons,omitempty"`
}

// GPUProcess is one process holding memory on a GPU.
type GPUProcess struct {
	// PID is the process id in the host's PID namespace.
	PID int64 `json:"pid"`
	// MemoryUsed is the memory the process holds.
	MemoryUsed resource.Quantity `json:"memoryUsed"`
	// MIGDevice is the UUID of the MIG device the process runs on, if any.
	// +optional
	MIGDevice string `json:"migDevice,omitempty"`
}

// MIGDeviceStatus is one MIG device of a GPU.
type MIGDeviceStatus struct {
	UUID string `json:"uuid"`
	// Profile is the instance shape, e.g. "1g.10gb".
	// +optional
	Profile string `json:"profile,omitempty"`
	// +optional
	MemoryTotal *resource.Quantity `json:"memoryTotal,omitempty"`
	// +optional
	MemoryUsed *resource.Quantity `json:"memoryUsed,omitempty"`
}

// GPUNodeList is a list of GPUNodes.
//
// +kubebuilder:object:root=true
type GPUNodeList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []GPUNode `json:"items"`
}
