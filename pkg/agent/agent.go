package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/client-go/kubernetes"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/dynamic-resource-allocation/resourceslice"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/pkg/names"
)

// Config is everything the node agent needs; cmd/node-agent fills it from flags.
type Config struct {
	NodeName   string
	KubeClient kubernetes.Interface
	// NVML is the library, not initialised: the agent calls Init and
	// Shutdown itself (gpu.Library, or a fake fleet).
	NVML nvml.Interface

	// PluginDataDir holds the DRA socket and the checkpoint
	// (default /var/lib/kubelet/plugins/gpu.gantry.dev).
	PluginDataDir string
	// RegistrarDir is where the kubelet looks for plugin registration
	// sockets (default /var/lib/kubelet/plugins_registry).
	RegistrarDir string
	// CDIRoot is where CDI specs go (default /var/run/cdi).
	CDIRoot string
	// CDI says where the driver's files are, for the container toolkit's
	// CDI library.
	CDI CDIOptions
	// NewEditor builds the CDI editor on an open NVML (default
	// NewNVCDIEditor with CDI).
	NewEditor func(nvml.Interface) (CDIEditor, error)
	// MPS, if set, enforces memory shares through MPS daemons.
	MPS *MPSManager
	// ClaimStatus, if set, writes into each claim's status whether its
	// memory shares are enforced (needs update on resourceclaims/status).
	ClaimStatus *ClaimStatusWriter
	// PollInterval is how often the GPUs are read (default 10s).
	PollInterval time.Duration
	// ReadTimeout bounds one reading (default 30s); a reading that takes
	// longer counts as a failure.
	ReadTimeout time.Duration
	// MaxFailures is how many failed readings in a row close NVML so that
	// the next tick initialises it afresh (default 3).
	MaxFailures int
	// InstallDeviceClass creates the gpu.gantry.dev DeviceClass if missing.
	InstallDeviceClass bool
	// WatchNode reads the node's labels every tick to release NVML for
	// driver upgrades.
	WatchNode bool
	// Status writes GPUNode status; nil disables it.
	Status *StatusWriter
	// OnSample, if set, is called after every reading attempt (metrics use it).
	OnSample func(*gpu.Inventory, Staleness)
	// GC collects prepared claims that no longer exist; nil disables it.
	GC *CheckpointGC
}

// Agent is a running node agent.
type Agent struct {
	cfg      Config
	snapshot *Snapshot
	driver   *Driver
	session  *nvmlSession
	failures int
	labels   *nodeLabels

	editorMu sync.Mutex
	editor   CDIEditor
	helper   *kubeletplugin.Helper
}

// Registered reports whether the kubelet has accepted the plugin's
// registration; the liveness probe asks it.
func (a *Agent) Registered() error {
	a.editorMu.Lock()
	h := a.helper
	a.editorMu.Unlock()
	if h == nil {
		return errors.New("DRA kubelet plugin not started")
	}
	st := h.RegistrationStatus()
	if st == nil {
		return errors.New("the kubelet has not registered the plugin yet")
	}
	if !st.PluginRegistered {
		return fmt.Errorf("the kubelet refused the plugin: %s", st.Error)
	}
	return nil
}

// New checks cfg and tries a first reading. The agent starts without
// NVML too: claims can then be unprepared, and its devices are withdrawn
// until NVML answers.
func New(cfg Config) (*Agent, error) {
	if cfg.NodeName == "" || cfg.KubeClient == nil || cfg.NVML == nil {
		return nil, errors.New("node agent needs a node name, a Kubernetes client and NVML")
	}
	if cfg.PluginDataDir == "" {
		cfg.PluginDataDir = kubeletplugin.KubeletPluginsDir + "/" + names.DriverName
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
	if cfg.ReadTimeout <= 0 {
		cfg.ReadTimeout = 30 * time.Second
	}
	if cfg.MaxFailures <= 0 {
		cfg.MaxFailures = 3
	}
	if cfg.NewEditor == nil {
		opts := cfg.CDI
		cfg.NewEditor = func(lib nvml.Interface) (CDIEditor, error) { return NewNVCDIEditor(lib, opts) }
	}
	for _, dir := range []string{cfg.PluginDataDir, cfg.RegistrarDir, cfg.CDIRoot} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, fmt.Errorf("create %s: %w", dir, err)
		}
	}
	a := &Agent{cfg: cfg, snapshot: NewSnapshot(nil),
		session: &nvmlSession{lib: cfg.NVML, tracker: gpu.NewHealthTracker(), timeout: cfg.ReadTimeout}}
	var err error
	a.driver, err = NewDriver(DriverOptions{
		NodeName: cfg.NodeName, PluginDataDir: cfg.PluginDataDir, CDIRoot: cfg.CDIRoot,
		MPS: cfg.MPS, Snapshot: a.snapshot, Editor: a.currentEditor,
		ClaimStatus: cfg.ClaimStatus,
	})
	if err != nil {
		return nil, err
	}
	a.Tick(context.Background())
	return a, nil
}

// Snapshot is the agent's current view of the GPUs.
func (a *Agent) Snapshot() *Snapshot { return a.snapshot }

// Driver is the DRA plugin.
func (a *Agent) Driver() *Driver { return a.driver }

func (a *Agent) currentEditor() CDIEditor {
	a.editorMu.Lock()
	defer a.editorMu.Unlock()
	return a.editor
}

func (a *Agent) setEditor(e CDIEditor) {
	a.editorMu.Lock()
	defer a.editorMu.Unlock()
	a.editor = e
}

