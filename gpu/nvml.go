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

// Open loads and initializes NVML from libraryPath (LibraryName when empty).
// The returned function shuts NVML down.
func Open(libraryPath string) (nvml.Interface, func(), error) {
	if libraryPath == "" {
		libraryPath = LibraryName
	}
	lib := nvml.New(nvml.WithLibraryPath(libraryPath))
	switch ret := lib.Init(); ret {
	case nvml.SUCCESS:
	case nvml.ERROR_LIBRARY_NOT_FOUND:
		if libraryPath != LibraryName {
			return nil, nil, fmt.Errorf("load %s: %w", libraryPath, ErrNoDriver)
		}
		return nil, nil, ErrNoDriver
	case nvml.ERROR_DRIVER_NOT_LOADED:
		return nil, nil, errors.New("NVIDIA kernel driver is not loaded: load the nvidia module (modprobe nvidia) or reboot after installing the driver")
	case nvml.ERROR_NO_PERMISSION:
		return nil, nil, errors.New("no permission to open the NVIDIA devices: run the agent privileged or with access to /dev/nvidia*")
	default:
		return nil, nil, fmt.Errorf("initialize NVML: %w", ret)
	}
	return lib, func() { _ = lib.Shutdown() }, nil
}
