package agent

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gantry-dev/gantry/gpu/fake"
)

type driverEnv struct {
	dataDir, cdiRoot, driverRoot string
	realNodes                    bool
	fleet                        *fake.Fleet
	snapshot                     *Snapshot
	// editor is NVIDIA's CDI library on the fleet and its fake driver
	// root; nil stands for NVML closed.
	editor CDIEditor
}

func newDriverEnv(t *testing.T, profile string) *driverEnv {
	f, inv := discover(t, profile)
	e := &driverEnv{dataDir: t.TempDir(), cdiRoot: t.TempDir(), driverRoot: t.TempDir(), fleet: f, snapshot: NewSnapshot(inv)}
	var err error
	if e.realNodes, err = f.DriverRoot(e.driverRoot); err != nil {
		t.Fatal(err)
	}
	if e.editor, err = NewNVCDIEditor(f, CDIOptions{DriverRoot: e.driverRoot}); err != nil {
		t.Fatal(err)
	}
	return e
}

// start builds a Driver on the env's directories, as a (re)started agent would.
func (e *driverEnv) start(t *testing.T, mps *MPSManager) *Driver {
	t.Helper()
	d, err := NewDriver(DriverOptions{NodeName: testNode, PluginDataDir: e.dataDir, CDIRoot: e.cdiRoot, MPS: mps, Snapshot: e.snapshot,
		Editor: func() CDIEditor { return e.editor }})
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func prepare(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) map[types.UID]kubeletplugin.PrepareResult {
	t.Helper()
	res, err := d.PrepareResourceClaims(context.Background(), claims)
	if err != nil {
		t.Fatalf("PrepareResourceClaims: %v", err)
	}
	if len(res) != len(claims) {
		t.Fatalf("%d results for %d claims", len(res), len(claims))
	}
	return res
}

func unprepare(t *testing.T, d *Driver, claims ...*resourceapi.ResourceClaim) map[types.UID]error {
	t.Helper()
	var objs []kubeletplugin.NamespacedObject
	for _, c := range claims {
		objs = append(objs, kubeletplugin.NamespacedObject{NamespacedName: types.NamespacedName{Namespace: c.Namespace, Name: c.Name}, UID: c.UID})
	}
	res, err := d.UnprepareResourceClaims(context.Background(), objs)
	if err != nil {
		t.Fatalf("UnprepareResourceClaims: %v", err)
	}
	return res
}

func readCDIEnv(t *testing.T, cdiRoot string, uid types.UID) (cdispec.Spec, map[string]string) {
	t.Helper()
	data, err := os.ReadFile(cdiSpecPath(cdiRoot, uid))
	if err != nil {
		t.Fatalf("CDI spec: %v", err)
	}
	var spec cdispec.Spec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{}
	for _, kv := range spec.Devices[0].ContainerEdits.Env {
		k, v, _ := strings.Cut(kv, "=")
		env[k] = v
	}
	return spec, env
}

func TestPrepareShareWritesCDISpec(t *testing.T) {
	e := newDriverEnv(t, "dgxh100")
	d := e.start(t, nil)
	claim := allocatedClaim("uid-1", "llm", share{device: "gpu-2", memory: "20Gi", shareID: "share-1"})

	res := prepare(t, d, claim)[claim.UID]
	if res.Err != nil {
		t.Fatal(res.Err)
	}
	if len(res.Devices) != 1 {
		t.Fatalf("devices %+v", res.Devices)
	}
	dev := res.Devices[0]
	wantIDs := []string{"gpu.gantry.dev/gpu=common", "gpu.gantry.dev/gpu=uid-1-gpu-2-share-1"}
	if dev.PoolName != testNode || dev.DeviceName != "gpu-2" || strings.Join(dev.CDIDeviceIDs, " ") != strings.Join(wantIDs, " ") ||
		dev.ShareID == nil || *dev.ShareID != "share-1" || dev.Requests[0] != "gpu" {
		t.Errorf("device %+v, want CDI ids %v", dev, wantIDs)
	}

	spec, env := readCDIEnv(t, e.cdiRoot, claim.UID)
	if spec.Kind != "gpu.gantry.dev/gpu" || spec.Devices[0].Name != "uid-1-gpu-2-share-1" || spec.Version == "" {
		t.Errorf("spec %+v", spec)
	}
	g := e.snapshot.Get().Devices[2]
	sfx := uuidEnvSuffix(g.UUID)
	frac := strconv.FormatFloat(float64(20<<30)/float64(ShareableBytes(g.Memory)), 'f', 4, 64)
	want := map[string]string{EnvMemoryBytesPrefix + sfx: "21474836480", EnvMemoryFractionPrefix + sfx: frac}
	for k, v := range want {
		if env[k] != v {
			t.Errorf("%s=%q, want %q", k, env[k], v)
		}
	}
	if _, ok := env["NVIDIA_VISIBLE_DEVICES"]; ok {
		t.Error("the claim's device sets NVIDIA_VISIBLE_DEVICES; only the common device may (to void)")
	}
	if _, ok := env["CUDA_MPS_PIPE_DIRECTORY"]; ok {
		t.Error("MPS client edits without MPS")
	}
	if env[EnvMemoryEnforcedPrefix+sfx] != "false" {
		t.Errorf("%s%s=%q, want false (no MPS)", EnvMemoryEnforcedPrefix, sfx, env[EnvMemoryEnforcedPrefix+sfx])
	}
	var nodes []string
	for _, n := range spec.Devices[0].ContainerEdits.DeviceNodes {
		nodes = append(nodes, n.Path)
	}
	if strings.Join(nodes, " ") != "/dev/nvidia2" {
		t.Errorf("claim device nodes %v, want /dev/nvidia2", nodes)
	}
}

func TestPrepareIsIdempotentAndSurvivesRestart(t *testing.T) {
	e := newDriverEnv(t, "dgxh100")
	claim := allocatedClaim("uid-1", "llm", share{device: "gpu-0", memory: "20Gi", shareID: "a"})

	d1 := e.start(t, nil)
	first := prepare(t, d1, claim)[claim.UID]
	again := prepare(t, d1, claim)[claim.UID]
	if first.Err != nil || again.Err != nil || first.Devices[0].CDIDeviceIDs[0] != again.Devices[0].CDIDeviceIDs[0] {
		t.Fatalf("second prepare differs: %+v vs %+v", first, again)
	}
	specBefore, _ := os.ReadFile(cdiSpecPath(e.cdiRoot, claim.UID))
	cpBefore, _ := os.ReadFile(filepath.Join(e.dataDir, CheckpointFile))

	// Restart: a new driver on the same directories; the claim object no
	// longer needs its allocation, because the kubelet may send a claim that
	// has since been deleted and recreated.
	d2 := e.start(t, nil)
	if got := d2.Allocations(); len(got) != 1 || got[0].MemoryBytes != 20<<30 || got[0].ClaimName != "llm" {
		t.Fatalf("after restart allocations %+v", got)
	}
	afterRestart := prepare(t, d2, claim)[claim.UID]
	if afterRestart.Err != nil || afterRestart.Devices[0].CDIDeviceIDs[0] != first.Devices[0].CDIDeviceIDs[0] {
		t.Fatalf("prepare after restart %+v", afterRestart)
	}
	specAfter, _ := os.ReadFile(cdiSpecPath(e.cdiRoot, claim.UID))
	cpAfter, _ := os.ReadFile(filepath.Join(e.dataDir, CheckpointFile))
	if string(specBefore) != string(specAfter) || string(cpBefore) != string(cpAfter) {
		t.Error("restart changed the CDI spec or the checkpoint")
	}

	// Unprepare in the restarted agent, twice.
	for i := 0; i < 2; i++ {
		if err := unprepare(t, d2, claim)[claim.UID]; err != nil {
			t.Fatalf("unprepare #%d: %v", i+1, err)
		}
	}
	if _, err := os.Stat(cdiSpecPath(e.cdiRoot, claim.UID)); !os.IsNotExist(err) {
		t.Error("CDI spec left behind")
	}
	if got := e.start(t, nil).Allocations(); len(got) != 0 {
		t.Errorf("unprepared claim still checkpointed: %+v", got)
	}
}

func TestPrepareRecreatesLostCDISpec(t *testing.T) {
	e := newDriverEnv(t, "1xH100")
	claim := allocatedClaim("uid-1", "llm", share{device: "gpu-0"})
	prepare(t, e.start(t, nil), claim)
	// /var/run is a tmpfs: a reboot loses CDI specs but not the checkpoint.
	if err := os.Remove(cdiSpecPath(e.cdiRoot, claim.UID)); err != nil {
		t.Fatal(err)
	}
	if r := prepare(t, e.start(t, nil), claim)[claim.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := os.Stat(cdiSpecPath(e.cdiRoot, claim.UID)); err != nil {
		t.Errorf("CDI spec not recreated: %v", err)
	}
}

func TestPrepareRefuses(t *testing.T) {
	tests := []struct {
		name     string
		prepared []*resourceapi.ResourceClaim
		claim    *resourceapi.ResourceClaim
		setup    func(e *driverEnv)
		wantErr  string
	}{
		{
			name:     "whole GPU already shared",
			prepared: []*resourceapi.ResourceClaim{allocatedClaim("uid-a", "a", share{device: "gpu-0", memory: "10Gi", shareID: "x"})},
			claim:    allocatedClaim("uid-b", "b", share{device: "gpu-0"}),
			wantErr:  "over-committed",
		},
		{
			name: "shares exceed memory",
			prepared: []*resourceapi.ResourceClaim{
				allocatedClaim("uid-a", "a", share{device: "gpu-1", memory: "40Gi", shareID: "x"}),
				allocatedClaim("uid-b", "b", share{device: "gpu-1", memory: "30Gi", shareID: "y"}),
			},
			claim:   allocatedClaim("uid-c", "c", share{device: "gpu-1", memory: "20Gi", shareID: "z"}),
			wantErr: "team-a/a, team-a/b",
		},
		{
			name: "other node's pool",
			claim: func() *resourceapi.ResourceClaim {
				c := allocatedClaim("uid-a", "a", share{device: "gpu-0"})
				c.Status.Allocation.Devices.Results[0].Pool = "node-b"
				return c
			}(),
			wantErr: `pool "node-b"`,
		},
		{
			name:    "unknown device",
			claim:   allocatedClaim("uid-a", "a", share{device: "gpu-9"}),
			wantErr: "does not exist",
		},
		{
			name: "not allocated",
			claim: func() *resourceapi.ResourceClaim {
				c := allocatedClaim("uid-a", "a")
				c.Status.Allocation = nil
				return c
			}(),
			wantErr: "not allocated",
		},
		{
			name:  "unhealthy GPU",
			claim: allocatedClaim("uid-a", "a", share{device: "gpu-4"}),
			setup: func(e *driverEnv) {
				inv := *e.snapshot.Get()
				inv.Devices = append(inv.Devices[:0:0], inv.Devices...)
				inv.Devices[4].Health.State = "Unhealthy"
				inv.Devices[4].Health.Reasons = []string{"xid 79: GPU has fallen off the bus"}
				e.snapshot.Set(&inv)
			},
			wantErr: "fallen off the bus",
		},
		{
			name:    "share larger than GPU",
			claim:   allocatedClaim("uid-a", "a", share{device: "gpu-0", memory: "81Gi", shareID: "x"}),
			wantErr: "outside",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			e := newDriverEnv(t, "dgxh100")
			if tc.setup != nil {
				tc.setup(e)
			}
			d := e.start(t, nil)
			for _, c := range tc.prepared {
				if r := prepare(t, d, c)[c.UID]; r.Err != nil {
					t.Fatalf("setup claim %s: %v", c.Name, r.Err)
				}
			}
			r := prepare(t, d, tc.claim)[tc.claim.UID]
			if r.Err == nil || !strings.Contains(r.Err.Error(), tc.wantErr) {
				t.Fatalf("error %v, want one containing %q", r.Err, tc.wantErr)
			}
			if _, err := os.Stat(cdiSpecPath(e.cdiRoot, tc.claim.UID)); !os.IsNotExist(err) {
				t.Error("refused claim got a CDI spec")
			}
			if got := len(e.start(t, nil).Allocations()); got != len(tc.prepared) {
				t.Errorf("%d allocations checkpointed, want %d", got, len(tc.prepared))
			}
		})
	}
}

func TestCorruptCheckpointStopsTheDriver(t *testing.T) {
	e := newDriverEnv(t, "1xA10G")
	if err := os.WriteFile(filepath.Join(e.dataDir, CheckpointFile), []byte("{not json"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err := NewDriver(DriverOptions{NodeName: testNode, PluginDataDir: e.dataDir, CDIRoot: e.cdiRoot, Snapshot: e.snapshot,
		Editor: func() CDIEditor { return e.editor }})
	if err == nil || !strings.Contains(err.Error(), "parse checkpoint") {
		t.Fatalf("error %v: a corrupt checkpoint must not silently forget prepared claims", err)
	}
}

func TestHealthReports(t *testing.T) {
	e := newDriverEnv(t, "2xA10G")
	d := e.start(t, nil)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	reports := make(chan kubeletplugin.DeviceHealthReport)
	done := make(chan error, 1)
	go func() { done <- d.WatchHealthStatus(ctx, reports) }()

	first := <-reports
	if len(first.Devices) != 2 || first.Devices[0].Health != kubeletplugin.HealthStatusHealthy || first.Devices[0].PoolName != testNode || first.Devices[1].DeviceName != "gpu-1" {
		t.Fatalf("first report %+v", first)
	}
	inv := *e.snapshot.Get()
	inv.Devices = append(inv.Devices[:0:0], inv.Devices...)
	inv.Devices[1].Health.State = "Unhealthy"
	inv.Devices[1].Health.Reasons = []string{"xid 48: double-bit ECC error"}
	e.snapshot.Set(&inv)
	second := <-reports
	if h := second.Devices[1]; h.Health != kubeletplugin.HealthStatusUnhealthy || !strings.Contains(h.Message, "xid 48") {
		t.Errorf("report after change %+v", h)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("WatchHealthStatus: %v", err)
	}
}
