// Command gpu-smoke checks gantry-node-agent's view of a real GPU machine
// against the driver's own tools, and exits non-zero on any mismatch:
//
//  1. discovery per GPU against nvidia-smi (UUID, name, memory total, MIG mode);
//  2. /metrics over HTTP, one DCGM_FI_DEV_FB_USED series per GPU;
//  3. used and free memory following a live allocation made through libcuda
//     and released;
//  4. the ResourceSlice built from the real inventory, accepted by a real
//     API server (when kube-apiserver and etcd are in $GANTRY_BIN_DIR);
//  5. the CDI spec a claim on GPU 0 would get, from NVIDIA's CDI library,
//     validated, with its device nodes present on this machine.
//
// With --fake-gpus it runs checks 2, 4 and 5 on a fake fleet and a fake
// driver root, so that the program itself is tested where there is no GPU.
package main

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	resourceapi "k8s.io/api/resource/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	cdispec "tags.cncf.io/container-device-interface/specs-go"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/gpu/fake"
	"github.com/gantry-dev/gantry/pkg/agent"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/testenv"
)

type checker struct{ failed int }

func (c *checker) ok(format string, a ...any) { fmt.Printf("  ok    "+format+"\n", a...) }
func (c *checker) fail(format string, a ...any) {
	c.failed++
	fmt.Printf("  FAIL  "+format+"\n", a...)
}

func main() {
	fakeGPUs := flag.String("fake-gpus", "", "run on a fake fleet (no GPU): checks 2, 4, 5 only")
	allocMiB := flag.Uint64("alloc-mib", 1024, "size of the live allocation on GPU 0")
	flag.Parse()
	c := &checker{}
	if err := run(c, *fakeGPUs, *allocMiB<<20); err != nil {
		fmt.Fprintf(os.Stderr, "gpu-smoke: %v\n", err)
		os.Exit(1)
	}
	if c.failed > 0 {
		fmt.Printf("\n%d check(s) FAILED\n", c.failed)
		os.Exit(1)
	}
	fmt.Println("\nall checks passed")
}

