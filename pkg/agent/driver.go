package agent

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	resourceapi "k8s.io/api/resource/v1"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/pkg/names"
)

// CheckpointFile is the name of the checkpoint inside the plugin data directory.
const CheckpointFile = "checkpoint.json"

// healthResend is how often health is re-sent unchanged; the kubelet treats
// health older than 30 s as unknown.
const healthResend = 10 * time.Second

// DriverOptions configure a Driver.
type DriverOptions struct {
	// NodeName is the node, and the name of the node's device pool.
	NodeName string
	// PluginDataDir holds the checkpoint (the kubelet plugin directory).
	PluginDataDir string
	// CDIRoot is where CDI spec files are written, e.g. /var/run/cdi.
	CDIRoot string
	// MPS, if set, enforces memory shares: each claim holding shares gets
	// an MPS daemon with its limits, and its containers the client edits.
	MPS *MPSManager
	// ClaimStatus, if set, says in each claim's status whether its memory
	// shares are enforced.
	ClaimStatus *ClaimStatusWriter
	// Editor returns the NVIDIA CDI editor, or nil while NVML is closed
	// (then claims can be unprepared but not newly prepared).
	Editor func() CDIEditor
	// Snapshot supplies the current GPUs.
	Snapshot *Snapshot
	// OnFatal is called with errors after which the agent must stop.
	OnFatal func(error)
}

// Driver is the gpu.gantry.dev DRA kubelet plugin: it prepares claims the
// scheduler allocated on this node's GPUs, and reports their health.
// Prepare and Unprepare are idempotent and survive restarts through a
// checkpoint file.
type Driver struct {
	opts           DriverOptions
	checkpointPath string

	mu sync.Mutex
	cp *checkpoint
}

var _ kubeletplugin.DRAPlugin = (*Driver)(nil)

// NewDriver loads the checkpoint left by an earlier run.
func NewDriver(opts DriverOptions) (*Driver, error) {
	if opts.NodeName == "" || opts.PluginDataDir == "" || opts.CDIRoot == "" || opts.Snapshot == nil || opts.Editor == nil {
		return nil, errors.New("DRA driver needs a node name, a plugin data directory, a CDI root, a snapshot and a CDI editor")
	}
	path := filepath.Join(opts.PluginDataDir, CheckpointFile)
	cp, err := loadCheckpoint(path)
	if err != nil {
		return nil, err
	}
	d := &Driver{opts: opts, checkpointPath: path, cp: cp}
	d.restartMPS()
	return d, nil
}

// restartMPS starts again the daemons of claims prepared before a restart
// (a container restart ends the agent's children), so that their clients'
// next processes find them. A failure is logged: the claim stays prepared.
func (d *Driver) restartMPS() {
	if d.opts.MPS == nil {
		return
	}
	for uid, c := range d.cp.Claims {
		var shares []mpsShare
		for _, pd := range c.Devices {
			if pd.Enforcement == enforcedByMPS {
				shares = append(shares, mpsShare{UUID: pd.UUID, Bytes: pd.MemoryBytes})
			}
		}
		if err := d.opts.MPS.Start(uid, shares); err != nil {
			klog.ErrorS(err, "Restarting the MPS daemon of a prepared claim", "claim", klog.KRef(c.Namespace, c.Name))
		}
	}
}

