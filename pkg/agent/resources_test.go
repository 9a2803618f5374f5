package agent

import (
	"sort"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/gantry-dev/gantry/pkg/names"
)

func TestBuildResourcesOneDevicePerGPU(t *testing.T) {
	_, inv := discover(t, "dgxh100")
	res := BuildResources(testNode, inv, Staleness{})
	pool, ok := res.Pools[testNode]
	if !ok || len(res.Pools) != 1 || len(pool.Slices) != 1 {
		t.Fatalf("want one pool named after the node with one slice, got %+v", res)
	}
	devs := pool.Slices[0].Devices
	if len(devs) != 8 {
		t.Fatalf("%d devices, want 8", len(devs))
	}
	d := devs[3]
	g := inv.Devices[3]
	if d.Name != "gpu-3" {
		t.Errorf("name %q", d.Name)
	}
	str := func(k resourceapi.QualifiedName) string {
		if v := d.Attributes[k].StringValue; v != nil {
			return *v
		}
		return "<missing>"
	}
	ver := func(k resourceapi.QualifiedName) string {
		if v := d.Attributes[k].VersionValue; v != nil {
			return *v
		}
		return "<missing>"
	}
	checks := map[string][2]string{
		"uuid":                  {str("uuid"), g.UUID},
		"productName":           {str("productName"), "NVIDIA H100 80GB HBM3"},
		"type":                  {str("type"), "gpu"},
		"brand":                 {str("brand"), "Nvidia"},
		"architecture":          {str("architecture"), "Hopper"},
		"pcieBusID":             {str("pcieBusID"), "0000:61:00.0"},
		"cudaComputeCapability": {ver("cudaComputeCapability"), "9.0.0"},
		"driverVersion":         {ver("driverVersion"), "550.54.15"},
		"cudaDriverVersion":     {ver("cudaDriverVersion"), "12.4.0"},
		"pciBusID":              {str(deviceattribute.StandardDeviceAttributePCIBusID), "0000:61:00.0"},
	}
	for name, c := range checks {
		if c[0] != c[1] {
			t.Errorf("attribute %s = %q, want %q", name, c[0], c[1])
		}
	}
	if v := d.Attributes["index"].IntValue; v == nil || *v != 3 {
		t.Errorf("index attribute %v", v)
	}
	if d.AllowMultipleAllocations == nil || !*d.AllowMultipleAllocations {
		t.Error("allowMultipleAllocations must be true so claims can take memory shares")
	}
	mem := d.Capacity[MemoryCapacity]
	if want := int64(80<<30) - int64(*g.Memory.ReservedBytes); mem.Value.Value() != want || *g.Memory.ReservedBytes == 0 {
		t.Errorf("memory capacity %s, want 80Gi less the driver's reservation (%d)", mem.Value.String(), want)
	}
	p := mem.RequestPolicy
	if p == nil || p.Default == nil || p.Default.Cmp(mem.Value) != 0 || p.ValidRange == nil || p.ValidRange.Min.Cmp(resource.MustParse("256Mi")) != 0 {
		t.Errorf("request policy %+v: want default = whole GPU, min 256Mi", p)
	}
	if len(d.Taints) != 0 {
		t.Errorf("healthy GPU has taints %v", d.Taints)
	}
}

func TestUnhealthyGPUsAreTainted(t *testing.T) {
	f, _ := discover(t, "dgxa100")
	f.GPUs[2].SetRemappedRows(false, true)
	devs := BuildResources(testNode, mustRediscover(t, f), Staleness{}).Pools[testNode].Slices[0].Devices
	taints := map[string][]resourceapi.DeviceTaint{}
	for _, d := range devs {
		taints[d.Name] = d.Taints
	}
	if got := taints["gpu-2"]; len(got) != 1 || got[0].Key != names.TaintUnhealthy || got[0].Value != "memory-errors" || got[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("gpu-2 taints %+v, want %s=memory-errors:NoSchedule", got, names.TaintUnhealthy)
	}
	for _, n := range []string{"gpu-0", "gpu-1", "gpu-3"} {
		if len(taints[n]) != 0 {
			t.Errorf("%s tainted: %v", n, taints[n])
		}
	}
}

