package agent

import (
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	oci "github.com/opencontainers/runtime-spec/specs-go"
	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// inject applies CDI devices to an empty container as a runtime does.
func inject(t *testing.T, cdiRoot string, ids ...string) *oci.Spec {
	t.Helper()
	cache, err := cdi.NewCache(cdi.WithSpecDirs(cdiRoot), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	for path, errs := range cache.GetErrors() {
		t.Errorf("CDI library rejects %s: %v", path, errs)
	}
	spec := &oci.Spec{Process: &oci.Process{}, Linux: &oci.Linux{}}
	if unresolved, err := cache.InjectDevices(spec, ids...); err != nil {
		t.Fatalf("inject %v: %v (unresolved %v)", ids, err, unresolved)
	}
	return spec
}

func deviceIDs(t *testing.T, d *Driver, uid types.UID) []string {
	t.Helper()
	var ids []string
	d.mu.Lock()
	defer d.mu.Unlock()
	for _, dev := range resultDevices(d.cp.Claims[uid].Devices) {
		ids = append(ids, dev.CDIDeviceIDs...)
	}
	return ids
}

func ociDevices(s *oci.Spec) []string {
	var out []string
	for _, d := range s.Linux.Devices {
		out = append(out, d.Path)
	}
	sort.Strings(out)
	return out
}

func ociEnv(s *oci.Spec) map[string]string {
	env := map[string]string{}
	for _, kv := range s.Process.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return env
}

// An H100 node, two shares on one GPU and a whole GPU; one container holds
// a share and the whole GPU (two claims). The toolkit's edits give it both
// GPUs' device nodes, the control nodes and the driver libraries, and
// each claim's own variables survive the other's.
func TestCDISpecsGiveTheContainerItsGPUs(t *testing.T) {
	e := newDriverEnv(t, "dgxh100")
	d := e.start(t, nil)
	shareA := allocatedClaim("uid-a", "serve-a", share{device: "gpu-2", memory: "20Gi", shareID: "s1"})
	shareB := allocatedClaim("uid-b", "serve-b", share{device: "gpu-2", memory: "30Gi", shareID: "s2"})
	whole := allocatedClaim("uid-w", "train", share{device: "gpu-5"})
	for uid, r := range prepare(t, d, shareA, shareB, whole) {
		if r.Err != nil {
			t.Fatalf("%s: %v", uid, r.Err)
		}
	}
	// Every spec file the agent wrote passes the CDI library's validation.
	files, _ := filepath.Glob(filepath.Join(e.cdiRoot, "*.json"))
	if len(files) != 4 {
		t.Fatalf("spec files %v, want common + 3 claims", files)
	}
	for _, f := range files {
		if _, err := cdi.ReadSpec(f, 0); err != nil {
			t.Errorf("%s: %v", f, err)
		}
	}
	if !e.realNodes {
		t.Skip("cannot create device nodes here (not root): specs validated, injection not tried")
	}
	inv := e.snapshot.Get()
	uuid2, uuid5 := inv.Devices[2].UUID, inv.Devices[5].UUID

	ctr := inject(t, e.cdiRoot, append(deviceIDs(t, d, shareA.UID), deviceIDs(t, d, whole.UID)...)...)
	want := []string{"/dev/nvidia-modeset", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia2", "/dev/nvidia5", "/dev/nvidiactl"}
	if got := ociDevices(ctr); strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("container devices %v, want %v", got, want)
	}
	env := ociEnv(ctr)
	if env["NVIDIA_VISIBLE_DEVICES"] != "void" {
		t.Errorf("NVIDIA_VISIBLE_DEVICES=%q: the toolkit's runtime must not add GPUs of its own", env["NVIDIA_VISIBLE_DEVICES"])
	}
	checks := map[string]string{
		EnvMemoryBytesPrefix + uuidEnvSuffix(uuid2): "21474836480",
		EnvMemoryBytesPrefix + uuidEnvSuffix(uuid5): strconv.FormatInt(ShareableBytes(inv.Devices[5].Memory), 10),
	}
	for k, v := range checks {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	var libcuda bool
	for _, m := range ctr.Mounts {
		if strings.HasSuffix(m.Source, "libcuda.so.550.54.15") && strings.HasPrefix(m.Source, e.driverRoot) {
			libcuda = true
		}
	}
	if !libcuda {
		t.Errorf("no libcuda mount from the driver root in %+v", ctr.Mounts)
	}
	if ctr.Hooks == nil || len(ctr.Hooks.CreateContainer) == 0 {
		t.Error("no createContainer hooks (symlinks, ldcache)")
	}

	// The share alone does not see the whole GPU's node.
	alone := inject(t, e.cdiRoot, deviceIDs(t, d, shareB.UID)...)
	for _, p := range ociDevices(alone) {
		if p == "/dev/nvidia5" {
			t.Error("a claim on gpu-2 got /dev/nvidia5")
		}
	}
}

// The host sees the driver at another path than the agent (GPU Operator:
// /run/nvidia/driver mounted at /driver-root): specs name host paths.
func TestCDISpecsNameHostDriverPaths(t *testing.T) {
	e := newDriverEnv(t, "1xH100")
	editor, err := NewNVCDIEditor(e.fleet, CDIOptions{DriverRoot: e.driverRoot, HostDriverRoot: "/run/nvidia/driver"})
	if err != nil {
		t.Fatal(err)
	}
	edits, err := editor.CommonEdits()
	if err != nil {
		t.Fatal(err)
	}
	var found bool
	for _, m := range edits.Mounts {
		if strings.HasPrefix(m.HostPath, e.driverRoot) {
			t.Errorf("mount %s names the agent's path", m.HostPath)
		}
		if m.HostPath == "/run/nvidia/driver/usr/lib/x86_64-linux-gnu/libcuda.so.550.54.15" {
			found = true
		}
	}
	if !found {
		t.Errorf("libcuda not mounted from the host driver root: %+v", edits.Mounts)
	}
}

func TestInvalidSpecIsRefused(t *testing.T) {
	spec := &cdispec.Spec{Kind: cdiKind, Devices: []cdispec.Device{{Name: "bad name!", ContainerEdits: cdispec.ContainerEdits{Env: []string{"A=1"}}}}}
	if err := writeSpec(filepath.Join(t.TempDir(), "x.json"), spec); err == nil {
		t.Fatal("a device name with a space and '!' was written")
	}
}

// Unprepare needs no NVML: a driver upgrade must not strand pods.
func TestUnprepareWithoutNVML(t *testing.T) {
	e := newDriverEnv(t, "1xH100")
	d := e.start(t, nil)
	c := allocatedClaim("uid-1", "a", share{device: "gpu-0", memory: "10Gi", shareID: "x"})
	if r := prepare(t, d, c)[c.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	e.editor = nil // NVML closed
	if err := unprepare(t, d, c)[c.UID]; err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(cdiSpecPath(e.cdiRoot, c.UID)); !os.IsNotExist(err) {
		t.Errorf("spec still there: %v", err)
	}
	c2 := allocatedClaim("uid-2", "b", share{device: "gpu-0", memory: "10Gi", shareID: "y"})
	if r := prepare(t, d, c2)[c2.UID]; r.Err == nil || !strings.Contains(r.Err.Error(), "NVML is not available") {
		t.Errorf("prepare without NVML: %v", r.Err)
	}
}

// recordingEditor stands in for NVIDIA's CDI library where it cannot run.
type recordingEditor struct{ asked []string }

func (r *recordingEditor) CommonEdits() (*cdispec.ContainerEdits, error) {
	return &cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/nvidiactl"}}}, nil
}

func (r *recordingEditor) DeviceEdits(uuid string) (*cdispec.ContainerEdits, error) {
	r.asked = append(r.asked, uuid)
	return &cdispec.ContainerEdits{DeviceNodes: []*cdispec.DeviceNode{{Path: "/dev/for-" + uuid}}}, nil
}

// An A100 in MIG mode: a claim on a MIG device is prepared for that MIG
// device (its UUID, all of its memory), and only once.
func TestPrepareMIGDevice(t *testing.T) {
	e := newDriverEnv(t, "dgxa100")
	if err := e.fleet.GPUs[1].EnableMIG(nvml.GPU_INSTANCE_PROFILE_3_SLICE, nvml.GPU_INSTANCE_PROFILE_1_SLICE); err != nil {
		t.Fatal(err)
	}
	e.snapshot.Set(mustRediscover(t, e.fleet))
	m := e.snapshot.Get().Devices[1].MIG.Devices[0]
	name := MIGDeviceName(1, m)

	t.Run("driver", func(t *testing.T) {
		rec := &recordingEditor{}
		e.editor = rec
		d := e.start(t, nil)
		claim := allocatedClaim("uid-m", "mig", share{device: name})
		if r := prepare(t, d, claim)[claim.UID]; r.Err != nil {
			t.Fatal(r.Err)
		}
		if a := d.Allocations(); len(a) != 1 || a[0].UUID != m.UUID || a[0].MemoryBytes != int64(m.Memory.TotalBytes) {
			t.Errorf("allocation %+v, want all of %s", a, m.UUID)
		}
		if strings.Join(rec.asked, " ") != m.UUID {
			t.Errorf("edits asked for %v, want the MIG device %s", rec.asked, m.UUID)
		}
		other := allocatedClaim("uid-m2", "mig2", share{device: name})
		if r := prepare(t, d, other)[other.UID]; r.Err == nil {
			t.Error("a MIG device was prepared for two claims")
		}
		unprepare(t, d, claim)
	})

	t.Run("NVIDIA CDI library", func(t *testing.T) {
		if _, err := os.Stat("/proc/driver/nvidia-caps/mig-minors"); err != nil {
			t.Skip("nvidia-container-toolkit v1.20.2 reads MIG capability minors from the host's /proc/driver/nvidia-caps/mig-minors, which this machine lacks; run on a MIG node")
		}
		editor, err := NewNVCDIEditor(e.fleet, CDIOptions{DriverRoot: e.driverRoot})
		if err != nil {
			t.Fatal(err)
		}
		edits, err := editor.DeviceEdits(m.UUID)
		if err != nil {
			t.Fatal(err)
		}
		var nodes []string
		for _, n := range edits.DeviceNodes {
			nodes = append(nodes, n.Path)
		}
		joined := strings.Join(nodes, " ")
		if !strings.Contains(joined, "/dev/nvidia1") || !strings.Contains(joined, "/dev/nvidia-caps/") || strings.Contains(joined, "/dev/nvidia0") {
			t.Errorf("MIG device nodes %v: want /dev/nvidia1 and its nvidia-caps nodes only", nodes)
		}
	})
}
