package cache

import (
	resourceapi "k8s.io/api/resource/v1"

	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/names"
)

// UpsertSlice records a ResourceSlice: every driver's for the structured allocator,
// and gpu.gantry.dev's as its node's GPU inventory.
func (c *Cache) UpsertSlice(sl *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alloc.UpsertSlice(sl)
	if sl.Spec.Driver == names.DriverName && sl.Spec.NodeName != nil {
		node := *sl.Spec.NodeName
		if c.slices[node] == nil {
			c.slices[node] = map[string]*resourceapi.ResourceSlice{}
		}
		c.slices[node][sl.Name] = sl
		c.setInventory(node, gpusFromSlices(c.slices[node]))
	}
	c.freed()
}

// DeleteSlice forgets a ResourceSlice.
func (c *Cache) DeleteSlice(sl *resourceapi.ResourceSlice) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.alloc.DeleteSlice(sl.Name)
	if sl.Spec.Driver == names.DriverName && sl.Spec.NodeName != nil {
		node := *sl.Spec.NodeName
		delete(c.slices[node], sl.Name)
		var gpus []model.GPU
		if len(c.slices[node]) > 0 {
			gpus = gpusFromSlices(c.slices[node])
		} else {
			delete(c.slices, node)
		}
		c.setInventory(node, gpus)
	}
	c.freed()
}

// gpusFromSlices reads the node agent's devices: index, uuid, productName and the
// memory capacity; a device with a NoSchedule or NoExecute taint is unhealthy. A
// MIG device (type "mig", whose index is its parent GPU's) is a Partition whose
// index encodes its device name (dra.MIGIndex).
func gpusFromSlices(slices map[string]*resourceapi.ResourceSlice) []model.GPU {
	var gpus []model.GPU
	for _, sl := range slices {
		for _, d := range sl.Spec.Devices {
			g := model.GPU{Index: -1, LiveFreeBytes: model.UnknownBytes, Healthy: true}
			if a, ok := d.Attributes["index"]; ok && a.IntValue != nil {
				g.Index = int(*a.IntValue)
			}
			if a, ok := d.Attributes["type"]; ok && a.StringValue != nil && *a.StringValue == "mig" {
				g.Index, g.Partition = -1, true
				if i, err := dra.DeviceIndex(d.Name); err == nil {
					g.Index = i
				}
			}
			if a, ok := d.Attributes["uuid"]; ok && a.StringValue != nil {
				g.UUID = *a.StringValue
			}
			if a, ok := d.Attributes["productName"]; ok && a.StringValue != nil {
				g.Model = model.CanonicalGPUModel(*a.StringValue)
			}
			if cpt, ok := d.Capacity["memory"]; ok {
				g.MemoryBytes = cpt.Value.Value()
			}
			for _, t := range d.Taints {
				if t.Effect == resourceapi.DeviceTaintEffectNoSchedule || t.Effect == resourceapi.DeviceTaintEffectNoExecute {
					g.Healthy = false
				}
			}
			if g.Index >= 0 {
				gpus = append(gpus, g)
			}
		}
	}
	sortGPUs(gpus)
	return gpus
}

func sortGPUs(gpus []model.GPU) {
	for i := 1; i < len(gpus); i++ {
		for j := i; j > 0 && gpus[j].Index < gpus[j-1].Index; j-- {
			gpus[j], gpus[j-1] = gpus[j-1], gpus[j]
		}
	}
}
