package agent

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"k8s.io/apimachinery/pkg/types"
	cdispec "tags.cncf.io/container-device-interface/specs-go"
)

// DefaultMPSRoot is where per-claim MPS directories are made on the host.
// /run is a tmpfs on the hosts the GPU Operator supports, so the shm
// directories below it are memory, as /dev/shm is.
const DefaultMPSRoot = "/run/gantry/mps"

// Where a client container finds its MPS daemon. The pipe directory is
// mounted at MPS's default, so a process that drops CUDA_MPS_PIPE_DIRECTORY
// from its environment still finds the daemon.
const (
	mpsContainerPipeDir = "/tmp/nvidia-mps"
	mpsContainerShmDir  = "/dev/shm"
)

// mpsEdits are what a container needs to be a client of its claim's daemon.
type mpsEdits struct {
	env    []string
	mounts []*cdispec.Mount
}

// MPSOptions configure the MPS manager.
type MPSOptions struct {
	// Root is a host directory (mounted at the same path in the agent)
	// under which each claim with shares gets <claim UID>/{pipe,shm,log}.
	Root string
	// Control is the nvidia-cuda-mps-control program as the agent sees it.
	Control string
	// BindShm runs each control daemon in a mount namespace of its own
	// whose /dev/shm is the claim's shm directory, the one its clients get
	// (MPS clients and their server share memory there). It needs
	// CAP_SYS_ADMIN and util-linux's unshare; without it the daemon shares
	// the agent's /dev/shm, which the clients do not see.
	BindShm bool
}

// mpsShare is one GPU of a claim and the memory the claim may pin on it.
type mpsShare struct {
	UUID  string
	Bytes int64
}

// MPSManager enforces memory shares with NVIDIA's Multi-Process Service,
// after the design of NVIDIA's DRA driver: every claim that holds memory
// shares gets a control daemon of its own, serving only the claim's GPUs
// (CUDA_VISIBLE_DEVICES), whose default pinned device-memory limit on each
// GPU is set, daemon-side, to the claim's share before any client starts.
// Its containers get the daemon's pipe and shm directories through CDI.
//
// One daemon per claim rather than one per GPU: MPS gives each Unix user one
// server, and a limit belongs to a server, so a single daemon per GPU could
// not hold two limits for two containers running as the same user (root,
// mostly); several daemons on one GPU need the GPU's compute mode to stay
// DEFAULT. MPS limits each client process: a claim's two processes may
// each pin up to the share.
type MPSManager struct {
	opts MPSOptions
	// control runs the control program; tests may replace it.
	control func(env []string, stdin string, args ...string) (string, error)

	mu sync.Mutex
}

// NewMPSManager builds a manager; daemons start when claims are prepared.
func NewMPSManager(opts MPSOptions) *MPSManager {
	if opts.Root == "" {
		opts.Root = DefaultMPSRoot
	}
	m := &MPSManager{opts: opts}
	m.control = m.runControl
	return m
}

