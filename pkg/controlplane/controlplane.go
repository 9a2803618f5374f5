// Package controlplane starts a real Kubernetes control plane: etcd and
// kube-apiserver v1.37.2, and on request kube-controller-manager, kwok (the kubelets
// of fake nodes) and the KubeRay operator, all on free loopback ports in a temporary
// directory, from the binaries `make tools` builds into bin/.
//
// Every process runs in its own process group, started from one OS thread that never
// exits with PDEATHSIG set, so that a test binary that panics or is killed takes its
// control plane down with it. Stop terminates the groups and checks that nothing is
// left.
//
// It is product code: the sandbox (`gantry sandbox`) ships it. test/testenv wraps it
// for tests (RunMain). It must not import the testing package, nor anything of the
// scheduler (pkg/kube, the core): it knows Kubernetes only.
package controlplane

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// Options chooses which parts of the control plane to start.
type Options struct {
	// ControllerManager starts kube-controller-manager (namespace and garbage
	// collection, service accounts, ResourceClaims from templates, node lifecycle).
	ControllerManager bool
	// Kwok starts kwok, which plays the kubelet of every Node labelled
	// type=kwok: it keeps the node Ready and runs the pods bound to it.
	Kwok bool
	// KubeRay starts the KubeRay operator v1.6.2 (with its CRDs), configured as the
	// seed installs it: --batch-scheduler=kai-scheduler. Implies nothing else.
	KubeRay bool
	// KubeRayArgs replaces the operator's extra arguments when set.
	KubeRayArgs []string
	// CRDPaths are files or directories of CRD YAML to install; nil means the
	// repository's deploy/crds.
	CRDPaths []string
	// Logs, when true, copies the components' output to the test's stderr as well
	// as to their log files in Dir.
	Logs bool
	// AggregatorRouting makes the API server call a Service (a webhook's
	// clientConfig.service) at its endpoints' addresses instead of its ClusterIP,
	// which nothing routes here: a test can then serve a chart's webhook from this
	// host behind a Service with hand-made endpoints.
	AggregatorRouting bool
}

// Env is a running control plane.
type Env struct {
	// Config reaches the API server as cluster-admin.
	Config *rest.Config
	Client kubernetes.Interface
	// Dir holds the data, certificates, kubeconfig and one log file per component.
	Dir string
	// Kubeconfig is the path of a kubeconfig file for Config.
	Kubeconfig string
	// APIServerURL is https://127.0.0.1:PORT.
	APIServerURL string

	pki      *pki
	mu       sync.Mutex
	procs    []*proc
	owndir   bool
	stopOnce sync.Once
	stopErr  error
}

// KwokNodeLabel is the label (type=kwok) that marks Nodes kwok plays the kubelet of.
const KwokNodeLabel = "type"

// KwokNodeLabelValue is KwokNodeLabel's value on fake nodes.
const KwokNodeLabelValue = "kwok"

// Start starts a control plane. On error, whatever had started is stopped.
func Start(ctx context.Context, opts Options) (_ *Env, err error) {
	bin, err := BinDir()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp("", "gantry-controlplane-")
	if err != nil {
		return nil, fmt.Errorf("controlplane: temp dir: %w", err)
	}
	env := &Env{Dir: dir, owndir: true}
	defer func() {
		if err != nil {
			_ = env.Stop()
		}
	}()
	pki, err := writePKI(dir)
	if err != nil {
		return nil, err
	}
	env.pki = pki
	etcdURL, err := env.startEtcd(ctx, bin, opts.Logs)
	if err != nil {
		return nil, err
	}
	if err := env.startAPIServer(ctx, bin, etcdURL, pki, opts.Logs, opts.AggregatorRouting); err != nil {
		return nil, err
	}
	crds := opts.CRDPaths
	if crds == nil {
		if root, err := RepoRoot(); err == nil {
			crds = []string{filepath.Join(root, "deploy", "crds")}
		}
	}
	if opts.KubeRay {
		crds = append(crds, filepath.Join(bin, "kuberay-crds"))
	}
	if err := InstallCRDs(ctx, env.Config, crds...); err != nil {
		return nil, err
	}
	if opts.ControllerManager {
		if err := env.startControllerManager(ctx, bin, pki, opts.Logs); err != nil {
			return nil, err
		}
	}
	if opts.Kwok {
		if err := env.startKwok(ctx, bin, opts.Logs); err != nil {
			return nil, err
		}
	}
	if opts.KubeRay {
		if err := env.startKubeRay(ctx, bin, opts); err != nil {
			return nil, err
		}
	}
	return env, nil
}

// Stop ends every process of the control plane, waits for them, checks that none is
// left, and removes Dir. It is safe to call more than once.
func (e *Env) Stop() error {
	e.stopOnce.Do(func() {
		e.mu.Lock()
		procs := e.procs
		e.procs = nil
		e.mu.Unlock()
		var errs []error
		// Reverse start order: clients before the API server, the API server before etcd.
		for i := len(procs) - 1; i >= 0; i-- {
			if err := procs[i].stop(10 * time.Second); err != nil {
				errs = append(errs, err)
			}
		}
		for _, p := range procs {
			if alive(p.pid) {
				errs = append(errs, fmt.Errorf("controlplane: %s (pid %d) still running after stop", p.name, p.pid))
			}
		}
		if e.owndir && e.Dir != "" && os.Getenv("GANTRY_TESTENV_KEEP") == "" {
			if err := os.RemoveAll(e.Dir); err != nil {
				errs = append(errs, err)
			}
		}
		e.stopErr = errors.Join(errs...)
	})
	return e.stopErr
}

