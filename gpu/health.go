package gpu

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// applicationXIDs are XIDs that a faulty user program causes (illegal memory
// access, a killed context, ...). The GPU itself is fine afterwards, so they
// must not take it out of service; the NVIDIA device plugin skips the same set.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// xidMeanings describe the critical XIDs operators meet most often.
var xidMeanings = map[uint64]string{
	48:  "double-bit ECC error",
	63:  "row remapping event",
	64:  "row remapping failure",
	74:  "NVLink error",
	79:  "GPU has fallen off the bus",
	92:  "high single-bit ECC error rate",
	94:  "contained ECC error",
	95:  "uncontained ECC error",
	119: "GSP RPC timeout",
	120: "GSP error",
	140: "unrecovered ECC error",
}

// IsCriticalXID reports whether an XID means the GPU itself needs attention.
func IsCriticalXID(xid uint64) bool { return !applicationXIDs[xid] }

// DescribeXID is a one-line description of an XID for health reasons.
func DescribeXID(xid uint64) string {
	if m, ok := xidMeanings[xid]; ok {
		return fmt.Sprintf("xid %d: %s", xid, m)
	}
	return fmt.Sprintf("xid %d", xid)
}

// HealthTracker remembers critical XIDs per GPU. They are sticky for the life
// of the process: a GPU that raised one stays unhealthy until it is reset,
// which restarts the agent's view of it.
type HealthTracker struct {
	mu   sync.Mutex
	xids map[string][]uint64 // critical ones by GPU UUID, in arrival order
	last map[string]uint64   // the last XID of any kind, by GPU UUID
}

// NewHealthTracker returns an empty tracker.
func NewHealthTracker() *HealthTracker {
	return &HealthTracker{xids: map[string][]uint64{}, last: map[string]uint64{}}
}

// RecordXID notes an XID on the GPU with this UUID. Application XIDs are ignored.
func (t *HealthTracker) RecordXID(uuid string, xid uint64) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.last[uuid] = xid
	if !IsCriticalXID(xid) {
		return
	}
	for _, seen := range t.xids[uuid] {
		if seen == xid {
			return
		}
	}
	t.xids[uuid] = append(t.xids[uuid], xid)
}

// Apply merges the recorded XIDs into the health of each device of inv.
func (t *HealthTracker) Apply(inv *Inventory) {
	t.mu.Lock()
	defer t.mu.Unlock()
	for i := range inv.Devices {
		d := &inv.Devices[i]
		d.Health.LastAnyXID = t.last[d.UUID]
		for _, xid := range t.xids[d.UUID] {
			d.Health.State = Unhealthy
			d.Health.Reasons = append(d.Health.Reasons, DescribeXID(xid))
			d.Health.LastXID = xid
		}
	}
}

// WatchXIDs records critical XID events of every GPU in tracker until ctx is
// done. It returns an error only if NVML cannot deliver events at all; GPUs
// that do not support XID events are skipped.
func WatchXIDs(ctx context.Context, lib nvml.Interface, tracker *HealthTracker) error {
	set, ret := lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("create NVML event set: %w", ret)
	}
	defer set.Free()

	count, ret := lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return fmt.Errorf("count GPUs through NVML: %w", ret)
	}
	uuids := map[string]bool{}
	for i := 0; i < count; i++ {
		dev, ret := lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := dev.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		if dev.RegisterEvents(nvml.EventTypeXidCriticalError, set) == nvml.SUCCESS {
			uuids[uuid] = true
		}
	}
	if len(uuids) == 0 {
		return fmt.Errorf("no GPU supports XID events")
	}

	// Wait blocks inside the driver, so it polls with a short timeout to
	// notice cancellation.
	const waitMillis = 1000
	for ctx.Err() == nil {
		ev, ret := set.Wait(waitMillis)
		switch ret {
		case nvml.SUCCESS:
		case nvml.ERROR_TIMEOUT:
			continue
		default:
			// A transient error must not spin the CPU.
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
			continue
		}
		if ev.EventType != nvml.EventTypeXidCriticalError {
			continue
		}
		if ev.Device == nil {
			// The driver could not attribute the XID: every GPU is suspect.
			for uuid := range uuids {
				tracker.RecordXID(uuid, ev.EventData)
			}
			continue
		}
		if uuid, ret := ev.Device.GetUUID(); ret == nvml.SUCCESS {
			tracker.RecordXID(uuid, ev.EventData)
		}
	}
	return nil
}