// PrepareResourceClaims implements kubeletplugin.DRAPlugin.
func (d *Driver) PrepareResourceClaims(ctx context.Context, claims []*resourceapi.ResourceClaim) (map[types.UID]kubeletplugin.PrepareResult, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	inv := d.opts.Snapshot.Get()
	results := make(map[types.UID]kubeletplugin.PrepareResult, len(claims))
	var added []types.UID
	var fresh []*resourceapi.ResourceClaim
	for _, claim := range claims {
		devs, isFresh, err := d.prepareClaim(claim, inv)
		if err != nil {
			results[claim.UID] = kubeletplugin.PrepareResult{Err: fmt.Errorf("prepare claim %s/%s: %w", claim.Namespace, claim.Name, err)}
			continue
		}
		if isFresh {
			added = append(added, claim.UID)
			fresh = append(fresh, claim)
		}
		results[claim.UID] = kubeletplugin.PrepareResult{Devices: resultDevices(devs)}
	}
	if len(added) > 0 {
		if err := d.cp.save(d.checkpointPath); err != nil {
			// Unrecorded claims must not count as prepared; the kubelet retries.
			for _, uid := range added {
				delete(d.cp.Claims, uid)
				_ = removeCDISpec(d.opts.CDIRoot, uid)
				if d.opts.MPS != nil {
					_ = d.opts.MPS.Stop(uid)
				}
			}
			return nil, err
		}
	}
	for _, claim := range fresh {
		d.reportShares(ctx, claim, d.cp.Claims[claim.UID].Devices)
	}
	return results, nil
}

// prepareClaim returns the claim's devices on this node; fresh is false when
// the claim was already prepared (a kubelet retry or restart).
func (d *Driver) prepareClaim(claim *resourceapi.ResourceClaim, inv *gpu.Inventory) ([]preparedDevice, bool, error) {
	if existing, ok := d.cp.Claims[claim.UID]; ok {
		// The CDI spec may be gone (tmpfs /var/run after a reboot); recreate it.
		if !cdiSpecExists(d.opts.CDIRoot, claim.UID) {
			if err := d.writeSpecs(claim.UID, existing.Devices); err != nil {
				return nil, false, err
			}
		}
		return existing.Devices, false, nil
	}
	if claim.Status.Allocation == nil {
		return nil, false, errors.New("claim is not allocated")
	}
	cfg, err := shareConfig(claim)
	if err != nil {
		return nil, false, err
	}
	var devs []preparedDevice
	for _, r := range claim.Status.Allocation.Devices.Results {
		if r.Driver != names.DriverName {
			continue
		}
		pd, err := d.prepareResult(claim.UID, r, inv)
		if err != nil {
			return nil, false, err
		}
		devs = append(devs, pd)
	}
	if err := d.checkCapacity(claim.UID, devs); err != nil {
		return nil, false, err
	}
	if err := d.enforceShares(claim, cfg, devs); err != nil {
		return nil, false, err
	}
	if err := d.writeSpecs(claim.UID, devs); err != nil {
		if d.opts.MPS != nil {
			_ = d.opts.MPS.Stop(claim.UID)
		}
		return nil, false, err
	}
	d.cp.Claims[claim.UID] = &preparedClaim{Namespace: claim.Namespace, Name: claim.Name, Devices: devs}
	return devs, true, nil
}

// writeSpecs writes the claim's spec, and the node's common spec if it is
// missing. Both need NVML.
func (d *Driver) writeSpecs(claimUID types.UID, devs []preparedDevice) error {
	editor := d.opts.Editor()
	if editor == nil {
		return errNoNVML
	}
	if _, err := os.Stat(cdiCommonSpecPath(d.opts.CDIRoot)); err != nil {
		if err := writeCommonSpec(d.opts.CDIRoot, editor); err != nil {
			return err
		}
	}
	var mps *mpsEdits
	if d.opts.MPS != nil {
		mps = d.opts.MPS.Edits(claimUID)
	}
	return writeClaimSpec(d.opts.CDIRoot, claimUID, devs, editor, mps)
}

