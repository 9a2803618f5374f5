package fake

import (
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// DriverState is what the fleet's driver does, for tests of the agent's
// NVML lifecycle.
type DriverState int

const (
	// DriverUp answers every call.
	DriverUp DriverState = iota
	// DriverGone has no kernel module loaded (a driver upgrade in progress):
	// Init answers ERROR_DRIVER_NOT_LOADED and device calls ERROR_UNINITIALIZED.
	DriverGone
	// DriverHung blocks every device call until the state changes, as a
	// wedged driver does.
	DriverHung
)

// lifecycle tracks Init/Shutdown and the injected driver state.
type lifecycle struct {
	mu      sync.Mutex
	state   DriverState
	inits   int // balance of successful Init and Shutdown calls
	wake    chan struct{}
	initsOK int
	strict  bool
}

// RequireInit makes device calls fail with ERROR_UNINITIALIZED unless NVML
// is initialised, as the real library does. Off by default, so that tests
// of discovery alone need not Init.
func (f *Fleet) RequireInit() {
	f.life.mu.Lock()
	defer f.life.mu.Unlock()
	f.life.strict = true
}

// SetDriverState changes what the driver does from now on. Calls blocked by
// DriverHung return (with ERROR_GPU_IS_LOST) once the state changes.
func (f *Fleet) SetDriverState(s DriverState) {
	f.life.mu.Lock()
	defer f.life.mu.Unlock()
	f.life.state = s
	if f.life.wake != nil {
		close(f.life.wake)
		f.life.wake = nil
	}
}

// OpenCount is the number of NVML Init calls not yet matched by Shutdown:
// how many holders keep the driver busy.
func (f *Fleet) OpenCount() int {
	f.life.mu.Lock()
	defer f.life.mu.Unlock()
	return f.life.inits
}

// InitCount is the number of successful Init calls so far.
func (f *Fleet) InitCount() int {
	f.life.mu.Lock()
	defer f.life.mu.Unlock()
	return f.life.initsOK
}

func (f *Fleet) installLifecycle() {
	f.InitFunc = func() nvml.Return {
		f.life.mu.Lock()
		defer f.life.mu.Unlock()
		if f.life.state == DriverGone {
			return nvml.ERROR_DRIVER_NOT_LOADED
		}
		f.life.inits++
		f.life.initsOK++
		return nvml.SUCCESS
	}
	f.ShutdownFunc = func() nvml.Return {
		f.life.mu.Lock()
		defer f.life.mu.Unlock()
		if f.life.inits == 0 {
			return nvml.ERROR_UNINITIALIZED
		}
		f.life.inits--
		return nvml.SUCCESS
	}
	inner := f.DeviceGetCountFunc
	f.DeviceGetCountFunc = func() (int, nvml.Return) {
		if ret := f.gate(); ret != nvml.SUCCESS {
			return 0, ret
		}
		return inner()
	}
	innerH := f.DeviceGetHandleByIndexFunc
	f.DeviceGetHandleByIndexFunc = func(i int) (nvml.Device, nvml.Return) {
		if ret := f.gate(); ret != nvml.SUCCESS {
			return nil, ret
		}
		return innerH(i)
	}
}

// gate applies the driver state to a call: ERROR_UNINITIALIZED when NVML
// is not initialised or the driver is gone, a block while it is hung.
func (f *Fleet) gate() nvml.Return {
	f.life.mu.Lock()
	switch {
	case f.life.state == DriverGone:
		f.life.mu.Unlock()
		return nvml.ERROR_DRIVER_NOT_LOADED
	case f.life.state == DriverHung:
		if f.life.wake == nil {
			f.life.wake = make(chan struct{})
		}
		wake := f.life.wake
		f.life.mu.Unlock()
		<-wake
		return nvml.ERROR_GPU_IS_LOST
	case f.life.strict && f.life.inits == 0:
		f.life.mu.Unlock()
		return nvml.ERROR_UNINITIALIZED
	}
	f.life.mu.Unlock()
	return nvml.SUCCESS
}