func run(c *checker, fakeProfile string, allocBytes uint64) error {
	var lib nvml.Interface
	cdiOpts := agent.CDIOptions{DriverRoot: "/"}
	if fakeProfile != "" {
		f, err := fake.New(fakeProfile, "smoke")
		if err != nil {
			return err
		}
		root, err := os.MkdirTemp("", "gpu-smoke-driver-root-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(root)
		if _, err := f.DriverRoot(root); err != nil {
			return err
		}
		lib, cdiOpts.DriverRoot = f, root
	} else {
		lib = gpu.Library("")
	}
	if err := gpu.InitError(lib.Init()); err != nil {
		return err
	}
	defer lib.Shutdown()
	inv, err := gpu.Discover(lib)
	if err != nil {
		return err
	}
	fmt.Printf("driver %s, CUDA %s, %d GPU(s)\n", inv.DriverVersion, inv.CUDADriverVersion, len(inv.Devices))

	if fakeProfile == "" {
		fmt.Println("\n1. discovery against nvidia-smi")
		checkDiscovery(c, inv)
	}
	fmt.Println("\n2. /metrics over HTTP")
	checkMetrics(c, inv)
	if fakeProfile == "" {
		fmt.Println("\n3. used/free memory follow a live allocation through libcuda")
		checkAllocation(c, lib, inv, allocBytes)
	}
	fmt.Println("\n4. ResourceSlice accepted by a real API server")
	checkSlice(c, inv)
	fmt.Println("\n5. CDI spec for a claim on GPU 0")
	checkCDI(c, lib, inv, cdiOpts, fakeProfile != "")
	return nil
}

func checkDiscovery(c *checker, inv *gpu.Inventory) {
	out, err := exec.Command("nvidia-smi", "--query-gpu=index,uuid,name,memory.total,mig.mode.current", "--format=csv,noheader,nounits").Output()
	if err != nil {
		c.fail("nvidia-smi: %v", err)
		return
	}
	rows, err := csv.NewReader(strings.NewReader(string(out))).ReadAll()
	if err != nil {
		c.fail("parse nvidia-smi output: %v", err)
		return
	}
	if len(rows) != len(inv.Devices) {
		c.fail("nvidia-smi lists %d GPUs, the agent %d", len(rows), len(inv.Devices))
	}
	for i, row := range rows {
		for j := range row {
			row[j] = strings.TrimSpace(row[j])
		}
		if i >= len(inv.Devices) || len(row) < 5 {
			continue
		}
		d := inv.Devices[i]
		mib, _ := strconv.ParseUint(row[3], 10, 64)
		// nvidia-smi says Enabled or Disabled, or [N/A] for a GPU without MIG.
		smiMIG := row[4] == "Enabled" || row[4] == "Disabled"
		switch {
		case d.UUID != row[1]:
			c.fail("GPU %d: UUID %s, nvidia-smi %s", i, d.UUID, row[1])
		case d.ProductName != row[2]:
			c.fail("GPU %d: name %q, nvidia-smi %q", i, d.ProductName, row[2])
		case d.Memory.TotalBytes>>20 != mib:
			c.fail("GPU %d: memory total %d MiB, nvidia-smi %d MiB", i, d.Memory.TotalBytes>>20, mib)
		case d.MIG.Capable != smiMIG || (smiMIG && d.MIG.Enabled != (row[4] == "Enabled")):
			c.fail("GPU %d: MIG capable=%v enabled=%v, nvidia-smi %q", i, d.MIG.Capable, d.MIG.Enabled, row[4])
		default:
			c.ok("GPU %d %s %q %d MiB MIG=%s arch=%s brand=%s", i, d.UUID, d.ProductName, mib, row[4], d.Architecture, d.Brand)
		}
	}
}

func checkMetrics(c *checker, inv *gpu.Inventory) {
	reg := prometheus.NewRegistry()
	reg.MustRegister(agent.NewMetrics("smoke", agent.NewSnapshot(inv), nil, nil))
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/metrics")
	if err != nil {
		c.fail("GET /metrics: %v", err)
		return
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		c.fail("GET /metrics: %s", resp.Status)
		return
	}
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(strings.NewReader(string(body)))
	if err != nil {
		c.fail("/metrics is not Prometheus text: %v", err)
		return
	}
	// Per GPU (not in MIG mode): used + free (+ reserved) add up to the total.
	perGPU := func(name, uuid string) (float64, bool) {
		for _, m := range fams[name].GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["UUID"] == uuid && labels["GPU_I_PROFILE"] == "" {
				return m.GetGauge().GetValue(), true
			}
		}
		return 0, false
	}
	for _, d := range inv.Devices {
		used, okU := perGPU("DCGM_FI_DEV_FB_USED", d.UUID)
		free, okF := perGPU("DCGM_FI_DEV_FB_FREE", d.UUID)
		reserved, _ := perGPU("DCGM_FI_DEV_FB_RESERVED", d.UUID)
		total := float64(d.Memory.TotalBytes >> 20)
		switch {
		case !okU || !okF:
			c.fail("GPU %d: no DCGM_FI_DEV_FB_USED/FB_FREE series for %s", d.Index, d.UUID)
		case used+free+reserved < total-2 || used+free+reserved > total+2:
			c.fail("GPU %d: FB_USED %.0f + FB_FREE %.0f + FB_RESERVED %.0f MiB, total %.0f MiB", d.Index, used, free, reserved, total)
		default:
			c.ok("GPU %d: FB_USED %.0f + FB_FREE %.0f + FB_RESERVED %.0f = %.0f MiB", d.Index, used, free, reserved, total)
		}
		if d.MIG.Enabled {
			if n := len(fams["gantry_gpu_mig_memory_total_bytes"].GetMetric()); n == 0 {
				c.fail("GPU %d is in MIG mode but no MIG series is served", d.Index)
			}
		}
	}
	up := fams["gantry_gpu_nvml_up"].GetMetric()
	if len(up) != 1 || up[0].GetGauge().GetValue() != 1 {
		c.fail("gantry_gpu_nvml_up is not 1")
	} else {
		c.ok("gantry_gpu_nvml_up 1; %d metric families, %d bytes", len(fams), len(body))
	}
}

func memOf(lib nvml.Interface, index int) (gpu.Memory, error) {
	inv, err := gpu.Discover(lib)
	if err != nil {
		return gpu.Memory{}, err
	}
	for _, d := range inv.Devices {
		if d.Index == index {
			return d.Memory, nil
		}
	}
	return gpu.Memory{}, fmt.Errorf("GPU %d is gone", index)
}