func (d *Driver) prepareResult(claimUID types.UID, r resourceapi.DeviceRequestAllocationResult, inv *gpu.Inventory) (preparedDevice, error) {
	if r.Pool != d.opts.NodeName {
		return preparedDevice{}, fmt.Errorf("device %s is in pool %q, but this is node %q", r.Device, r.Pool, d.opts.NodeName)
	}
	t, ok := lookupDevice(inv, r.Device)
	if !ok {
		return preparedDevice{}, fmt.Errorf("device %s does not exist on node %s", r.Device, d.opts.NodeName)
	}
	if t.Health.State == gpu.Unhealthy {
		return preparedDevice{}, fmt.Errorf("GPU %s (%s) is unhealthy: %s", r.Device, t.UUID, strings.Join(t.Health.Reasons, "; "))
	}
	total := t.ShareableBytes
	memory := total
	if q, ok := r.ConsumedCapacity[MemoryCapacity]; ok {
		memory = q.Value()
	}
	if memory <= 0 || memory > total {
		return preparedDevice{}, fmt.Errorf("memory share %d bytes on %s is outside 1..%d", memory, r.Device, total)
	}
	name := cdiDeviceName(claimUID, r.Device)
	if r.ShareID != nil {
		name += "-" + string(*r.ShareID)
	}
	return preparedDevice{
		Requests:    []string{r.Request},
		Pool:        r.Pool,
		Device:      r.Device,
		UUID:        t.UUID,
		ShareID:     r.ShareID,
		MemoryBytes: memory,
		TotalBytes:  total,
		CDIDeviceID: cdiKind + "=" + name,
	}, nil
}

// checkCapacity is the last line of defence against a GPU handed out twice:
// the shares prepared on a GPU must fit in its memory, and a whole-GPU
// claim takes all of it.
func (d *Driver) checkCapacity(claimUID types.UID, devs []preparedDevice) error {
	type booking struct {
		bytes  int64
		claims []string
	}
	booked := map[string]*booking{}
	for uid, c := range d.cp.Claims {
		if uid == claimUID {
			continue
		}
		for _, pd := range c.Devices {
			b := booked[pd.UUID]
			if b == nil {
				b = &booking{}
				booked[pd.UUID] = b
			}
			b.bytes += pd.MemoryBytes
			b.claims = append(b.claims, c.Namespace+"/"+c.Name)
		}
	}
	asked := map[string]int64{}
	for _, pd := range devs {
		asked[pd.UUID] += pd.MemoryBytes
		b := booked[pd.UUID]
		if b == nil {
			b = &booking{}
		}
		if b.bytes+asked[pd.UUID] > pd.TotalBytes {
			sort.Strings(b.claims)
			return fmt.Errorf("GPU %s (%s) would be over-committed: %d of %d bytes are prepared for %s, the claim asks %d more",
				pd.Device, pd.UUID, b.bytes, pd.TotalBytes, strings.Join(b.claims, ", "), asked[pd.UUID])
		}
	}
	return nil
}

func resultDevices(devs []preparedDevice) []kubeletplugin.Device {
	out := make([]kubeletplugin.Device, 0, len(devs))
	for _, pd := range devs {
		out = append(out, kubeletplugin.Device{
			Requests:     pd.Requests,
			PoolName:     pd.Pool,
			DeviceName:   pd.Device,
			CDIDeviceIDs: []string{CDICommonDeviceID, pd.CDIDeviceID},
			ShareID:      pd.ShareID,
		})
	}
	return out
}

// UnprepareResourceClaims implements kubeletplugin.DRAPlugin. Claims that
// are not prepared are not an error: the kubelet may ask twice.
func (d *Driver) UnprepareResourceClaims(ctx context.Context, claims []kubeletplugin.NamespacedObject) (map[types.UID]error, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	results := make(map[types.UID]error, len(claims))
	removed := map[types.UID]*preparedClaim{}
	for _, c := range claims {
		if err := removeCDISpec(d.opts.CDIRoot, c.UID); err != nil {
			results[c.UID] = err
			continue
		}
		if d.opts.MPS != nil {
			// The pod is gone, so are the daemon's clients. A daemon that
			// does not answer is orphaned, not a reason to keep the claim.
			if err := d.opts.MPS.Stop(c.UID); err != nil {
				klog.FromContext(ctx).Error(err, "Stopping the MPS daemon of an unprepared claim", "claim", c.NamespacedName)
			}
		}
		if pc, ok := d.cp.Claims[c.UID]; ok {
			removed[c.UID] = pc
			delete(d.cp.Claims, c.UID)
		}
		results[c.UID] = nil
	}
	if len(removed) > 0 {
		if err := d.cp.save(d.checkpointPath); err != nil {
			for uid, pc := range removed {
				d.cp.Claims[uid] = pc
			}
			return nil, err
		}
	}
	return results, nil
}

