package agent

import (
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

func TestBuildResourcesOneDevicePerGPU(t *testing.T) {
	_, inv := discover(t, "dgxh100")
	res := BuildResources(testNode, inv)
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
		"architecture":          {str("architecture"), "hopper"},
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
	if mem.Value.Value() != 80<<30 {
		t.Errorf("memory capacity %s, want 80Gi", mem.Value.String())
	}
	p := mem.RequestPolicy
	if p == nil || p.Default == nil || p.Default.Cmp(mem.Value) != 0 || p.ValidRange == nil || p.ValidRange.Min.Cmp(resource.MustParse("256Mi")) != 0 {
		t.Errorf("request policy %+v: want default = whole GPU, min 256Mi", p)
	}
	if len(d.Taints) != 0 {
		t.Errorf("healthy GPU has taints %v", d.Taints)
	}
}

func TestUnhealthyAndMIGGPUsAreTainted(t *testing.T) {
	f, _ := discover(t, "dgxa100")
	f.GPUs[2].SetRemappedRows(false, true)
	if err := f.GPUs[5].EnableMIG(nvml.GPU_INSTANCE_PROFILE_7_SLICE); err != nil {
		t.Fatal(err)
	}
	inventory := mustRediscover(t, f)
	devs := BuildResources(testNode, inventory).Pools[testNode].Slices[0].Devices
	taints := map[string][]resourceapi.DeviceTaint{}
	for _, d := range devs {
		taints[d.Name] = d.Taints
	}
	if got := taints["gpu-2"]; len(got) != 1 || got[0].Key != UnhealthyTaintKey || got[0].Value != "memory-errors" || got[0].Effect != resourceapi.DeviceTaintEffectNoSchedule {
		t.Errorf("gpu-2 taints %+v, want %s=memory-errors:NoSchedule", got, UnhealthyTaintKey)
	}
	if got := taints["gpu-5"]; len(got) != 1 || got[0].Key != MIGEnabledTaintKey {
		t.Errorf("gpu-5 taints %+v, want %s", got, MIGEnabledTaintKey)
	}
	for _, n := range []string{"gpu-0", "gpu-1", "gpu-3"} {
		if len(taints[n]) != 0 {
			t.Errorf("%s tainted: %v", n, taints[n])
		}
	}
}

func TestGPUsWithoutIdentityAreNotPublished(t *testing.T) {
	f, _ := discover(t, "2xA10G")
	if err := f.GPUs[1].Unsupported("GetMemoryInfo", "GetMemoryInfo_v2"); err != nil {
		t.Fatal(err)
	}
	devs := BuildResources(testNode, mustRediscover(t, f)).Pools[testNode].Slices[0].Devices
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