// Tick runs one step of the NVML lifecycle: release NVML if the node asks,
// open it if closed, take a reading, and mark the snapshot stale when there
// is no live reading. Run calls it every PollInterval; tests call it directly.
func (a *Agent) Tick(ctx context.Context) {
	logger := klog.FromContext(ctx)
	now := time.Now()
	if a.labels != nil && a.cfg.WatchNode {
		if err := a.labels.refresh(ctx, a.cfg.KubeClient, a.cfg.NodeName); err != nil {
			logger.Error(err, "Cannot check for a driver upgrade; keeping the last labels")
		}
	}
	if a.labels != nil {
		if release, why := ReleaseRequested(a.labels.get()); release {
			if a.session.IsOpen() {
				logger.Info("Releasing NVML", "reason", why)
				a.closeNVML()
			}
			a.snapshot.SetStale(StaleDriverUpgrade, "NVML released: "+why, now)
			return
		}
	}
	if !a.session.IsOpen() {
		if err := a.openNVML(ctx); err != nil {
			a.snapshot.SetStale(StaleNVMLUnavailable, err.Error(), now)
			logger.V(2).Info("NVML unavailable; will retry", "err", err)
			return
		}
	}
	inv, err := a.session.Read()
	if err != nil {
		a.failures++
		a.snapshot.SetStale(StaleNVMLNotAnswering, fmt.Sprintf("%d failed readings in a row: %v", a.failures, err), now)
		logger.Error(err, "Reading GPUs failed", "failures", a.failures)
		if a.failures >= a.cfg.MaxFailures {
			logger.Info("Closing NVML after repeated failures; it is initialised afresh next time")
			a.closeNVML()
		}
		return
	}
	a.failures = 0
	a.snapshot.Set(inv)
}

func (a *Agent) openNVML(ctx context.Context) error {
	logger := klog.FromContext(ctx)
	if err := a.session.Open(ctx, func(err error) {
		// Health then rests on memory-error counters alone.
		logger.Error(err, "XID events unavailable; GPU health comes from ECC and row-remapping counters only")
	}); err != nil {
		return err
	}
	editor, err := a.cfg.NewEditor(a.cfg.NVML)
	if err == nil {
		// The driver may have changed (upgrade): rewrite the common spec.
		err = writeCommonSpec(a.cfg.CDIRoot, editor)
	}
	if err != nil {
		a.session.Close()
		return fmt.Errorf("CDI specs: %w", err)
	}
	a.setEditor(editor)
	a.failures = 0
	return nil
}

func (a *Agent) closeNVML() {
	a.setEditor(nil)
	a.session.Close()
}

// Run serves the kubelet plugin and keeps slices, status and metrics current
// until ctx ends. It returns nil on cancellation.
func (a *Agent) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	defer a.closeNVML()

	driver := a.driver
	driver.opts.OnFatal = cancel

	if a.cfg.InstallDeviceClass {
		if err := EnsureDeviceClass(ctx, a.cfg.KubeClient); err != nil {
			return err
		}
	}
	if a.cfg.WatchNode {
		a.labels = &nodeLabels{}
	}

	helper, err := kubeletplugin.Start(ctx, driver,
		kubeletplugin.DriverName(names.DriverName),
		kubeletplugin.KubeClient(a.cfg.KubeClient),
		kubeletplugin.NodeName(a.cfg.NodeName),
		kubeletplugin.PluginDataDirectoryPath(a.cfg.PluginDataDir),
		kubeletplugin.RegistrarDirectoryPath(a.cfg.RegistrarDir),
	)
	if err != nil {
		return fmt.Errorf("start DRA kubelet plugin: %w", err)
	}
	defer helper.Stop()
	a.editorMu.Lock()
	a.helper = helper
	a.editorMu.Unlock()

	var published *resourceslice.DriverResources
	ticker := time.NewTicker(a.cfg.PollInterval)
	defer ticker.Stop()
	for {
		published = a.publish(ctx, helper, published)
		a.observe(ctx)
		if a.cfg.GC != nil {
			a.cfg.GC.Collect(ctx, driver)
		}
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); cause != nil && !errors.Is(cause, context.Canceled) {
				return cause
			}
			return nil
		case <-ticker.C:
		}
		a.Tick(ctx)
	}
}

// publish republishes the slices when they changed. Slices change only with
// identity, health, MIG layout or staleness; live memory goes to GPUNode
// status, so the scheduler's informers are not churned.
func (a *Agent) publish(ctx context.Context, helper *kubeletplugin.Helper, published *resourceslice.DriverResources) *resourceslice.DriverResources {
	next := BuildResources(a.cfg.NodeName, a.snapshot.Get(), a.snapshot.Staleness())
	if published != nil && equality.Semantic.DeepEqual(next, *published) {
		return published
	}
	if err := helper.PublishResources(ctx, next); err != nil {
		klog.FromContext(ctx).Error(err, "Publishing ResourceSlices failed")
		return published
	}
	klog.FromContext(ctx).Info("Published ResourceSlices", "devices", len(next.Pools[a.cfg.NodeName].Slices[0].Devices))
	return &next
}

func (a *Agent) observe(ctx context.Context) {
	inv, stale := a.snapshot.Get(), a.snapshot.Staleness()
	if a.cfg.OnSample != nil {
		a.cfg.OnSample(inv, stale)
	}
	if a.cfg.Status != nil {
		if err := a.cfg.Status.Observe(ctx, inv, stale); err != nil {
			klog.FromContext(ctx).Error(err, "Writing GPUNode status failed")
		}
	}
}
