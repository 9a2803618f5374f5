package gpu

import (
	"errors"
	"fmt"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
)

// LibraryName is the NVML shared library that the NVIDIA driver installs.
const LibraryName = "libnvidia-ml.so.1"

// ErrNoDriver means the NVML library could not be loaded: there is no NVIDIA
// driver on this machine, or it is not mounted into the container.
var ErrNoDriver = errors.New(LibraryName + " not found: install the NVIDIA driver, or mount it into this container (NVIDIA container toolkit), or run with --fake-gpus")

// Library returns NVML from libraryPath (LibraryName when empty), not yet
// initialized: call Init (see InitError) and Shutdown around its use.
func Library(libraryPath string) nvml.Interface {
	if libraryPath == "" {
		libraryPath = LibraryName
	}
	return nvml.New(nvml.WithLibraryPath(libraryPath))
}

// InitError turns the result of nvml.Init into an error that says what to
// do; nil on success.
func InitError(ret nvml.Return) error {
	switch ret {
	case nvml.SUCCESS:
		return nil
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		return ErrNoDriver
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return errors.New("NVIDIA kernel driver is not loaded: load the nvidia module (modprobe nvidia), wait for the GPU Operator's driver pod, or reboot after installing the driver")
	case nvml.ERROR_NO_PERMISSION:
		return errors.New("no permission to open the NVIDIA devices: give the agent access to /dev/nvidia*")
	default:
		return fmt.Errorf("initialize NVML: %w", ret)
	}
}

// Open loads and initializes NVML from libraryPath (LibraryName when empty).
// The returned function shuts NVML down.
func Open(libraryPath string) (nvml.Interface, func(), error) {
	lib := Library(libraryPath)
	if err := InitError(lib.Init()); err != nil {
		return nil, nil, err
	}
	return lib, func() { _ = lib.Shutdown() }, nil
}
