package agent

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/NVIDIA/go-nvlib/pkg/nvlib/device"
	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi"
	"github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform"
	transformroot "github.com/NVIDIA/nvidia-container-toolkit/pkg/nvcdi/transform/root"
	"github.com/gantry-dev/gantry/pkg/names"
	"k8s.io/klog/v2"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// CDIOptions say where the driver's files are.
type CDIOptions struct {
	// DriverRoot is where the agent sees the driver's files: "/" for a
	// driver installed on the host and mounted at the same paths, or the
	// mount of the GPU Operator's driver container (e.g. /driver-root).
	DriverRoot string
	// HostDriverRoot is the same directory as the container runtime sees
	// it on the host (e.g. /run/nvidia/driver); paths in the specs are
	// rewritten from DriverRoot to it. Defaults to DriverRoot.
	HostDriverRoot string
	// DevRoot is where /dev is found (default: DriverRoot if it holds
	// dev/nvidiactl, else /).
	DevRoot string
	// HookPath is nvidia-cdi-hook on the host (GPU Operator:
	// /usr/local/nvidia/toolkit/nvidia-cdi-hook).
	HookPath string
}

func (o CDIOptions) withDefaults() CDIOptions {
	if o.DriverRoot == "" {
		o.DriverRoot = "/"
	}
	if o.HostDriverRoot == "" {
		o.HostDriverRoot = o.DriverRoot
	}
	if o.DevRoot == "" {
		// A driver container's root may or may not hold the device nodes
		// (NVIDIA's DRA driver decides the same way).
		o.DevRoot = "/"
		if _, err := os.Stat(filepath.Join(o.DriverRoot, "dev", "nvidiactl")); err == nil {
			o.DevRoot = o.DriverRoot
		}
	}
	if o.HookPath == "" {
		o.HookPath = "/usr/bin/nvidia-cdi-hook"
	}
	return o
}

// nvcdiEditor asks NVIDIA's container toolkit library (pkg/nvcdi) for the
// same edits that `nvidia-ctk cdi generate` writes, for one device at a time.
type nvcdiEditor struct {
	lib       nvcdi.Interface
	transform transform.Transformer
}

// NewNVCDIEditor builds an editor on an NVML library (real or a fake fleet).
// NVML is initialised and shut down around each call by nvcdi itself.
func NewNVCDIEditor(lib nvml.Interface, opts CDIOptions) (CDIEditor, error) {
	opts = opts.withDefaults()
	cdilib, err := nvcdi.New(
		nvcdi.WithMode(nvcdi.ModeNvml),
		nvcdi.WithNvmlLib(lib),
		nvcdi.WithDeviceLib(device.New(lib)),
		nvcdi.WithDriverRoot(opts.DriverRoot),
		nvcdi.WithDevRoot(opts.DevRoot),
		nvcdi.WithNVIDIACDIHookPath(opts.HookPath),
		nvcdi.WithVendor(names.DriverName),
		nvcdi.WithClass("gpu"),
		nvcdi.WithLogger(klogAdapter{}),
		// nvsandboxutils is an optional driver library; NVML is enough.
		nvcdi.WithFeatureFlags(nvcdi.FeatureDisableNvsandboxUtils),
	)
	if err != nil {
		return nil, fmt.Errorf("NVIDIA CDI library: %w", err)
	}
	return &nvcdiEditor{
		lib: cdilib,
		transform: transformroot.New(
			transformroot.WithRoot(opts.DriverRoot),
			transformroot.WithTargetRoot(opts.HostDriverRoot),
		),
	}, nil
}

func (e *nvcdiEditor) CommonEdits() (*cdispec.ContainerEdits, error) {
	edits, err := e.lib.GetCommonEdits()
	if err != nil {
		return nil, err
	}
	return e.toHost(*edits.ContainerEdits)
}

func (e *nvcdiEditor) DeviceEdits(uuid string) (*cdispec.ContainerEdits, error) {
	devs, err := e.lib.GetDeviceSpecsByID(uuid)
	if err != nil {
		return nil, err
	}
	if len(devs) != 1 {
		return nil, fmt.Errorf("NVIDIA CDI library returned %d devices for %s, want 1", len(devs), uuid)
	}
	return e.toHost(devs[0].ContainerEdits)
}

// toHost rewrites paths under the agent's view of the driver root to the
// host's, where the container runtime reads them.
func (e *nvcdiEditor) toHost(edits cdispec.ContainerEdits) (*cdispec.ContainerEdits, error) {
	spec := cdispec.Spec{ContainerEdits: edits}
	if err := e.transform.Transform(&spec); err != nil {
		return nil, fmt.Errorf("rewrite driver root: %w", err)
	}
	return &spec.ContainerEdits, nil
}

// klogAdapter is the logger nvcdi wants.
type klogAdapter struct{}

func (klogAdapter) Debugf(f string, a ...interface{})   { klog.V(5).Infof("nvcdi: "+f, a...) }
func (klogAdapter) Tracef(f string, a ...interface{})   { klog.V(6).Infof("nvcdi: "+f, a...) }
func (klogAdapter) Infof(f string, a ...interface{})    { klog.V(3).Infof("nvcdi: "+f, a...) }
func (klogAdapter) Warningf(f string, a ...interface{}) { klog.V(2).Infof("nvcdi warning: "+f, a...) }
func (klogAdapter) Errorf(f string, a ...interface{})   { klog.Errorf("nvcdi: "+f, a...) }
