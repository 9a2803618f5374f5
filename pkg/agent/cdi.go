package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"

	"github.com/gantry-dev/gantry/pkg/names"
	"k8s.io/apimachinery/pkg/types"
	"tags.cncf.io/container-device-interface/pkg/cdi"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

const (
	// cdiKind is the CDI vendor/class of the devices this agent creates.
	cdiKind = names.DriverName + "/gpu"
	// cdiCommonDevice holds what every container with a Gantry GPU needs
	// whichever GPU it has: driver libraries, control device nodes
	// (nvidiactl, nvidia-uvm, nvidia-uvm-tools), IPC sockets and hooks.
	cdiCommonDevice = "common"
	// CDICommonDeviceID is listed in every prepared device's CDI IDs.
	CDICommonDeviceID = cdiKind + "=" + cdiCommonDevice
)

// Environment variables a container gets for each claim. Variables that
// hold one GPU's value carry the GPU's UUID in their name, so two claims in
// one container do not overwrite each other.
const (
	EnvMemoryBytesPrefix    = "GANTRY_GPU_MEMORY_BYTES_"
	EnvMemoryFractionPrefix = "GANTRY_GPU_MEMORY_FRACTION_"
	// EnvMemoryEnforcedPrefix is "true" when the share's limit is enforced
	// (by the claim's MPS daemon), "false" when it is bookkeeping only.
	EnvMemoryEnforcedPrefix = "GANTRY_GPU_MEMORY_ENFORCED_"
)

// CDIEditor produces the container edits of NVIDIA's container toolkit.
// nvcdiEditor is the real one; it needs NVML.
type CDIEditor interface {
	// CommonEdits are the edits that do not depend on the GPU.
	CommonEdits() (*cdispec.ContainerEdits, error)
	// DeviceEdits are the edits that give a container the GPU or MIG device
	// with this UUID: its device nodes and the hooks that go with them.
	DeviceEdits(uuid string) (*cdispec.ContainerEdits, error)
}

// cdiSpecPath is one spec file per claim; the claim UID makes the name unique
// so that a runtime's cached spec is never mistaken for a new claim's.
func cdiSpecPath(cdiRoot string, claimUID types.UID) string {
	return filepath.Join(cdiRoot, fmt.Sprintf("%s-%s.json", names.DriverName, claimUID))
}

func cdiCommonSpecPath(cdiRoot string) string {
	return filepath.Join(cdiRoot, names.DriverName+"-common.json")
}

func cdiDeviceName(claimUID types.UID, device string) string {
	return fmt.Sprintf("%s-%s", claimUID, device)
}

var notEnvChar = regexp.MustCompile(`[^A-Za-z0-9_]`)

// uuidEnvSuffix turns "GPU-1a2b-..." into "GPU_1A2B_...".
func uuidEnvSuffix(uuid string) string {
	return strings.ToUpper(notEnvChar.ReplaceAllString(uuid, "_"))
}

// deviceEnv is what a container learns about its share of one device.
func deviceEnv(d preparedDevice) []string {
	s := uuidEnvSuffix(d.UUID)
	env := []string{
		EnvMemoryBytesPrefix + s + "=" + strconv.FormatInt(d.MemoryBytes, 10),
		EnvMemoryFractionPrefix + s + "=" + strconv.FormatFloat(fraction(d), 'f', 4, 64),
	}
	if d.isShare() {
		env = append(env, EnvMemoryEnforcedPrefix+s+"="+strconv.FormatBool(d.Enforcement == enforcedByMPS))
	}
	return env
}

func fraction(d preparedDevice) float64 {
	if d.TotalBytes <= 0 {
		return 1
	}
	return float64(d.MemoryBytes) / float64(d.TotalBytes)
}

// claimDeviceEdits merges the toolkit's edits for the device with Gantry's.
func claimDeviceEdits(editor CDIEditor, d preparedDevice, mps *mpsEdits) (cdispec.ContainerEdits, error) {
	if editor == nil {
		return cdispec.ContainerEdits{}, errNoNVML
	}
	edits, err := editor.DeviceEdits(d.UUID)
	if err != nil {
		return cdispec.ContainerEdits{}, fmt.Errorf("CDI edits for %s (%s): %w", d.Device, d.UUID, err)
	}
	out := *edits
	out.Env = append(append([]string(nil), out.Env...), deviceEnv(d)...)
	if mps != nil && d.Enforcement == enforcedByMPS {
		out.Env = append(out.Env, mps.env...)
		out.Mounts = append(out.Mounts, mps.mounts...)
	}
	return out, nil
}

