package agent

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/types"
)

// checkpointVersion changes when the file format does; an unknown version is
// an error rather than a silent reset, because losing the record of prepared
// claims would let a GPU be handed out twice.
const checkpointVersion = 1

// checkpoint is what the plugin must remember across restarts: the kubelet
// may unprepare a claim long after it was deleted from the API, and only
// this file says which GPU and share it held.
type checkpoint struct {
	Version int                          `json:"version"`
	Claims  map[types.UID]*preparedClaim `json:"claims"`
}

type preparedClaim struct {
	Namespace string           `json:"namespace"`
	Name      string           `json:"name"`
	Devices   []preparedDevice `json:"devices"`
}

// preparedDevice is one allocation result of a claim on this node.
type preparedDevice struct {
	Requests    []string   `json:"requests"`
	Pool        string     `json:"pool"`
	Device      string     `json:"device"`
	UUID        string     `json:"uuid"`
	ShareID     *types.UID `json:"shareID,omitempty"`
	MemoryBytes int64      `json:"memoryBytes"`
	TotalBytes  int64      `json:"totalBytes"`
	CDIDeviceID string     `json:"cdiDeviceID"`
	// Enforcement says, for a memory share, whether its limit is enforced
	// ("mps" or "not enforced", with EnforcementReason); "" for a device
	// held whole.
	Enforcement       string `json:"enforcement,omitempty"`
	EnforcementReason string `json:"enforcementReason,omitempty"`
}

func newCheckpoint() *checkpoint {
	return &checkpoint{Version: checkpointVersion, Claims: map[types.UID]*preparedClaim{}}
}

// loadCheckpoint reads path; a missing file is an empty checkpoint.
func loadCheckpoint(path string) (*checkpoint, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return newCheckpoint(), nil
	}
	if err != nil {
		return nil, fmt.Errorf("read checkpoint: %w", err)
	}
	cp := newCheckpoint()
	if err := json.Unmarshal(data, cp); err != nil {
		return nil, fmt.Errorf("parse checkpoint %s: %w (move it away only after checking no pod uses its GPUs)", path, err)
	}
	if cp.Version != checkpointVersion {
		return nil, fmt.Errorf("checkpoint %s has version %d, this agent understands %d", path, cp.Version, checkpointVersion)
	}
	if cp.Claims == nil {
		cp.Claims = map[types.UID]*preparedClaim{}
	}
	return cp, nil
}

// save writes the checkpoint atomically, so a crash leaves the old or the
// new content, never a torn file.
func (cp *checkpoint) save(path string) error {
	data, err := json.MarshalIndent(cp, "", "  ")
	if err != nil {
		return fmt.Errorf("encode checkpoint: %w", err)
	}
	return writeFileAtomic(path, data)
}

func writeFileAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	defer os.Remove(tmp.Name()) // no-op after a successful rename
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		return fmt.Errorf("sync %s: %w", path, err)
	}
	if err := tmp.Close(); err != nil {
		return fmt.Errorf("close %s: %w", path, err)
	}
	if err := os.Chmod(tmp.Name(), 0o644); err != nil {
		return fmt.Errorf("chmod %s: %w", path, err)
	}
	if err := os.Rename(tmp.Name(), path); err != nil {
		return fmt.Errorf("replace %s: %w", path, err)
	}
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		d.Close()
	}
	return nil
}