// PIDs returns the process ids of the running components, for leak checks.
func (e *Env) PIDs() map[string]int {
	e.mu.Lock()
	defer e.mu.Unlock()
	out := map[string]int{}
	for _, p := range e.procs {
		out[p.name] = p.pid
	}
	return out
}

// BinDir finds the directory of the tool binaries: $GANTRY_BIN_DIR, else bin/ at the
// repository root.
func BinDir() (string, error) {
	if d := os.Getenv("GANTRY_BIN_DIR"); d != "" {
		return d, nil
	}
	root, err := RepoRoot()
	if err != nil {
		return "", err
	}
	d := filepath.Join(root, "bin")
	if _, err := os.Stat(filepath.Join(d, "kube-apiserver")); err != nil {
		return "", fmt.Errorf("controlplane: %s/kube-apiserver not found: run `make tools` first", d)
	}
	return d, nil
}

// RepoRoot walks up from the working directory to the directory holding Gantry's go.mod.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if b, err := os.ReadFile(filepath.Join(dir, "go.mod")); err == nil && strings.Contains(string(b), "module github.com/gantry-dev/gantry\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("controlplane: not inside the gantry repository")
		}
		dir = parent
	}
}

// FreePort returns a loopback TCP port that was free a moment ago.
func FreePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// proc is one component process.
type proc struct {
	name string
	pid  int
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

func (p *proc) stop(grace time.Duration) error {
	// Signal the whole process group: components may fork helpers.
	_ = syscall.Kill(-p.pid, syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		<-p.done
	}
	// Anything else left in the group goes too.
	_ = syscall.Kill(-p.pid, syscall.SIGKILL)
	if p.log != nil {
		p.log.Close()
	}
	return nil
}

func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	err := syscall.Kill(pid, 0)
	if err != nil {
		return false
	}
	// A zombie still answers kill(0); it is not running.
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b))
	return len(fields) > 2 && fields[2] != "Z"
}

// spawner starts every child from one locked OS thread that never exits: PDEATHSIG
// fires when the thread that forked a child dies, so children must not be forked from
// threads the Go runtime may retire.
var spawner struct {
	once sync.Once
	reqs chan spawnReq
}

type spawnReq struct {
	cmd *exec.Cmd
	err chan error
}

func spawn(cmd *exec.Cmd) error {
	spawner.once.Do(func() {
		spawner.reqs = make(chan spawnReq)
		go func() {
			runtime.LockOSThread()
			for r := range spawner.reqs {
				r.err <- r.cmd.Start()
			}
		}()
	})
	r := spawnReq{cmd: cmd, err: make(chan error, 1)}
	spawner.reqs <- r
	return <-r.err
}

// run starts a component, logging to Dir/NAME.log.
func (e *Env) run(name string, logs bool, bin string, args ...string) (*proc, error) {
	logf, err := os.Create(filepath.Join(e.Dir, name+".log"))
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Dir = e.Dir
	if logs {
		cmd.Stdout = ioMulti(logf, os.Stderr)
		cmd.Stderr = cmd.Stdout
	} else {
		cmd.Stdout = logf
		cmd.Stderr = logf
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := spawn(cmd); err != nil {
		logf.Close()
		return nil, fmt.Errorf("controlplane: start %s: %w", name, err)
	}
	p := &proc{name: name, pid: cmd.Process.Pid, cmd: cmd, log: logf, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	e.mu.Lock()
	e.procs = append(e.procs, p)
	e.mu.Unlock()
	return p, nil
}

// exitedEarly returns an error with the tail of the component's log if it has exited.
func (e *Env) exitedEarly(p *proc) error {
	select {
	case <-p.done:
		return fmt.Errorf("controlplane: %s exited: %v\n%s", p.name, p.err, tail(filepath.Join(e.Dir, p.name+".log"), 30))
	default:
		return nil
	}
}

func tail(path string, lines int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	ls := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(ls) > lines {
		ls = ls[len(ls)-lines:]
	}
	return strings.Join(ls, "\n")
}

// waitFor polls check until it returns nil, the process exits, or the deadline passes.
func (e *Env) waitFor(ctx context.Context, p *proc, timeout time.Duration, what string, check func() error) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var last error
	for {
		if err := e.exitedEarly(p); err != nil {
			return err
		}
		if last = check(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("controlplane: %s not ready after %s: %v\n%s", what, timeout, last, tail(filepath.Join(e.Dir, p.name+".log"), 30))
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// StartProcess runs another program as part of this control plane: in its own
// process group, logging to Dir/NAME.log, stopped by Stop before the API server.
// The sandbox runs the scheduler and the node agents this way.
func (e *Env) StartProcess(name, bin string, logs bool, args ...string) (pid int, err error) {
	p, err := e.run(name, logs, bin, args...)
	if err != nil {
		return 0, err
	}
	return p.pid, nil
}

// Exited returns an error if the named process has exited, with the tail of its log.
func (e *Env) Exited(name string) error {
	e.mu.Lock()
	var p *proc
	for _, q := range e.procs {
		if q.name == name {
			p = q
		}
	}
	e.mu.Unlock()
	if p == nil {
		return fmt.Errorf("controlplane: no process %s", name)
	}
	return e.exitedEarly(p)
}
