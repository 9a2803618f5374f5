package agent

import (
	"sync"
	"time"

	"github.com/gantry-dev/gantry/gpu"
)

// Staleness says whether the latest inventory is still live. A stale
// inventory is the last good reading, kept for identity (which GPUs the
// node has, which claims sit where) but not to be trusted for live values.
type Staleness struct {
	Stale bool
	// Reason is a CamelCase cause (NVMLUnavailable, NVMLNotAnswering,
	// DriverUpgrade) and Message the detail.
	Reason, Message string
	// Since is when the readings stopped.
	Since time.Time
}

// Snapshot holds the latest GPU inventory for the parts of the agent that
// read it (plugin, status writer, metrics) and tells waiters when it changes.
type Snapshot struct {
	mu      sync.Mutex
	inv     *gpu.Inventory
	stale   Staleness
	changed chan struct{}
}

// NewSnapshot starts with inv, which may be nil (no reading yet).
func NewSnapshot(inv *gpu.Inventory) *Snapshot {
	return &Snapshot{inv: inv, changed: make(chan struct{})}
}

// Get returns the latest inventory (nil before the first reading). Callers
// must not modify it.
func (s *Snapshot) Get() *gpu.Inventory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inv
}

// Staleness returns whether the inventory is stale.
func (s *Snapshot) Staleness() Staleness {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stale
}

// Set replaces the inventory with a live reading and wakes everyone waiting
// on Changed.
func (s *Snapshot) Set(inv *gpu.Inventory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inv = inv
	s.stale = Staleness{}
	s.wake()
}

// SetStale marks the inventory stale; the first call of a stale period
// records when it began.
func (s *Snapshot) SetStale(reason, message string, now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	since := now
	if s.stale.Stale {
		since = s.stale.Since
	}
	if s.stale.Stale && s.stale.Reason == reason && s.stale.Message == message {
		return
	}
	s.stale = Staleness{Stale: true, Reason: reason, Message: message, Since: since}
	s.wake()
}

func (s *Snapshot) wake() {
	close(s.changed)
	s.changed = make(chan struct{})
}

// Changed is closed at the next Set or change of staleness.
func (s *Snapshot) Changed() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.changed
}

// deviceByName finds the GPU published under a ResourceSlice device name.
func deviceByName(inv *gpu.Inventory, name string) (gpu.Device, bool) {
	if inv == nil {
		return gpu.Device{}, false
	}
	for _, d := range inv.Devices {
		if DeviceName(d.Index) == name {
			return d, true
		}
	}
	return gpu.Device{}, false
}

// deviceTarget is what Prepare needs of a published device, GPU or MIG.
type deviceTarget struct {
	UUID           string
	Health         gpu.Health
	ShareableBytes int64
	MIG            bool
}

// lookupDevice finds the GPU or MIG device published under name.
func lookupDevice(inv *gpu.Inventory, name string) (deviceTarget, bool) {
	if inv == nil {
		return deviceTarget{}, false
	}
	for _, d := range inv.Devices {
		if !d.MIG.Enabled && DeviceName(d.Index) == name {
			return deviceTarget{UUID: d.UUID, Health: d.Health, ShareableBytes: ShareableBytes(d.Memory)}, true
		}
		for _, m := range d.MIG.Devices {
			if d.MIG.Enabled && MIGDeviceName(d.Index, m) == name {
				return deviceTarget{UUID: m.UUID, Health: d.Health, ShareableBytes: int64(m.Memory.TotalBytes), MIG: true}, true
			}
		}
	}
	return deviceTarget{}, false
}

// Reasons of a stale inventory (GPUNode Stale condition, stale taint value).
const (
	StaleNVMLUnavailable  = "NVMLUnavailable"
	StaleNVMLNotAnswering = "NVMLNotAnswering"
	StaleDriverUpgrade    = "DriverUpgrade"
)
