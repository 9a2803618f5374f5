// Package chaos runs randomized rounds of work against a real control plane (etcd,
// kube-apiserver, kube-controller-manager, kwok GPU nodes, the KubeRay operator) and
// the real gantry-scheduler binary, injects one fault per round at a random moment,
// and checks Gantry's invariants (test/invariant) all the time and once the round has
// settled. ROUNDS sets the number of rounds (default 3, `make chaos` runs 100),
// CHAOS_SEED the seed (default: the clock; it is logged), CHAOS_FAULTS a
// comma-separated subset of fault names.
//
// This file holds what other harnesses (test/soak) reuse: building and running
// gantry-scheduler replicas, and restarting control-plane components.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/gantry-dev/gantry/test/testenv"
)

// testenv has no restart: it exposes each component's pid (Env.PIDs) and runs any
// program as part of the control plane (Env.StartProcess). A restart here reads the
// component's command line from /proc, SIGKILLs its process group, and starts the same
// command again under the same name, so the restarted component keeps its ports, data
// directory and certificates. (A testenv.Env.Restart(name) would make this a one-liner.)

// component is a running process of the control plane or of Gantry.
type component struct {
	name string
	args []string // argv, argv[0] the binary
}

// capture reads the command line of the named process.
func capture(env *testenv.Env, name string) (component, int, error) {
	pid, ok := env.PIDs()[name]
	if !ok {
		return component{}, 0, fmt.Errorf("no process %s (have %v)", name, env.PIDs())
	}
	// A process just started may not have exec'd yet: its command line reads empty
	// for a moment.
	var raw []byte
	err := wait.PollUntilContextTimeout(context.Background(), 10*time.Millisecond, 5*time.Second, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			return false, err
		}
		raw = b
		return len(strings.TrimRight(string(b), "\x00")) > 0, nil
	})
	if err != nil {
		return component{}, 0, fmt.Errorf("read %s's command line: %w", name, err)
	}
	args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
	return component{name: name, args: args}, pid, nil
}

// kill SIGKILLs the process group of pid and waits until the process is gone.
func kill(pid int) error {
	_ = syscall.Kill(-pid, syscall.SIGKILL)
	return wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil {
			return true, nil
		}
		f := strings.Fields(string(b))
		return len(f) > 2 && f[2] == "Z", nil
	})
}

// restart kills the named component and starts it again with the same command line
// after down has passed.
func restart(env *testenv.Env, name string, down time.Duration) error {
	c, pid, err := capture(env, name)
	if err != nil {
		return err
	}
	if err := kill(pid); err != nil {
		return fmt.Errorf("kill %s: %w", name, err)
	}
	time.Sleep(down)
	_, err = env.StartProcess(c.name, c.args[0], false, c.args[1:]...)
	return err
}

// waitAPIServer waits until kube-apiserver answers /readyz.
func waitAPIServer(ctx context.Context, env *testenv.Env, timeout time.Duration) error {
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		defer cancel()
		_, err := env.Client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		return err == nil, nil
	})
}

// BuildScheduler builds cmd/scheduler into dir and returns the binary's path.
func BuildScheduler(dir string) (string, error) {
	root, err := testenv.RepoRoot()
	if err != nil {
		return "", err
	}
	out := filepath.Join(dir, "gantry-scheduler")
	cmd := exec.Command("go", "build", "-o", out, "./cmd/scheduler")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build ./cmd/scheduler: %v\n%s", err, b)
	}
	return out, nil
}

var replicaSeq atomic.Int64

// Scheduler is one gantry-scheduler replica run from the built binary.
type Scheduler struct {
	// Name is its process name in the testenv.Env; PID its process (group) id.
	Name string
	PID  int
	// MetricsAddr serves /metrics, ProbeAddr /healthz and /readyz (host:port).
	MetricsAddr string
	ProbeAddr   string
}

// ServedNames are the schedulerNames a replica serves unless told otherwise:
// gantry-scheduler, and kai-scheduler as KubeRay stamps it.
var ServedNames = []string{"gantry-scheduler", "kai-scheduler"}

// StartScheduler runs a replica serving names (ServedNames when nil), and waits until
// it is ready: at once with leader election (a standby is ready), after its informers
// synced without.
func StartScheduler(ctx context.Context, env *testenv.Env, bin string, leaderElect bool, names []string, extra ...string) (*Scheduler, error) {
	metrics, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	probe, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	s := &Scheduler{
		Name:        fmt.Sprintf("gantry-scheduler-%d", replicaSeq.Add(1)),
		MetricsAddr: fmt.Sprintf("127.0.0.1:%d", metrics),
		ProbeAddr:   fmt.Sprintf("127.0.0.1:%d", probe),
	}
	if names == nil {
		names = ServedNames
	}
	args := []string{"--kubeconfig=" + env.Kubeconfig}
	for _, n := range names {
		args = append(args, "--scheduler-name="+n)
	}
	args = append(append(args,
		fmt.Sprintf("--leader-elect=%v", leaderElect),
		"--leader-elect-name=gantry-chaos",
		"--kube-api-qps=500", "--kube-api-burst=1000",
		"--metrics-bind-address="+s.MetricsAddr,
		"--health-probe-bind-address="+s.ProbeAddr,
	), extra...)
	if s.PID, err = env.StartProcess(s.Name, bin, false, args...); err != nil {
		return nil, err
	}
	err = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(context.Context) (bool, error) {
		if err := env.Exited(s.Name); err != nil {
			return false, err
		}
		resp, err := http.Get("http://" + s.ProbeAddr + "/readyz")
		if err != nil {
			return false, nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	})
	if err != nil {
		// Not left running: a replica that becomes ready later would schedule unseen.
		_ = kill(s.PID)
		return nil, fmt.Errorf("%s not ready: %w", s.Name, err)
	}
	return s, nil
}

// leaderOf returns which of replicas holds the gantry-chaos Lease (its identity ends
// in the pid), or nil.
func leaderOf(ctx context.Context, env *testenv.Env, replicas []*Scheduler) *Scheduler {
	l, err := env.Client.CoordinationV1().Leases(LeaseNamespace).Get(ctx, "gantry-chaos", metav1.GetOptions{})
	if err != nil || l.Spec.HolderIdentity == nil {
		return nil
	}
	for _, r := range replicas {
		if strings.HasSuffix(*l.Spec.HolderIdentity, fmt.Sprintf("_%d", r.PID)) {
			return r
		}
	}
	return nil
}

// LeaseNamespace holds the replicas' leader-election Lease (gantry-chaos).
const LeaseNamespace = "gantry-system"

var errNoLeader = errors.New("no replica took the Lease")
