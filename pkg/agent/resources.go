package agent

import (
	"fmt"
	"strconv"
	"strings"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/utils/ptr"

	"github.com/gantry-dev/gantry/gpu"
)

const (
	// DriverName is the DRA driver and DeviceClass name.
	DriverName = "gpu.gantry.dev"
	// MemoryCapacity is the consumable capacity a claim requests a share of.
	MemoryCapacity resourceapi.QualifiedName = "memory"
	// UnhealthyTaintKey taints the devices of unhealthy GPUs.
	UnhealthyTaintKey = DriverName + "/unhealthy"
	// MIGEnabledTaintKey taints GPUs in MIG mode, whose MIG devices are not
	// published yet: the whole GPU cannot be handed to a pod.
	MIGEnabledTaintKey = DriverName + "/mig-enabled"
)

// MinMemoryShare is the smallest memory share a claim can take. Smaller
// requests are rounded up to it: below that no CUDA context fits.
var MinMemoryShare = resource.MustParse("256Mi")

// DeviceName is the name of a GPU's device in the node's ResourceSlice.
// It is derived from the NVML index, which is stable while the driver is loaded.
func DeviceName(index int) string { return fmt.Sprintf("gpu-%d", index) }

// BuildResources describes the GPUs of inv as one pool named after the node,
// one device per GPU. A GPU is published only if it has a UUID and a known
// memory size, because a claim for it could not be prepared otherwise.
func BuildResources(nodeName string, inv *gpu.Inventory) resourceslice.DriverResources {
	var devices []resourceapi.Device
	for _, d := range inv.Devices {
		if d.UUID == "" || !d.Memory.Known {
			continue
		}
		devices = append(devices, buildDevice(inv, d))
	}
	return resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{
			nodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
		},
	}
}

func buildDevice(inv *gpu.Inventory, d gpu.Device) resourceapi.Device {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"uuid":         {StringValue: ptr.To(d.UUID)},
		"index":        {IntValue: ptr.To(int64(d.Index))},
		"architecture": {StringValue: ptr.To(d.Architecture)},
	}
	if d.ProductName != "" {
		attrs["productName"] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.ProductName)}
	}
	// Versions are semver so that CEL can compare them
	// (device.attributes["gpu.gantry.dev"].cudaComputeCapability.isGreaterThan(semver("8.0.0"))).
	if v := semver(d.CUDAComputeCapability); v != "" {
		attrs["cudaComputeCapability"] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	if v := semver(inv.DriverVersion); v != "" {
		attrs["driverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	if v := semver(inv.CUDADriverVersion); v != "" {
		attrs["cudaDriverVersion"] = resourceapi.DeviceAttribute{VersionValue: ptr.To(v)}
	}
	if d.PCIBusID != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIBusID] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.PCIBusID)}
	}
	if d.MIG.Capable {
		attrs["migEnabled"] = resourceapi.DeviceAttribute{BoolValue: ptr.To(d.MIG.Enabled)}
	}

	total := resource.NewQuantity(int64(d.Memory.TotalBytes), resource.BinarySI)
	dev := resourceapi.Device{
		Name:       DeviceName(d.Index),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			MemoryCapacity: {
				Value: *total,
				RequestPolicy: &resourceapi.CapacityRequestPolicy{
					// A claim that asks for no memory gets the whole GPU, so
					// "count: 1" keeps meaning an exclusive GPU.
					Default:    total,
					ValidRange: &resourceapi.CapacityRequestPolicyRange{Min: ptr.To(MinMemoryShare)},
				},
			},
		},
		AllowMultipleAllocations: ptr.To(true),
	}
	if d.Health.State == gpu.Unhealthy {
		dev.Taints = append(dev.Taints, resourceapi.DeviceTaint{
			Key: UnhealthyTaintKey, Value: unhealthyTaintValue(d.Health), Effect: resourceapi.DeviceTaintEffectNoSchedule,
		})
	}
	if d.MIG.Enabled {
		dev.Taints = append(dev.Taints, resourceapi.DeviceTaint{Key: MIGEnabledTaintKey, Effect: resourceapi.DeviceTaintEffectNoSchedule})
	}
	return dev
}

// unhealthyTaintValue is a short label-safe cause; GPUNode status has the full reasons.
func unhealthyTaintValue(h gpu.Health) string {
	if h.LastXID != 0 {
		return fmt.Sprintf("xid-%d", h.LastXID)
	}
	all := strings.Join(h.Reasons, " ")
	switch {
	case strings.Contains(all, "lost"):
		return "gpu-lost"
	case strings.Contains(all, "remapping"), strings.Contains(all, "ECC"), strings.Contains(all, "retired"):
		return "memory-errors"
	}
	return "unhealthy"
}

// semver turns "9.0", "12.4" or "535.104.05" into strict semver ("9.0.0",
// "12.4.0", "535.104.5"); "" if the input is not 1 to 3 dotted numbers.
func semver(v string) string {
	if v == "" {
		return ""
	}
	parts := strings.Split(v, ".")
	if len(parts) > 3 {
		return ""
	}
	for len(parts) < 3 {
		parts = append(parts, "0")
	}
	for i, p := range parts {
		n, err := strconv.ParseUint(p, 10, 64)
		if err != nil {
			return ""
		}
		parts[i] = strconv.FormatUint(n, 10)
	}
	return strings.Join(parts, ".")
}
