package agent

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"

	oci "github.com/opencontainers/runtime-spec/specs-go"
	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"tags.cncf.io/container-device-interface/pkg/cdi"

	"github.com/gantry-dev/gantry/pkg/names"
)

// fakeMPS is an MPS manager running testdata/fake-nvidia-cuda-mps-control
// through the real exec path; fail is passed to it as FAKE_MPS_FAIL.
func fakeMPS(t *testing.T, fail string) *MPSManager {
	t.Helper()
	control, err := filepath.Abs("testdata/fake-nvidia-cuda-mps-control")
	if err != nil {
		t.Fatal(err)
	}
	m := NewMPSManager(MPSOptions{Root: t.TempDir(), Control: control})
	if fail != "" {
		run := m.control
		m.control = func(env []string, stdin string, args ...string) (string, error) {
			return run(append(env, "FAKE_MPS_FAIL="+fail), stdin, args...)
		}
	}
	t.Cleanup(func() {
		// End any "daemon" a failing test left behind.
		dirs, _ := filepath.Glob(filepath.Join(m.opts.Root, "*"))
		for _, d := range dirs {
			_ = m.Stop(types.UID(filepath.Base(d)))
		}
	})
	return m
}

func daemonPID(t *testing.T, m *MPSManager, uid types.UID) int {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(m.dirs(uid).pipe, "nvidia-cuda-mps-control.pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func alive(pid int) bool { return pid > 0 && processAlive(pid) }

func withConfig(c *resourceapi.ResourceClaim, params string) *resourceapi.ResourceClaim {
	c.Status.Allocation.Devices.Config = append(c.Status.Allocation.Devices.Config, resourceapi.DeviceAllocationConfiguration{
		Source: resourceapi.AllocationConfigSourceClaim,
		DeviceConfiguration: resourceapi.DeviceConfiguration{Opaque: &resourceapi.OpaqueDeviceConfiguration{
			Driver: names.DriverName, Parameters: runtime.RawExtension{Raw: []byte(params)}}},
	})
	return c
}

const requireEnforcement = `{"apiVersion":"gpu.gantry.dev/v1alpha1","kind":"GPUShareConfig","enforcement":"Required"}`

// enforcedCondition reads back what the agent wrote in the claim's status.
func enforcedCondition(t *testing.T, client *fake.Clientset, c *resourceapi.ResourceClaim) *metav1.Condition {
	t.Helper()
	got, err := client.ResourceV1().ResourceClaims(c.Namespace).Get(context.Background(), c.Name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range got.Status.Devices {
		if s.Driver == names.DriverName {
			return meta.FindStatusCondition(s.Conditions, ConditionShareEnforced)
		}
	}
	return nil
}

// An H100 node with two shares on one GPU: each claim gets an MPS daemon
// of its own serving only that GPU, with the claim's limit set on the
// daemon (not in a variable the container could change), and its
// containers get the daemon's pipe and shm directories. Unprepare stops
// the daemon.
func TestMPSEnforcesTwoSharesOnOneGPU(t *testing.T) {
	e := newDriverEnv(t, "dgxh100")
	mps := fakeMPS(t, "")
	a := allocatedClaim("uid-a", "serve-a", share{device: "gpu-2", memory: "20Gi", shareID: "s1"})
	b := allocatedClaim("uid-b", "serve-b", share{device: "gpu-2", memory: "30Gi", shareID: "s2"})
	client := fake.NewClientset(a.DeepCopy(), b.DeepCopy())
	d, err := NewDriver(DriverOptions{NodeName: testNode, PluginDataDir: e.dataDir, CDIRoot: e.cdiRoot, MPS: mps, Snapshot: e.snapshot,
		Editor: func() CDIEditor { return e.editor }, ClaimStatus: &ClaimStatusWriter{Client: client}})
	if err != nil {
		t.Fatal(err)
	}
	for uid, r := range prepare(t, d, a, b) {
		if r.Err != nil {
			t.Fatalf("%s: %v", uid, r.Err)
		}
	}
	uuid := e.snapshot.Get().Devices[2].UUID
	for _, c := range []struct {
		claim *resourceapi.ResourceClaim
		mib   int
	}{{a, 20 << 10}, {b, 30 << 10}} {
		dirs := mps.dirs(c.claim.UID)
		if !alive(daemonPID(t, mps, c.claim.UID)) {
			t.Fatalf("%s: no MPS daemon running", c.claim.Name)
		}
		visible, _ := os.ReadFile(filepath.Join(dirs.pipe, "visible-devices"))
		if strings.TrimSpace(string(visible)) != uuid {
			t.Errorf("%s: daemon serves %q, want only %s", c.claim.Name, visible, uuid)
		}
		cmds, _ := os.ReadFile(filepath.Join(dirs.pipe, "commands"))
		if want := "set_default_device_pinned_mem_limit " + uuid + " " + strconv.Itoa(c.mib) + "M"; strings.TrimSpace(string(cmds)) != want {
			t.Errorf("%s: daemon got %q, want %q", c.claim.Name, cmds, want)
		}
		spec, env := readCDIEnv(t, e.cdiRoot, c.claim.UID)
		if env["CUDA_MPS_PIPE_DIRECTORY"] != mpsContainerPipeDir || env[EnvMemoryEnforcedPrefix+uuidEnvSuffix(uuid)] != "true" {
			t.Errorf("%s: env %v", c.claim.Name, env)
		}
		if _, ok := env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"]; ok {
			t.Errorf("%s: the limit is in the container's environment, where the client could raise it", c.claim.Name)
		}
		mounts := map[string]string{}
		for _, m := range spec.Devices[0].ContainerEdits.Mounts {
			mounts[m.ContainerPath] = m.HostPath
		}
		if mounts[mpsContainerPipeDir] != dirs.pipe || mounts[mpsContainerShmDir] != dirs.shm {
			t.Errorf("%s: mounts %v, want pipe %s and shm %s", c.claim.Name, mounts, dirs.pipe, dirs.shm)
		}
		cond := enforcedCondition(t, client, c.claim)
		if cond == nil || cond.Status != metav1.ConditionTrue || !strings.Contains(cond.Message, strconv.Itoa(c.mib)+" MiB") {
			t.Errorf("%s: claim status condition %+v", c.claim.Name, cond)
		}
	}
	if mps.dirs(a.UID).pipe == mps.dirs(b.UID).pipe {
		t.Fatal("two claims share one daemon")
	}

	pidA := daemonPID(t, mps, a.UID)
	for uid, err := range unprepare(t, d, a) {
		if err != nil {
			t.Fatalf("unprepare %s: %v", uid, err)
		}
	}
	if alive(pidA) {
		t.Error("claim a's daemon still runs after Unprepare")
	}
	if _, err := os.Stat(mps.dirs(a.UID).root); !os.IsNotExist(err) {
		t.Errorf("claim a's MPS directories remain: %v", err)
	}
	if !alive(daemonPID(t, mps, b.UID)) {
		t.Error("claim b's daemon stopped with a's")
	}
}

// A share the node cannot enforce is prepared and says so, in the claim's
// status and the container; a claim that requires enforcement is refused
// and leaves nothing behind.
func TestUnenforceableShares(t *testing.T) {
	cases := []struct {
		name, fail string
		mps        bool
		wantReason string
	}{
		{"without --mps", "", false, "without --mps"},
		{"daemon does not start", "start", true, "cannot start: no GPU visible"},
		{"daemon refuses the limit", "limit", true, "Error: invalid device"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			e := newDriverEnv(t, "dgxh100")
			var mps *MPSManager
			if tc.mps {
				mps = fakeMPS(t, tc.fail)
			}
			best := allocatedClaim("uid-best", "best", share{device: "gpu-1", memory: "10Gi", shareID: "s1"})
			strict := withConfig(allocatedClaim("uid-strict", "strict", share{device: "gpu-1", memory: "10Gi", shareID: "s2"}), requireEnforcement)
			client := fake.NewClientset(best.DeepCopy(), strict.DeepCopy())
			d, err := NewDriver(DriverOptions{NodeName: testNode, PluginDataDir: e.dataDir, CDIRoot: e.cdiRoot, MPS: mps, Snapshot: e.snapshot,
				Editor: func() CDIEditor { return e.editor }, ClaimStatus: &ClaimStatusWriter{Client: client}})
			if err != nil {
				t.Fatal(err)
			}
			res := prepare(t, d, best, strict)
			if err := res[best.UID].Err; err != nil {
				t.Fatalf("best-effort claim refused: %v", err)
			}
			if err := res[strict.UID].Err; err == nil || !strings.Contains(err.Error(), "requires enforced memory shares") || !strings.Contains(err.Error(), tc.wantReason) {
				t.Fatalf("required enforcement: err %v, want a refusal naming %q", err, tc.wantReason)
			}
			if cdiSpecExists(e.cdiRoot, strict.UID) || d.cp.Claims[strict.UID] != nil {
				t.Error("the refused claim left a CDI spec or a checkpoint entry")
			}
			if mps != nil {
				if _, err := os.Stat(mps.dirs(strict.UID).root); !os.IsNotExist(err) {
					t.Error("the refused claim left MPS directories")
				}
			}
			uuid := e.snapshot.Get().Devices[1].UUID
			_, env := readCDIEnv(t, e.cdiRoot, best.UID)
			if env[EnvMemoryEnforcedPrefix+uuidEnvSuffix(uuid)] != "false" {
				t.Errorf("container env %v, want %s...=false", env, EnvMemoryEnforcedPrefix)
			}
			if _, ok := env["CUDA_MPS_PIPE_DIRECTORY"]; ok {
				t.Error("an unenforced share is pointed at an MPS daemon")
			}
			cond := enforcedCondition(t, client, best)
			if cond == nil || cond.Status != metav1.ConditionFalse || !strings.HasPrefix(cond.Message, "not enforced: ") || !strings.Contains(cond.Message, tc.wantReason) {
				t.Errorf("claim status condition %+v, want False, \"not enforced: ...%s\"", cond, tc.wantReason)
			}
		})
	}
}

// A whole GPU needs no daemon; "Required" on it is satisfied.
func TestWholeGPUNeedsNoMPS(t *testing.T) {
	e := newDriverEnv(t, "2xA10G")
	mps := fakeMPS(t, "")
	whole := withConfig(allocatedClaim("uid-w", "train", share{device: "gpu-0"}), requireEnforcement)
	if r := prepare(t, e.start(t, mps), whole)[whole.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	if _, err := os.Stat(mps.dirs(whole.UID).root); !os.IsNotExist(err) {
		t.Error("an MPS daemon was made for a whole GPU")
	}
	_, env := readCDIEnv(t, e.cdiRoot, whole.UID)
	for k := range env {
		if strings.HasPrefix(k, EnvMemoryEnforcedPrefix) || strings.HasPrefix(k, "CUDA_MPS_") {
			t.Errorf("whole GPU got %s", k)
		}
	}
}

// After a restart of the agent's container its daemons, its children, are
// gone; the driver starts them again with the same limits.
func TestMPSDaemonsComeBackAfterRestart(t *testing.T) {
	e := newDriverEnv(t, "dgxh100")
	mps := fakeMPS(t, "")
	c := allocatedClaim("uid-r", "serve", share{device: "gpu-3", memory: "8Gi", shareID: "s1"})
	if r := prepare(t, e.start(t, mps), c)[c.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	old := daemonPID(t, mps, c.UID)
	// The restarted container's PID namespace has no such process: the
	// pid file names one that is gone.
	_ = syscall.Kill(old, syscall.SIGKILL)
	pidFile := filepath.Join(mps.dirs(c.UID).pipe, "nvidia-cuda-mps-control.pid")
	if err := os.WriteFile(pidFile, []byte("999999999\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	e.start(t, mps)
	pid := daemonPID(t, mps, c.UID)
	if pid == old || !alive(pid) {
		t.Fatalf("daemon pid %d (was %d) not running after restart", pid, old)
	}
	cmds, _ := os.ReadFile(filepath.Join(mps.dirs(c.UID).pipe, "commands"))
	if n := strings.Count(string(cmds), "set_default_device_pinned_mem_limit "+e.snapshot.Get().Devices[3].UUID+" 8192M"); n != 2 {
		t.Errorf("limit set %d times (want once per start): %q", n, cmds)
	}
}

func TestShareConfigErrorsSayWhatToWrite(t *testing.T) {
	for params, want := range map[string]string{
		`{"apiVersion":"gpu.gantry.dev/v1alpha1","kind":"GPUShareConfig","enforce":"Required"}`:       `unknown field "enforce"`,
		`{"apiVersion":"gpu.gantry.dev/v1alpha1","kind":"GPUShareConfig","enforcement":"Always"}`:     `"Always" is neither "Required" nor "BestEffort"`,
		`{"apiVersion":"gpu.nvidia.com/v1beta1","kind":"GpuConfig"}`:                                  `this driver reads apiVersion "gpu.gantry.dev/v1alpha1", kind "GPUShareConfig"`,
		`{"apiVersion":"gpu.gantry.dev/v1alpha1","kind":"GPUShareConfig","enforcement":"BestEffort"}`: "",
	} {
		c := withConfig(allocatedClaim("u", "c", share{device: "gpu-0", memory: "1Gi"}), params)
		cfg, err := shareConfig(c)
		switch {
		case want == "" && err != nil:
			t.Errorf("%s: %v", params, err)
		case want != "" && (err == nil || !strings.Contains(err.Error(), want)):
			t.Errorf("%s: err %v, want %q", params, err, want)
		case want == "" && cfg.Enforcement != EnforcementBestEffort:
			t.Errorf("%s: %+v", params, cfg)
		}
	}
	// Another driver's configuration is not ours to read.
	c := allocatedClaim("u", "c", share{device: "gpu-0"})
	c.Status.Allocation.Devices.Config = []resourceapi.DeviceAllocationConfiguration{{DeviceConfiguration: resourceapi.DeviceConfiguration{
		Opaque: &resourceapi.OpaqueDeviceConfiguration{Driver: "gpu.nvidia.com", Parameters: runtime.RawExtension{Raw: []byte(`{"kind":"GpuConfig"}`)}}}}}
	if _, err := shareConfig(c); err != nil {
		t.Error(err)
	}
}

// Nothing a pod writes in its own environment changes what Gantry's claims
// give it: the CDI edits replace the pod's values of the same variables,
// and the GPUs come from device nodes, not from NVIDIA_VISIBLE_DEVICES.
func TestPodEnvironmentCannotWidenItsClaims(t *testing.T) {
	e := newDriverEnv(t, "dgxh100")
	if !e.realNodes {
		t.Skip("cannot create device nodes here (not root)")
	}
	mps := fakeMPS(t, "")
	d := e.start(t, mps)
	c := allocatedClaim("uid-p", "serve", share{device: "gpu-4", memory: "10Gi", shareID: "s1"})
	if r := prepare(t, d, c)[c.UID]; r.Err != nil {
		t.Fatal(r.Err)
	}
	uuid := e.snapshot.Get().Devices[4].UUID
	cache, err := cdi.NewCache(cdi.WithSpecDirs(e.cdiRoot), cdi.WithAutoRefresh(false))
	if err != nil {
		t.Fatal(err)
	}
	ctr := &oci.Spec{Process: &oci.Process{Env: []string{
		"NVIDIA_VISIBLE_DEVICES=all",
		"CUDA_MPS_PIPE_DIRECTORY=/tmp/elsewhere",
		EnvMemoryBytesPrefix + uuidEnvSuffix(uuid) + "=85899345920",
	}}, Linux: &oci.Linux{}}
	if _, err := cache.InjectDevices(ctr, deviceIDs(t, d, c.UID)...); err != nil {
		t.Fatal(err)
	}
	// One value per name: a runtime reading the first would otherwise see
	// the pod's.
	seen := map[string]bool{}
	for _, kv := range ctr.Process.Env {
		k, _, _ := strings.Cut(kv, "=")
		if seen[k] {
			t.Errorf("%s is set twice: %v", k, ctr.Process.Env)
		}
		seen[k] = true
	}
	env := ociEnv(ctr)
	for k, want := range map[string]string{
		"NVIDIA_VISIBLE_DEVICES":                      "void",
		"CUDA_MPS_PIPE_DIRECTORY":                     mpsContainerPipeDir,
		EnvMemoryBytesPrefix + uuidEnvSuffix(uuid):    strconv.Itoa(10 << 30),
		EnvMemoryEnforcedPrefix + uuidEnvSuffix(uuid): "true",
	} {
		if env[k] != want {
			t.Errorf("%s=%q after injection, want %q", k, env[k], want)
		}
	}
	for _, p := range ociDevices(ctr) {
		if strings.HasPrefix(p, "/dev/nvidia") && p != "/dev/nvidia4" && !strings.HasPrefix(p, "/dev/nvidia-") && p != "/dev/nvidiactl" {
			t.Errorf("container got %s besides its GPU", p)
		}
	}
}

// With BindShm the daemon (and the servers it forks) see the claim's shm
// directory at /dev/shm, the directory its clients get there.
func TestMPSDaemonSharesTheClaimsShm(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("unshare --mount needs CAP_SYS_ADMIN")
	}
	m := fakeMPS(t, "")
	m.opts.BindShm = true
	const uid = types.UID("uid-shm")
	if err := m.Start(uid, []mpsShare{{UUID: "GPU-1", Bytes: 1 << 30}}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(m.dirs(uid).pipe, "shm-inode"))
	if err != nil {
		t.Fatal(err)
	}
	var st syscall.Stat_t
	if err := syscall.Stat(m.dirs(uid).shm, &st); err != nil {
		t.Fatal(err)
	}
	if strings.TrimSpace(string(got)) != strconv.FormatUint(st.Ino, 10) {
		t.Errorf("daemon's /dev/shm is inode %s, the claim's shm directory %d", got, st.Ino)
	}
	if err := m.Stop(uid); err != nil {
		t.Error(err)
	}
}
