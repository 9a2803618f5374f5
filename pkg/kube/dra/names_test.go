package dra

import "testing"

// MIG device names map to model indexes and back; GPU names keep their NVML
// index; anything else, or a MIG name out of range, is not a device.
func TestDeviceNamesRoundTrip(t *testing.T) {
	for _, name := range []string{"gpu-0", "gpu-7", "gpu-0-mig-1-0", "gpu-5-mig-13-7", "gpu-255-mig-63-63"} {
		i, err := DeviceIndex(name)
		if err != nil {
			t.Errorf("DeviceIndex(%q): %v", name, err)
			continue
		}
		if back := DeviceName(i); back != name {
			t.Errorf("DeviceName(DeviceIndex(%q)) = %q", name, back)
		}
	}
	if i, _ := DeviceIndex("gpu-3"); i != 3 {
		t.Errorf("gpu-3 has index %d", i)
	}
	if i, _ := DeviceIndex("gpu-3-mig-1-0"); i < migIndexBase {
		t.Errorf("a MIG device has index %d, which a GPU could have", i)
	}
	for _, bad := range []string{"gpu-256-mig-1-0", "gpu-1-mig-64-0", "gpu-1-mig-1", "gpu-1-mig-01-0", "gpu-1-mig--1-0", "gpu-1048576", "mig-1-0"} {
		if i, err := DeviceIndex(bad); err == nil {
			t.Errorf("DeviceIndex(%q) = %d, want an error", bad, i)
		}
	}
}