// An A100 in MIG mode: its MIG devices are published with NVIDIA's
// attributes and their profile's memory and engines; the parent is not
// published whole (nor tainted away).
func TestMIGDevicesArePublished(t *testing.T) {
	f, _ := discover(t, "dgxa100")
	if err := f.GPUs[5].EnableMIG(nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_2_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	inv := mustRediscover(t, f)
	byName := map[string]resourceapi.Device{}
	for _, d := range BuildResources(testNode, inv, Staleness{}).Pools[testNode].Slices[0].Devices {
		byName[d.Name] = d
	}
	if _, ok := byName["gpu-5"]; ok {
		t.Error("the MIG-mode parent is published as a whole GPU")
	}
	if len(byName) != 7+3 {
		t.Fatalf("%d devices, want 7 GPUs + 3 MIG devices: %v", len(byName), keys(byName))
	}
	parent := inv.Devices[5]
	for _, m := range parent.MIG.Devices {
		d, ok := byName[MIGDeviceName(5, m)]
		if !ok {
			t.Fatalf("MIG device %s not published: %v", MIGDeviceName(5, m), keys(byName))
		}
		a := d.Attributes
		if *a["type"].StringValue != "mig" || *a["uuid"].StringValue != m.UUID || *a["parentUUID"].StringValue != parent.UUID ||
			*a["profile"].StringValue != m.Profile || *a["architecture"].StringValue != "Ampere" || *a["productName"].StringValue != parent.ProductName {
			t.Errorf("%s attributes %v", d.Name, a)
		}
		// NVIDIA's driver: index is the MIG device's, parentIndex the GPU's, no minor.
		if *a["index"].IntValue != int64(m.Index) || *a["parentIndex"].IntValue != 5 {
			t.Errorf("%s index %d parentIndex %d, want %d and 5", d.Name, *a["index"].IntValue, *a["parentIndex"].IntValue, m.Index)
		}
		if _, ok := a["minor"]; ok {
			t.Errorf("%s has a minor; NVIDIA's driver publishes none for MIG devices", d.Name)
		}
		if mem := d.Capacity[MemoryCapacity].Value; mem.Value() != int64(m.Memory.TotalBytes) || m.Memory.TotalBytes == 0 {
			t.Errorf("%s memory %s, want %d", d.Name, mem.String(), m.Memory.TotalBytes)
		}
		if sm := d.Capacity["multiprocessors"].Value; sm.Value() != int64(m.MultiprocessorCount) || m.MultiprocessorCount == 0 {
			t.Errorf("%s multiprocessors %s", d.Name, sm.String())
		}
		if _, ok := d.Capacity["copyEngines"]; !ok {
			t.Errorf("%s has no copyEngines capacity", d.Name)
		}
		if d.AllowMultipleAllocations != nil && *d.AllowMultipleAllocations {
			t.Errorf("%s is shareable; MIG devices are handed out whole", d.Name)
		}
		if len(d.Taints) != 0 {
			t.Errorf("%s tainted %v", d.Name, d.Taints)
		}
	}
	profiles := map[string]bool{}
	for _, m := range parent.MIG.Devices {
		profiles[m.Profile] = true
	}
	for _, p := range []string{"3g.20gb", "2g.10gb", "1g.5gb"} {
		if !profiles[p] {
			t.Errorf("profile %s missing: %v", p, profiles)
		}
	}
}

func TestStaleReadingsTaintEveryDevice(t *testing.T) {
	_, inv := discover(t, "2xA10G")
	devs := BuildResources(testNode, inv, Staleness{Stale: true, Reason: StaleNVMLNotAnswering}).Pools[testNode].Slices[0].Devices
	if len(devs) != 2 {
		t.Fatalf("%d devices", len(devs))
	}
	for _, d := range devs {
		if len(d.Taints) != 1 || d.Taints[0].Key != names.TaintStale || d.Taints[0].Value != StaleNVMLNotAnswering || d.Taints[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
			t.Errorf("%s taints %v", d.Name, d.Taints)
		}
	}
	if devs := BuildResources(testNode, nil, Staleness{Stale: true}).Pools[testNode].Slices[0].Devices; len(devs) != 0 {
		t.Errorf("no reading yet, but %d devices published", len(devs))
	}
}

func keys(m map[string]resourceapi.Device) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func TestGPUsWithoutIdentityAreNotPublished(t *testing.T) {
	f, _ := discover(t, "2xA10G")
	if err := f.GPUs[1].Unsupported("GetMemoryInfo", "GetMemoryInfo_v2"); err != nil {
		t.Fatal(err)
	}
	devs := BuildResources(testNode, mustRediscover(t, f), Staleness{}).Pools[testNode].Slices[0].Devices
	if len(devs) != 1 || devs[0].Name != "gpu-0" {
		t.Errorf("published %d devices; a GPU of unknown memory cannot be shared and must be left out", len(devs))
	}
}

func TestSemver(t *testing.T) {
	for in, want := range map[string]string{"9.0": "9.0.0", "12.4": "12.4.0", "550.54.15": "550.54.15", "535.104.05": "535.104.5", "": "", "1.2.3.4": "", "abc": ""} {
		if got := semver(in); got != want {
			t.Errorf("semver(%q) = %q, want %q", in, got, want)
		}
	}
}