// errNoNVML refuses work that needs the driver while NVML is closed.
var errNoNVML = errors.New("NVML is not available (the NVIDIA driver is absent, being upgraded, or not answering); the claim is prepared once it is back")

// writeClaimSpec writes the spec for one prepared claim: one CDI device per
// allocated GPU or MIG device, holding that device's nodes; shares enforced
// by the claim's MPS daemon also get its client edits (mps).
func writeClaimSpec(cdiRoot string, claimUID types.UID, devs []preparedDevice, editor CDIEditor, mps *mpsEdits) error {
	spec := cdispec.Spec{Kind: cdiKind}
	for _, d := range devs {
		edits, err := claimDeviceEdits(editor, d, mps)
		if err != nil {
			return err
		}
		_, name, _ := strings.Cut(d.CDIDeviceID, "=")
		spec.Devices = append(spec.Devices, cdispec.Device{Name: name, ContainerEdits: edits})
	}
	return writeSpec(cdiSpecPath(cdiRoot, claimUID), &spec)
}

// writeCommonSpec writes the node's common device. It changes when the
// driver does (library versions), so it is rewritten whenever NVML opens.
func writeCommonSpec(cdiRoot string, editor CDIEditor) error {
	edits, err := editor.CommonEdits()
	if err != nil {
		return fmt.Errorf("common CDI edits: %w", err)
	}
	spec := cdispec.Spec{Kind: cdiKind, Devices: []cdispec.Device{{Name: cdiCommonDevice, ContainerEdits: *edits}}}
	return writeSpec(cdiCommonSpecPath(cdiRoot), &spec)
}

// writeSpec validates spec with the CDI library's own rules, sets the oldest
// spec version that expresses it (older runtimes can read it) and writes it
// atomically.
func writeSpec(path string, spec *cdispec.Spec) error {
	sortEdits(spec)
	version, err := cdispec.MinimumRequiredVersion(spec)
	if err != nil {
		return fmt.Errorf("CDI spec version for %s: %w", path, err)
	}
	spec.Version = version
	if err := ValidateCDISpec(spec); err != nil {
		return fmt.Errorf("CDI spec %s is invalid: %w", path, err)
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return fmt.Errorf("encode CDI spec: %w", err)
	}
	if err := writeFileAtomic(path, data); err != nil {
		return fmt.Errorf("write CDI spec: %w", err)
	}
	return nil
}

// ValidateCDISpec checks a spec as a container runtime does when it loads
// it: the CDI library reads it back and runs its full validation (kind,
// version, device names, every container edit).
func ValidateCDISpec(spec *cdispec.Spec) error {
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "gantry-cdi-validate-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	path := filepath.Join(dir, "spec.json")
	if err := os.WriteFile(path, data, 0o600); err != nil {
		return err
	}
	_, err = cdi.ReadSpec(path, 0)
	return err
}

// sortEdits keeps spec files byte-stable for the same input.
func sortEdits(spec *cdispec.Spec) {
	sort.Slice(spec.Devices, func(i, j int) bool { return spec.Devices[i].Name < spec.Devices[j].Name })
}

func removeCDISpec(cdiRoot string, claimUID types.UID) error {
	err := os.Remove(cdiSpecPath(cdiRoot, claimUID))
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("remove CDI spec for claim %s: %w", claimUID, err)
	}
	return nil
}

func cdiSpecExists(cdiRoot string, claimUID types.UID) bool {
	_, err := os.Stat(cdiSpecPath(cdiRoot, claimUID))
	return err == nil
}

// FakeCDIEditor is for fake GPUs (--fake-gpus): there are no device nodes
// or driver files to hand out, so a container learns its fake GPU's UUID
// from GANTRY_FAKE_GPU_<UUID>=1 and nothing else.
type FakeCDIEditor struct{}

func (FakeCDIEditor) CommonEdits() (*cdispec.ContainerEdits, error) {
	return &cdispec.ContainerEdits{Env: []string{"GANTRY_FAKE_GPUS=true"}}, nil
}

func (FakeCDIEditor) DeviceEdits(uuid string) (*cdispec.ContainerEdits, error) {
	return &cdispec.ContainerEdits{Env: []string{"GANTRY_FAKE_GPU_" + uuidEnvSuffix(uuid) + "=1"}}, nil
}
