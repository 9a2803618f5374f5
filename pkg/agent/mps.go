package agent

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"

	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// DefaultMPSRoot is where per-GPU MPS directories are made on the host.
const DefaultMPSRoot = "/run/gantry/mps"

// mpsEdits are what a container needs to be a client of a GPU's MPS daemon.
type mpsEdits struct {
	env    []string
	mounts []*cdispec.Mount
}

// MPSOptions configure the MPS manager.
type MPSOptions struct {
	// Root is a host directory (mounted at the same path in the agent)
	// under which each GPU gets <uuid>/pipe and <uuid>/log.
	Root string
	// Control is the nvidia-cuda-mps-control program as the agent sees it.
	Control string
}

// MPSManager runs one MPS control daemon per GPU that has memory shares,
// and gives each shared claim the client edits: the pipe directory
// mounted at the path the daemon uses, CUDA_MPS_PIPE_DIRECTORY, and the
// claim's pinned device-memory limit.
//
// What it does not do yet (docs/node-agent.md): set the limit daemon-side
// per client (the MPS control interface sets defaults per server, i.e. per
// UID, not per container), so a client that rewrites its own environment
// can exceed its share; and stop daemons when a GPU's last share goes.
type MPSManager struct {
	opts MPSOptions
	run  func(cmd *exec.Cmd) error

	mu      sync.Mutex
	started map[string]bool
}

// NewMPSManager builds a manager; daemons start on first use.
func NewMPSManager(opts MPSOptions) *MPSManager {
	if opts.Root == "" {
		opts.Root = DefaultMPSRoot
	}
	return &MPSManager{opts: opts, run: func(c *exec.Cmd) error { return c.Run() }, started: map[string]bool{}}
}

func (m *MPSManager) dirs(uuid string) (pipe, log string) {
	base := filepath.Join(m.opts.Root, uuid)
	return filepath.Join(base, "pipe"), filepath.Join(base, "log")
}

// Ensure starts the GPU's control daemon unless this agent already did or
// one is listening on its pipe directory (an agent restart).
func (m *MPSManager) Ensure(uuid string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started[uuid] {
		return nil
	}
	pipe, log := m.dirs(uuid)
	for _, d := range []string{pipe, log} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("MPS directory for %s: %w", uuid, err)
		}
	}
	if _, err := os.Stat(filepath.Join(pipe, "control")); err == nil {
		m.started[uuid] = true
		return nil
	}
	cmd := exec.Command(m.opts.Control, "-d")
	cmd.Env = append(os.Environ(),
		"CUDA_VISIBLE_DEVICES="+uuid,
		"CUDA_MPS_PIPE_DIRECTORY="+pipe,
		"CUDA_MPS_LOG_DIRECTORY="+log,
	)
	if err := m.run(cmd); err != nil {
		return fmt.Errorf("start MPS control daemon for %s (%s -d): %w", uuid, m.opts.Control, err)
	}
	m.started[uuid] = true
	return nil
}

// Edits returns the MPS client edits for a prepared device, nil if the
// device is held whole (no share to enforce). It starts the daemon.
func (m *MPSManager) Edits(d preparedDevice) *mpsEdits {
	if d.MemoryBytes >= d.TotalBytes {
		return nil
	}
	pipe, _ := m.dirs(d.UUID)
	return &mpsEdits{
		env: []string{
			"CUDA_MPS_PIPE_DIRECTORY=" + pipe,
			// MPS takes the limit in MiB ("M"); a UUID names the device
			// whatever order the container sees its GPUs in.
			fmt.Sprintf("%s=%s=%dM", EnvMPSMemoryLimit, d.UUID, d.MemoryBytes>>20),
		},
		mounts: []*cdispec.Mount{{HostPath: pipe, ContainerPath: pipe, Options: []string{"rw", "nosuid", "nodev", "bind"}}},
	}
}