// Allocation is one claim's share of one GPU, as prepared on this node.
type Allocation struct {
	ClaimNamespace, ClaimName string
	ClaimUID                  types.UID
	Device, UUID              string
	MemoryBytes, TotalBytes   int64
}

// Allocations lists the prepared shares, ordered by GPU and claim.
func (d *Driver) Allocations() []Allocation {
	d.mu.Lock()
	defer d.mu.Unlock()
	var out []Allocation
	for uid, c := range d.cp.Claims {
		for _, pd := range c.Devices {
			out = append(out, Allocation{ClaimNamespace: c.Namespace, ClaimName: c.Name, ClaimUID: uid,
				Device: pd.Device, UUID: pd.UUID, MemoryBytes: pd.MemoryBytes, TotalBytes: pd.TotalBytes})
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].UUID != out[j].UUID {
			return out[i].UUID < out[j].UUID
		}
		return out[i].ClaimUID < out[j].ClaimUID
	})
	return out
}

// HandleError implements kubeletplugin.DRAPlugin. Publishing errors are
// recoverable (the controller retries); anything else stops the agent so
// that its DaemonSet restarts it.
func (d *Driver) HandleError(ctx context.Context, err error, msg string) {
	utilruntime.HandleErrorWithContext(ctx, err, msg)
	if !errors.Is(err, kubeletplugin.ErrRecoverable) && d.opts.OnFatal != nil {
		d.opts.OnFatal(fmt.Errorf("%s: %w", msg, err))
	}
}

// WatchHealthStatus implements kubeletplugin.DRAPlugin: a report at once,
// on every inventory change, and every healthResend otherwise.
func (d *Driver) WatchHealthStatus(ctx context.Context, reports chan<- kubeletplugin.DeviceHealthReport) error {
	logger := klog.FromContext(ctx)
	for {
		changed := d.opts.Snapshot.Changed()
		report := d.healthReport()
		select {
		case <-ctx.Done():
			return nil
		case reports <- report:
		}
		select {
		case <-ctx.Done():
			return nil
		case <-changed:
		case <-time.After(healthResend):
		}
		logger.V(6).Info("Re-sending device health")
	}
}

func (d *Driver) healthReport() kubeletplugin.DeviceHealthReport {
	inv, stale := d.opts.Snapshot.Get(), d.opts.Snapshot.Staleness()
	var report kubeletplugin.DeviceHealthReport
	if inv == nil {
		return report
	}
	for _, pd := range publishedDevices(inv) {
		g := pd.gpu
		h := kubeletplugin.DeviceHealth{
			PoolName:           d.opts.NodeName,
			DeviceName:         pd.name,
			LastUpdated:        inv.SampledAt,
			HealthCheckTimeout: 3 * healthResend,
			Message:            strings.Join(g.Health.Reasons, "; "),
		}
		switch {
		case stale.Stale:
			// A last reading says nothing about the GPU now.
			h.Health = kubeletplugin.HealthStatusUnknown
			h.Message = "no live reading: " + stale.Message
		case g.Health.State == gpu.Healthy:
			h.Health = kubeletplugin.HealthStatusHealthy
		case g.Health.State == gpu.Unhealthy:
			h.Health = kubeletplugin.HealthStatusUnhealthy
		default:
			h.Health = kubeletplugin.HealthStatusUnknown
		}
		report.Devices = append(report.Devices, h)
	}
	return report
}

// publishedDevice is a device name of the slice and the GPU behind it (the
// parent, for a MIG device).
type publishedDevice struct {
	name string
	gpu  gpu.Device
}

func publishedDevices(inv *gpu.Inventory) []publishedDevice {
	var out []publishedDevice
	for _, g := range inv.Devices {
		if !g.MIG.Enabled {
			out = append(out, publishedDevice{DeviceName(g.Index), g})
			continue
		}
		for _, m := range g.MIG.Devices {
			out = append(out, publishedDevice{MIGDeviceName(g.Index, m), g})
		}
	}
	return out
}