func checkAllocation(c *checker, lib nvml.Interface, inv *gpu.Inventory, size uint64) {
	// The first GPU not in MIG mode: on a MIG device CUDA would allocate in a
	// GPU instance, which the GPU's memory counters do not show the same way.
	target := -1
	for i, d := range inv.Devices {
		if !d.MIG.Enabled {
			target = i
			break
		}
	}
	if target < 0 {
		fmt.Println("  skip  every GPU is in MIG mode")
		return
	}
	d := inv.Devices[target]
	// CUDA's ordinals follow neither NVML's order nor the PCI bus unless told;
	// naming the GPU by UUID makes it CUDA's device 0.
	os.Setenv("CUDA_VISIBLE_DEVICES", d.UUID)
	before, err := memOf(lib, d.Index)
	if err != nil {
		c.fail("read memory: %v", err)
		return
	}
	a, err := cudaAlloc(0, size)
	if err != nil {
		c.fail("%v", err)
		return
	}
	during, err := memOf(lib, d.Index)
	if ferr := a.free(); ferr != nil {
		c.fail("%v", ferr)
	}
	if err != nil {
		c.fail("read memory: %v", err)
		return
	}
	// The context itself takes memory too; the allocation must show in full.
	if during.UsedBytes < before.UsedBytes+size || during.FreeBytes+size > before.FreeBytes {
		c.fail("used %d→%d, free %d→%d MiB: a %d MiB allocation does not show", before.UsedBytes>>20, during.UsedBytes>>20, before.FreeBytes>>20, during.FreeBytes>>20, size>>20)
	} else {
		c.ok("GPU %d: used %d→%d MiB, free %d→%d MiB with %d MiB allocated", d.Index, before.UsedBytes>>20, during.UsedBytes>>20, before.FreeBytes>>20, during.FreeBytes>>20, size>>20)
	}
	var after gpu.Memory
	for i := 0; i < 50; i++ { // the driver frees asynchronously
		if after, err = memOf(lib, d.Index); err == nil && after.UsedBytes < during.UsedBytes-size/2 {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	if after.UsedBytes >= during.UsedBytes-size/2 {
		c.fail("used memory stayed at %d MiB after the free", after.UsedBytes>>20)
	} else {
		c.ok("released: used back to %d MiB", after.UsedBytes>>20)
	}
}

func checkSlice(c *checker, inv *gpu.Inventory) {
	if _, err := testenv.BinDir(); err != nil {
		fmt.Printf("  skip  no kube-apiserver/etcd ($GANTRY_BIN_DIR): %v\n", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	env, err := testenv.Start(ctx, testenv.Options{CRDPaths: []string{}})
	if err != nil {
		c.fail("start API server: %v", err)
		return
	}
	defer env.Stop()
	res := agent.BuildResources("smoke-node", inv, agent.Staleness{})
	pool := res.Pools["smoke-node"]
	slice := &resourceapi.ResourceSlice{
		ObjectMeta: metav1.ObjectMeta{Name: "smoke-node-gpu.gantry.dev"},
		Spec: resourceapi.ResourceSliceSpec{
			Driver: names.DriverName, NodeName: ptr.To("smoke-node"),
			Pool:    resourceapi.ResourcePool{Name: "smoke-node", ResourceSliceCount: 1},
			Devices: pool.Slices[0].Devices,
		},
	}
	got, err := env.Client.ResourceV1().ResourceSlices().Create(ctx, slice, metav1.CreateOptions{})
	if err != nil {
		c.fail("API server refused the slice: %v", err)
		return
	}
	c.ok("slice with %d devices accepted (resourceVersion %s)", len(got.Spec.Devices), got.ResourceVersion)
	b, _ := json.MarshalIndent(got.Spec.Devices[0], "    ", "  ")
	fmt.Printf("    first device: %s\n", b)
}

func checkCDI(c *checker, lib nvml.Interface, inv *gpu.Inventory, opts agent.CDIOptions, fakeRoot bool) {
	editor, err := agent.NewNVCDIEditor(lib, opts)
	if err != nil {
		c.fail("NVIDIA CDI library: %v", err)
		return
	}
	d := inv.Devices[0]
	uuid := d.UUID
	if d.MIG.Enabled && len(d.MIG.Devices) > 0 {
		uuid = d.MIG.Devices[0].UUID
	}
	common, err := editor.CommonEdits()
	if err != nil {
		c.fail("common edits: %v", err)
		return
	}
	dev, err := editor.DeviceEdits(uuid)
	if err != nil {
		c.fail("device edits for %s: %v", uuid, err)
		return
	}
	spec := &cdispec.Spec{Version: "0.6.0", Kind: names.DriverName + "/gpu", Devices: []cdispec.Device{
		{Name: "common", ContainerEdits: *common}, {Name: "smoke-claim-gpu-0", ContainerEdits: *dev}}}
	if v, err := cdispec.MinimumRequiredVersion(spec); err == nil {
		spec.Version = v
	}
	if err := agent.ValidateCDISpec(spec); err != nil {
		c.fail("CDI library rejects the spec: %v", err)
	} else {
		c.ok("spec validates (CDI %s)", spec.Version)
	}
	for _, n := range append(append([]*cdispec.DeviceNode{}, common.DeviceNodes...), dev.DeviceNodes...) {
		path := n.HostPath
		if path == "" {
			path = n.Path
		}
		if fakeRoot {
			continue // fake nodes live under the fake root
		}
		if st, err := os.Stat(path); err != nil || st.Mode()&os.ModeCharDevice == 0 {
			c.fail("device node %s is not a character device here: %v", path, err)
		} else {
			c.ok("device node %s", path)
		}
	}
	if len(dev.DeviceNodes) == 0 {
		c.fail("the claim's device has no device nodes")
	}
	b, _ := json.MarshalIndent(spec, "    ", "  ")
	fmt.Printf("    spec:\n    %s\n", b)
}