func (m *MPSManager) runControl(env []string, stdin string, args ...string) (string, error) {
	name, argv := m.opts.Control, args
	if m.opts.BindShm && len(args) > 0 && args[0] == "-d" {
		// unshare keeps the new namespace for the daemon it execs; the
		// daemon forks its servers inside it.
		shm := envValue(env, "GANTRY_MPS_SHM_DIRECTORY")
		name = "unshare"
		argv = []string{"--mount", "--propagation", "private", "--", "sh", "-c",
			`mount --bind "$0" /dev/shm && exec "$1" -d`, shm, m.opts.Control}
	}
	cmd := exec.Command(name, argv...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stdin = strings.NewReader(stdin)
	if len(args) > 0 && args[0] == "-d" {
		// The daemon may keep its output open: a file, not a pipe that
		// Run would wait on until the daemon ends.
		f, err := os.CreateTemp(envValue(env, "CUDA_MPS_LOG_DIRECTORY"), "start-*.log")
		if err != nil {
			return "", err
		}
		defer os.Remove(f.Name())
		defer f.Close()
		cmd.Stdout, cmd.Stderr = f, f
		err = cmd.Run()
		out, _ := os.ReadFile(f.Name())
		return strings.TrimSpace(string(out)), err
	}
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	return strings.TrimSpace(out.String()), err
}

func envValue(env []string, key string) string {
	for _, kv := range env {
		if k, v, ok := strings.Cut(kv, "="); ok && k == key {
			return v
		}
	}
	return ""
}

type mpsDirs struct{ root, pipe, shm, log string }

func (m *MPSManager) dirs(claimUID types.UID) mpsDirs {
	root := filepath.Join(m.opts.Root, string(claimUID))
	return mpsDirs{root: root, pipe: filepath.Join(root, "pipe"), shm: filepath.Join(root, "shm"), log: filepath.Join(root, "log")}
}

// Start runs the claim's control daemon unless it is already running (a
// kubelet retry or an agent restart), then sets its limit on each GPU.
// Setting a limit again is harmless, so a restart after a crash between
// the two steps still ends with every limit set.
func (m *MPSManager) Start(claimUID types.UID, shares []mpsShare) error {
	if len(shares) == 0 {
		return nil
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dirs(claimUID)
	for _, dir := range []string{d.pipe, d.shm, d.log} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("MPS directory for claim %s: %w", claimUID, err)
		}
	}
	uuids := make([]string, 0, len(shares))
	for _, s := range shares {
		uuids = append(uuids, s.UUID)
	}
	sort.Strings(uuids)
	env := []string{
		"CUDA_VISIBLE_DEVICES=" + strings.Join(uuids, ","),
		"CUDA_MPS_PIPE_DIRECTORY=" + d.pipe,
		"CUDA_MPS_LOG_DIRECTORY=" + d.log,
		"GANTRY_MPS_SHM_DIRECTORY=" + d.shm,
	}
	if !m.running(d) {
		if out, err := m.control(env, "", "-d"); err != nil {
			return fmt.Errorf("start the MPS control daemon for claim %s (%s -d): %w: %s", claimUID, m.opts.Control, err, out)
		}
	}
	for _, s := range shares {
		// MPS reads the limit in MiB with an "M" suffix; rounding down
		// keeps the client inside its share.
		cmd := fmt.Sprintf("set_default_device_pinned_mem_limit %s %dM", s.UUID, s.Bytes>>20)
		if out, err := m.control(env, cmd+"\n"); err != nil || mpsRefused(out) {
			return fmt.Errorf("MPS daemon of claim %s refused %q: %v %s", claimUID, cmd, err, out)
		}
	}
	return nil
}

// mpsRefused reads the control program's answer; it exits 0 even when it
// rejects a command, and says so in words.
func mpsRefused(out string) bool {
	o := strings.ToLower(out)
	return strings.Contains(o, "error") || strings.Contains(o, "invalid") || strings.Contains(o, "unrecognized")
}

// Stop ends the claim's daemon and removes its directories. A claim that
// never had one is not an error.
func (m *MPSManager) Stop(claimUID types.UID) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	d := m.dirs(claimUID)
	if _, err := os.Stat(d.root); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	var quitErr error
	if m.running(d) {
		if out, err := m.control([]string{"CUDA_MPS_PIPE_DIRECTORY=" + d.pipe, "CUDA_MPS_LOG_DIRECTORY=" + d.log}, "quit\n"); err != nil {
			quitErr = fmt.Errorf("stop the MPS control daemon of claim %s: %w: %s", claimUID, err, out)
		}
	}
	if err := os.RemoveAll(d.root); err != nil {
		return errors.Join(quitErr, fmt.Errorf("remove MPS directories of claim %s: %w", claimUID, err))
	}
	return quitErr
}

// Edits are the client edits for a claim's containers: the daemon's pipe
// directory at MPS's default path and its shm directory at /dev/shm.
func (m *MPSManager) Edits(claimUID types.UID) *mpsEdits {
	d := m.dirs(claimUID)
	opts := []string{"rw", "nosuid", "nodev", "bind"}
	return &mpsEdits{
		env: []string{"CUDA_MPS_PIPE_DIRECTORY=" + mpsContainerPipeDir},
		mounts: []*cdispec.Mount{
			{HostPath: d.pipe, ContainerPath: mpsContainerPipeDir, Options: opts},
			{HostPath: d.shm, ContainerPath: mpsContainerShmDir, Options: opts},
		},
	}
}

// running reports a live control daemon on the claim's pipe directory: the
// PID it wrote there is a process. After a container restart the pipe's
// files stay, but the daemon, a child of the old agent, is gone.
func (m *MPSManager) running(d mpsDirs) bool {
	b, err := os.ReadFile(filepath.Join(d.pipe, "nvidia-cuda-mps-control.pid"))
	if err != nil {
		return false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || pid <= 0 {
		return false
	}
	return processAlive(pid)
}

// processAlive reports a process that exists and has not exited (a zombie
// whose parent has not reaped it counts as gone).
func processAlive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	// "pid (comm) S ...": the state follows the last ')'.
	i := bytes.LastIndexByte(stat, ')')
	return i < 0 || i+2 >= len(stat) || stat[i+2] != 'Z'
}
