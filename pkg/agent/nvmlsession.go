package agent

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/dynamic-resource-allocation/deviceattribute"

	"github.com/gantry-dev/gantry/gpu"
)

// nvmlSession owns the agent's use of NVML: it initialises the library,
// reads the GPUs with a deadline, and shuts it down when asked to release
// the driver (an upgrade) or when readings keep failing (it then starts a
// fresh session). While it is closed the agent holds no handle on the
// driver: no open /dev/nvidia* file, no event set.
type nvmlSession struct {
	lib     nvml.Interface
	tracker *gpu.HealthTracker
	timeout time.Duration

	mu       sync.Mutex
	open     bool
	inflight bool // a reading that timed out has not returned yet
	stopXID  context.CancelFunc
	xidDone  chan struct{}

	// pcieRoot finds a PCI device's root complex in sysfs (NVML cannot);
	// nil uses deviceattribute on this machine's /sys.
	pcieRoot func(busID string) (string, error)
	roots    map[string]string
}

// fillPCIeRoots sets each GPU's PCIe root, as NVIDIA's DRA driver publishes
// it (resource.kubernetes.io/pcieRoot); unknown roots stay empty.
func (s *nvmlSession) fillPCIeRoots(inv *gpu.Inventory) {
	lookup := s.pcieRoot
	if lookup == nil {
		lookup = sysfsPCIeRoot
	}
	if s.roots == nil {
		s.roots = map[string]string{}
	}
	for i := range inv.Devices {
		d := &inv.Devices[i]
		if d.PCIBusID == "" {
			continue
		}
		root, ok := s.roots[d.PCIBusID]
		if !ok {
			root, _ = lookup(d.PCIBusID)
			s.roots[d.PCIBusID] = root
		}
		d.PCIeRoot = root
	}
}

func sysfsPCIeRoot(busID string) (string, error) {
	a, err := deviceattribute.GetPCIeRootAttributeByPCIBusID(busID)
	if err != nil || a.Value.StringValue == nil {
		return "", err
	}
	return *a.Value.StringValue, nil
}

var errReadingStuck = errors.New("an earlier NVML call has not returned: the driver does not answer")

// Open initialises NVML and starts the XID watcher; a no-op if open.
func (s *nvmlSession) Open(ctx context.Context, onXIDError func(error)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.open {
		return nil
	}
	if s.inflight {
		return errReadingStuck
	}
	if err := gpu.InitError(s.lib.Init()); err != nil {
		return err
	}
	s.open = true
	xctx, cancel := context.WithCancel(ctx)
	s.stopXID, s.xidDone = cancel, make(chan struct{})
	go func(done chan struct{}) {
		defer close(done)
		if err := gpu.WatchXIDs(xctx, s.lib, s.tracker); err != nil && onXIDError != nil {
			onXIDError(err)
		}
	}(s.xidDone)
	return nil
}

// IsOpen reports whether NVML is initialised by this session.
func (s *nvmlSession) IsOpen() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.open
}

// Close stops the XID watcher and shuts NVML down, so that the driver can
// be unloaded. A reading stuck in the driver keeps its goroutine; the
// library is shut down regardless.
func (s *nvmlSession) Close() {
	s.mu.Lock()
	if !s.open {
		s.mu.Unlock()
		return
	}
	s.open = false
	stop, done := s.stopXID, s.xidDone
	s.mu.Unlock()
	stop()
	// WatchXIDs waits at most a second inside the driver between checks.
	select {
	case <-done:
	case <-time.After(5 * time.Second):
	}
	_ = s.lib.Shutdown()
}

// Read takes one reading within the session's timeout.
func (s *nvmlSession) Read() (*gpu.Inventory, error) {
	s.mu.Lock()
	if !s.open {
		s.mu.Unlock()
		return nil, errors.New("NVML is not initialised")
	}
	if s.inflight {
		s.mu.Unlock()
		return nil, errReadingStuck
	}
	s.inflight = true
	s.mu.Unlock()

	type result struct {
		inv *gpu.Inventory
		err error
	}
	done := make(chan result, 1)
	go func() {
		inv, err := gpu.Discover(s.lib)
		s.mu.Lock()
		s.inflight = false
		s.mu.Unlock()
		done <- result{inv, err}
	}()
	select {
	case r := <-done:
		if r.err != nil {
			return nil, fmt.Errorf("read GPUs: %w", r.err)
		}
		s.tracker.Apply(r.inv)
		s.fillPCIeRoots(r.inv)
		return r.inv, nil
	case <-time.After(s.timeout):
		return nil, fmt.Errorf("NVML did not answer within %s", s.timeout)
	}
}
