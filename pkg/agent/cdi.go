package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	// cdiKind is the CDI vendor/class of the devices this agent creates.
	cdiKind = DriverName + "/gpu"
)

// Environment variables a container gets for each claim.
const (
	EnvVisibleDevices = "NVIDIA_VISIBLE_DEVICES"
	EnvMemoryBytes    = "GANTRY_GPU_MEMORY_BYTES"
	EnvMemoryFraction = "GANTRY_GPU_MEMORY_FRACTION"
	EnvMPSMemoryLimit = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
)

// cdiSpecPath is one spec file per claim; the claim UID makes the name unique
// so that a runtime's cached spec is never mistaken for a new claim's.
func cdiSpecPath(cdiRoot string, claimUID types.UID) string {
	return filepath.Join(cdiRoot, fmt.Sprintf("%s-%s.json", DriverName, claimUID))
}

func cdiDeviceName(claimUID types.UID, device string) string {
	return fmt.Sprintf("%s-%s", claimUID, device)
}

// claimEnv is the environment every container using the claim sees. A claim
// with several GPUs lists them all, because CDI environment edits of several
// devices overwrite each other: each device therefore carries the whole claim.
// Memory values are per GPU: the smallest share among the claim's GPUs.
func claimEnv(devs []preparedDevice, mps bool) []string {
	var uuids []string
	minBytes, minFraction := int64(-1), 1.0
	for _, d := range devs {
		uuids = append(uuids, d.UUID)
		if minBytes < 0 || d.MemoryBytes < minBytes {
			minBytes = d.MemoryBytes
		}
		if f := fraction(d); f < minFraction {
			minFraction = f
		}
	}
	sort.Strings(uuids)
	env := []string{
		EnvVisibleDevices + "=" + strings.Join(uuids, ","),
		EnvMemoryBytes + "=" + strconv.FormatInt(minBytes, 10),
		EnvMemoryFraction + "=" + strconv.FormatFloat(minFraction, 'f', 4, 64),
	}
	if mps {
		var limits []string
		for _, d := range devs {
			// MPS takes the limit in MB (MiB) per device; UUIDs avoid
			// depending on the order in which the container sees its GPUs.
			limits = append(limits, fmt.Sprintf("%s=%dM", d.UUID, d.MemoryBytes>>20))
		}
		sort.Strings(limits)
		env = append(env, EnvMPSMemoryLimit+"="+strings.Join(limits, ","))
	}
	return env
}

func fraction(d preparedDevice) float64 {
	if d.TotalBytes <= 0 {
		return 1
	}
	return float64(d.MemoryBytes) / float64(d.TotalBytes)
}

// writeCDISpec writes the spec for one prepared claim.
func writeCDISpec(cdiRoot string, claimUID types.UID, devs []preparedDevice, mps bool) error {
	spec := cdispec.Spec{Kind: cdiKind}
	env := claimEnv(devs, mps)
	for _, d := range devs {
		_, name, _ := strings.Cut(d.CDIDeviceID, "=")
		spec.Devices = append(spec.Devices, cdispec.Device{
			Name:           name,
			ContainerEdits: cdispec.ContainerEdits{Env: env},
		})
	}
	// The oldest spec version that expresses the spec lets older runtimes read it.
	version, err := cdispec.MinimumRequiredVersion(&spec)
	if err != nil {
		return fmt.Errorf("CDI spec version for claim %s: %w", claimUID, err)
	}
	spec.Version = version
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode CDI spec: %w", err)
	}
	if err := writeFileAtomic(cdiSpecPath(cdiRoot, claimUID), data); err != nil {
		return fmt.Errorf("write CDI spec for claim %s: %w", claimUID, err)
	}
	return nil
}

func removeCDISpec(cdiRoot string, claimUID types.UID) error {
	err := os.Remove(cdiSpecPath(cdiRoot, claimUID))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec for claim %s: %w", claimUID, err)
	}
	return nil
}
