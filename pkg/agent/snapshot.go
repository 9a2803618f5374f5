package agent

import (
	"sync"

	"github.com/gantry-dev/gantry/gpu"
)

// Snapshot holds the latest GPU inventory for the parts of the agent that
// read it (plugin, status writer, metrics) and tells waiters when it changes.
type Snapshot struct {
	mu      sync.Mutex
	inv     *gpu.Inventory
	changed chan struct{}
}

// NewSnapshot starts with inv.
func NewSnapshot(inv *gpu.Inventory) *Snapshot {
	return &Snapshot{inv: inv, changed: make(chan struct{})}
}

// Get returns the latest inventory. Callers must not modify it.
func (s *Snapshot) Get() *gpu.Inventory {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.inv
}

// Set replaces the inventory and wakes everyone waiting on Changed.
func (s *Snapshot) Set(inv *gpu.Inventory) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.inv = inv
	close(s.changed)
	s.changed = make(chan struct{})
}

// Changed is closed at the next Set.
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
