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
	"github.com/gantry-dev/gantry/pkg/names"
)

// MemoryCapacity is the consumable capacity a claim requests a share of. The driver
// name (names.DriverName) and the device taints (names.TaintUnhealthy on unhealthy
// GPUs; names.TaintStale on every device while the agent has no live reading: NVML
// gone, hung, or released for a driver upgrade, the value being the reason) are in
// pkg/names.
const MemoryCapacity resourceapi.QualifiedName = names.MemoryCapacity

// Device types, as NVIDIA's DRA driver names them in its "type" attribute.
const (
	DeviceTypeGPU = "gpu"
	DeviceTypeMIG = "mig"
)

// MinMemoryShare is the smallest memory share a claim can take. Smaller
// requests are rounded up to it: below that no CUDA context fits.
var MinMemoryShare = resource.MustParse("256Mi")

// DeviceName is the name of a GPU's device in the node's ResourceSlice.
// It is derived from the NVML index, which is stable while the driver is loaded.
func DeviceName(index int) string { return fmt.Sprintf("gpu-%d", index) }

// MIGDeviceName names a MIG device by its parent and its GPU and compute
// instance ids, which stay the same while the MIG layout does.
func MIGDeviceName(parentIndex int, m gpu.MIGDevice) string {
	return fmt.Sprintf("gpu-%d-mig-%d-%d", parentIndex, m.GPUInstanceID, m.ComputeInstanceID)
}

// ShareableBytes is the memory claims can share on a GPU: its total less
// what the driver reserves for itself, when NVML says how much that is.
func ShareableBytes(m gpu.Memory) int64 {
	total := int64(m.TotalBytes)
	if m.ReservedBytes != nil && int64(*m.ReservedBytes) < total {
		total -= int64(*m.ReservedBytes)
	}
	return total
}

// BuildResources describes the GPUs of inv as one pool named after the
// node: one device per GPU, or per MIG device for a GPU in MIG mode. A GPU
// is published only if it has a UUID and a known memory size, because a
// claim for it could not be prepared otherwise. Without a reading (inv nil)
// the pool is empty; with a stale one every device carries names.TaintStale.
func BuildResources(nodeName string, inv *gpu.Inventory, stale Staleness) resourceslice.DriverResources {
	var devices []resourceapi.Device
	if inv != nil {
		for _, d := range inv.Devices {
			if d.UUID == "" || !d.Memory.Known {
				continue
			}
			if d.MIG.Enabled {
				for _, m := range d.MIG.Devices {
					if m.UUID != "" && m.Memory.Known {
						devices = append(devices, buildMIGDevice(inv, d, m))
					}
				}
				continue
			}
			devices = append(devices, buildDevice(inv, d))
		}
	}
	if stale.Stale {
		for i := range devices {
			devices[i].Taints = append(devices[i].Taints, resourceapi.DeviceTaint{
				Key: names.TaintStale, Value: stale.Reason, Effect: resourceapi.DeviceTaintEffectNoSchedule,
			})
		}
	}
	return resourceslice.DriverResources{
		Pools: map[string]resourceslice.Pool{
			nodeName: {Slices: []resourceslice.Slice{{Devices: devices}}},
		},
	}
}

// commonAttributes are those NVIDIA's DRA driver publishes for GPUs and
// MIG devices alike, with its names and value types, so that a selector
// written for gpu.nvidia.com works here after changing the domain.
func commonAttributes(inv *gpu.Inventory, d gpu.Device, typ, uuid string) map[resourceapi.QualifiedName]resourceapi.DeviceAttribute {
	attrs := map[resourceapi.QualifiedName]resourceapi.DeviceAttribute{
		"type":         {StringValue: ptr.To(typ)},
		"uuid":         {StringValue: ptr.To(uuid)},
		"architecture": {StringValue: ptr.To(d.Architecture)},
	}
	if d.ProductName != "" {
		attrs["productName"] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.ProductName)}
	}
	if d.Brand != "" {
		attrs["brand"] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.Brand)}
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
		attrs["pcieBusID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.PCIBusID)}
		attrs[deviceattribute.StandardDeviceAttributePCIBusID] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.PCIBusID)}
	}
	if d.PCIeRoot != "" {
		attrs[deviceattribute.StandardDeviceAttributePCIeRoot] = resourceapi.DeviceAttribute{StringValue: ptr.To(d.PCIeRoot)}
	}
	return attrs
}

func buildDevice(inv *gpu.Inventory, d gpu.Device) resourceapi.Device {
	attrs := commonAttributes(inv, d, DeviceTypeGPU, d.UUID)
	attrs["index"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.Index))}
	if d.Minor >= 0 {
		attrs["minor"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(d.Minor))}
	}
	if d.MIG.Capable {
		attrs["migEnabled"] = resourceapi.DeviceAttribute{BoolValue: ptr.To(d.MIG.Enabled)}
	}
	total := resource.NewQuantity(ShareableBytes(d.Memory), resource.BinarySI)
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
			Key: names.TaintUnhealthy, Value: unhealthyTaintValue(d.Health), Effect: resourceapi.DeviceTaintEffectNoSchedule,
		})
	}
	return dev
}

// buildMIGDevice publishes a MIG device whole: its memory and engines are
// the instance's, and it is not shared between claims.
func buildMIGDevice(inv *gpu.Inventory, parent gpu.Device, m gpu.MIGDevice) resourceapi.Device {
	attrs := commonAttributes(inv, parent, DeviceTypeMIG, m.UUID)
	// As NVIDIA's driver: index is the MIG device's own, parentIndex the GPU's.
	attrs["index"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(m.Index))}
	attrs["parentIndex"] = resourceapi.DeviceAttribute{IntValue: ptr.To(int64(parent.Index))}
	attrs["parentUUID"] = resourceapi.DeviceAttribute{StringValue: ptr.To(parent.UUID)}
	attrs["profile"] = resourceapi.DeviceAttribute{StringValue: ptr.To(m.Profile)}
	qty := func(n int64) resourceapi.DeviceCapacity {
		return resourceapi.DeviceCapacity{Value: *resource.NewQuantity(n, resource.DecimalSI)}
	}
	dev := resourceapi.Device{
		Name:       MIGDeviceName(parent.Index, m),
		Attributes: attrs,
		Capacity: map[resourceapi.QualifiedName]resourceapi.DeviceCapacity{
			MemoryCapacity:    {Value: *resource.NewQuantity(int64(m.Memory.TotalBytes), resource.BinarySI)},
			"multiprocessors": qty(int64(m.MultiprocessorCount)),
			"copyEngines":     qty(int64(m.CopyEngines)),
			"decoders":        qty(int64(m.Decoders)),
			"encoders":        qty(int64(m.Encoders)),
			"jpegEngines":     qty(int64(m.JPEGEngines)),
			"ofaEngines":      qty(int64(m.OFAEngines)),
		},
	}
	if parent.Health.State == gpu.Unhealthy {
		dev.Taints = append(dev.Taints, resourceapi.DeviceTaint{
			Key: names.TaintUnhealthy, Value: unhealthyTaintValue(parent.Health), Effect: resourceapi.DeviceTaintEffectNoSchedule,
		})
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
