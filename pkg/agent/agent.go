package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/gpu"
)

// Config is everything the node agent needs; cmd/node-agent fills it from flags.
type Config struct {
	NodeName   string
	KubeClient kubernetes.Interface
	// NVML is an initialized library: gpu.Open, or a fake fleet.
	NVML nvml.Interface

	// PluginDataDir holds the DRA socket and the checkpoint
	// (default /var/lib/kubelet/plugins/gpu.gantry.dev).
	PluginDataDir string
	// RegistrarDir is where the kubelet looks for plugin registration
	// sockets (default /var/lib/kubelet/plugins_registry).
	RegistrarDir string
	// CDIRoot is where CDI specs go (default /var/run/cdi).
	CDIRoot string
	// MPS tells workloads to enforce their memory share through MPS.
	MPS bool
	// PollInterval is how often the GPUs are read (default 10s).
	PollInterval time.Duration
	// InstallDeviceClass creates the gpu.gantry.dev DeviceClass if missing.
	InstallDeviceClass bool
	// Status writes GPUNode status; nil disables it.
	Status *StatusWriter
	// OnSample, if set, is called after every reading (metrics use it).
	OnSample func(*gpu.Inventory)
}

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	tracker  *gpu.HealthTracker
	snapshot *Snapshot
	driver   *Driver
}

// New checks cfg and takes the first reading of the GPUs, so that a broken
// driver fails the agent at start, not later.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" || cfg.KubeClient == nil || cfg.NVML == nil {
		return nil, errors.New("node agent needs a node name, a Kubernetes client and NVML")
	}
	if cfg.PluginDataDir == "" {
		cfg.PluginDataDir = kubeletplugin.KubeletPluginsDir + "/" + DriverName
	}
	if cfg.RegistrarDir == "" {
		cfg.RegistrarDir = kubeletplugin.KubeletRegistryDir
	}
	if cfg.CDIRoot == "" {
		cfg.CDIRoot = kubeletplugin.DefaultCDIDir
	}
	if cfg.PollInterval <= 0 {
		cfg.PollInterval = 10 * time.Second
	}
	for _, dir := range []string{cfg.PluginDataDir, cfg.RegistrarDir, cfg.CDIRoot} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	a := &Agent{cfg: cfg, tracker: gpu.NewHealthTracker()}
	inv, err := a.sample()
	if err != nil {
		return nil, err
	}
	a.snapshot = NewSnapshot(inv)
	a.driver, err = NewDriver(DriverOptions{
		NodeName: cfg.NodeName, PluginDataDir: cfg.PluginDataDir, CDIRoot: cfg.CDIRoot,
		MPS: cfg.MPS, Snapshot: a.snapshot,
	})
	if err != nil {
		return nil, err
	}
	return a, nil
}

// Snapshot is the agent's current view of the GPUs.
func (a *Agent) Snapshot() *Snapshot { return a.snapshot }

// Driver is the DRA plugin.
func (a *Agent) Driver() *Driver { return a.driver }

func (a *Agent) sample() (*gpu.Inventory, error) {
	inv, err := gpu.Discover(a.cfg.NVML)
	if err != nil {
		return nil, fmt.Errorf("read GPUs: %w", err)
	}
	a.tracker.Apply(inv)
	return inv, nil
}

// Run serves the kubelet plugin and keeps slices, status and metrics current
// until ctx ends. It returns nil on cancellation.
func (a *Agent) Run(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)

	driver := a.driver
	driver.opts.OnFatal = cancel

	if a.cfg.InstallDeviceClass {
		if err := EnsureDeviceClass(ctx, a.cfg.KubeClient); err != nil {
			return err
		}
	}

	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(DriverName),
		kubeletplugin.KubeClient(a.cfg.KubeClient),
		kubeletplugin.NodeName(a.cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(a.cfg.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(a.cfg.RegistrarDir),
	)
	if err != nil {
		return fmt.Errorf("start DRA kubelet plugin: %w", err)
	}
	defer helper.Stop()

	inv := a.snapshot.Get()
	published := BuildResources(a.cfg.NodeName, inv)
	if err := helper.PublishResources(ctx, published); err != nil {
		return fmt.Errorf("publish ResourceSlices: %w", err)
	}
	a.observe(ctx, inv)

	go func() {
		if err := gpu.WatchXIDs(ctx, a.cfg.NVML, a.tracker); err != nil {
			// Health then rests on memory-error counters alone.
			logger.Error(err, "XID events unavailable; GPU health comes from ECC and row-remapping counters only")
		}
	}()

	ticker := time.NewTicker(a.cfg.PollInterval)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			return nil
		case <-ticker.C:
		}
		inv, err := a.sample()
		if err != nil {
			logger.Error(err, "Reading GPUs failed; keeping the last reading")
			continue
		}
		a.snapshot.Set(inv)
		// Slices change only with identity, health or MIG mode; live memory
		// goes to GPUNode status, so the scheduler's informers are not churned.
		if next := BuildResources(a.cfg.NodeName, inv); !equality.Semantic.DeepEqual(next, published) {
			if err := helper.PublishResources(ctx, next); err != nil {
				logger.Error(err, "Republishing ResourceSlices failed")
			} else {
				published = next
				logger.Info("Republished ResourceSlices", "devices", len(next.Pools[a.cfg.NodeName].Slices[0].Devices))
			}
		}
		a.observe(ctx, inv)
	}
}

func (a *Agent) observe(ctx context.Context, inv *gpu.Inventory) {
	if a.cfg.OnSample != nil {
		a.cfg.OnSample(inv)
	}
	if a.cfg.Status != nil {
		if err := a.cfg.Status.Observe(ctx, inv); err != nil {
			klog.FromContext(ctx).Error(err, "Writing GPUNode status failed")
		}
	}
}
