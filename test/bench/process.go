package bench

import (
	"bufio"
	"crypto/sha256"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/test/testenv"
)

// process is a scheduler started as a child in its own process group.
type process struct {
	name string
	cmd  *exec.Cmd
	log  *os.File
	done chan struct{}
	err  error
}

// spawner forks children from one locked OS thread that never exits: PDEATHSIG fires
// when the forking thread dies, so a child must not be forked from a thread the Go
// runtime may retire. With it, a killed harness takes its schedulers along.
var spawner struct {
	once sync.Once
	reqs chan *exec.Cmd
	errs chan error
}

func startProcess(name, logPath, bin string, args ...string) (*process, error) {
	logf, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	spawner.once.Do(func() {
		spawner.reqs, spawner.errs = make(chan *exec.Cmd), make(chan error)
		go func() {
			runtime.LockOSThread()
			for c := range spawner.reqs {
				spawner.errs <- c.Start()
			}
		}()
	})
	spawner.reqs <- cmd
	if err := <-spawner.errs; err != nil {
		logf.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	p := &process{name: name, cmd: cmd, log: logf, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

func (p *process) pid() int { return p.cmd.Process.Pid }

// exited returns an error if the process has ended.
func (p *process) exited() error {
	select {
	case <-p.done:
		return fmt.Errorf("%s exited: %v (log %s, ending: %s)", p.name, p.err, p.log.Name(), logTail(p.log.Name(), 5))
	default:
		return nil
	}
}

// stop terminates the process group, killing it after a grace period.
func (p *process) stop() {
	_ = syscall.Kill(-p.pid(), syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
		<-p.done
	}
	_ = syscall.Kill(-p.pid(), syscall.SIGKILL)
	p.log.Close()
}

// startGantry runs bin/gantry-scheduler with the given client QPS and burst, and
// extra flags; it returns the ports of its /metrics and of its probes (/readyz).
func startGantry(bin, kubeconfig, logDir string, qps int, extra ...string) (*process, int, int, error) {
	metrics, err := testenv.FreePort()
	if err != nil {
		return nil, 0, 0, err
	}
	probe, err := testenv.FreePort()
	if err != nil {
		return nil, 0, 0, err
	}
	args := append([]string{
		"--kubeconfig=" + kubeconfig,
		"--scheduler-name=" + string(Gantry),
		"--leader-elect=false",
		"--kube-api-qps=" + strconv.Itoa(qps),
		"--kube-api-burst=" + strconv.Itoa(qps),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(metrics),
		"--health-probe-bind-address=127.0.0.1:" + strconv.Itoa(probe),
	}, extra...)
	p, err := startProcess("gantry-scheduler", filepath.Join(logDir, "gantry-scheduler.log"), bin, args...)
	return p, metrics, probe, err
}

// startKubeScheduler runs bin/kube-scheduler with its default profile and the given
// client QPS and burst.
func startKubeScheduler(bin, kubeconfig, logDir string, qps int) (*process, error) {
	port, err := testenv.FreePort()
	if err != nil {
		return nil, err
	}
	config := filepath.Join(logDir, "kube-scheduler-config.yaml")
	body := fmt.Sprintf(`apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: %q
  qps: %d
  burst: %d
leaderElection:
  leaderElect: false
`, kubeconfig, qps, qps)
	if err := os.WriteFile(config, []byte(body), 0o644); err != nil {
		return nil, err
	}
	return startProcess("kube-scheduler", filepath.Join(logDir, "kube-scheduler.log"), bin,
		"--config="+config,
		"--authentication-kubeconfig="+kubeconfig,
		"--authorization-kubeconfig="+kubeconfig,
		"--bind-address=127.0.0.1",
		"--secure-port="+strconv.Itoa(port),
		"--cert-dir="+filepath.Join(logDir, "kube-scheduler-certs"),
		"--v=0",
	)
}

// memorySampler polls a process's resident memory.
type memorySampler struct {
	pid  int
	stop chan struct{}
	done chan struct{}

	mu sync.Mutex
	// peakRSS is the largest VmRSS sampled; hwm is the kernel's VmHWM (the true
	// peak) at the last sample.
	peakRSS, hwm int64
}

func sampleMemory(pid int, every time.Duration) *memorySampler {
	m := &memorySampler{pid: pid, stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(m.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			m.sample()
			select {
			case <-m.stop:
				return
			case <-t.C:
			}
		}
	}()
	return m
}

func (m *memorySampler) sample() {
	rss, hwm, err := readProcMemory(m.pid)
	if err != nil {
		return
	}
	m.mu.Lock()
	m.peakRSS = max(m.peakRSS, rss)
	m.hwm = max(m.hwm, hwm)
	m.mu.Unlock()
}

// finish takes a last sample and returns the peak VmRSS and VmHWM in bytes.
func (m *memorySampler) finish() (peakRSS, hwm int64) {
	close(m.stop)
	<-m.done
	m.sample()
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.peakRSS, m.hwm
}

// readProcMemory reads VmRSS and VmHWM (bytes) from /proc/PID/status.
func readProcMemory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		key, val, ok := strings.Cut(sc.Text(), ":")
		if !ok || (key != "VmRSS" && key != "VmHWM") {
			continue
		}
		fields := strings.Fields(val)
		if len(fields) != 2 || fields[1] != "kB" {
			continue
		}
		kb, err := strconv.ParseInt(fields[0], 10, 64)
		if err != nil {
			continue
		}
		if key == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	return rss, hwm, sc.Err()
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat's times; 100 on every Linux
// architecture Go supports.
const clockTicks = 100

// cpuSeconds reads a process's user plus system CPU time from /proc/PID/stat.
func cpuSeconds(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces; fields after it start past ')'.
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("/proc/%d/stat: no command name", pid)
	}
	f := strings.Fields(s[i+1:])
	// f[0] is field 3 (state); utime and stime are fields 14 and 15.
	if len(f) < 13 {
		return 0, fmt.Errorf("/proc/%d/stat: %d fields", pid, len(f))
	}
	utime, err1 := strconv.ParseFloat(f[11], 64)
	stime, err2 := strconv.ParseFloat(f[12], 64)
	if err1 != nil || err2 != nil {
		return 0, fmt.Errorf("/proc/%d/stat: bad utime or stime", pid)
	}
	return (utime + stime) / clockTicks, nil
}

// cpuMeter measures the CPU time processes spend between start and stop, and the
// machine's: all its CPUs busy (machineBusy) and the time its hypervisor gave them
// to others while they wanted to run (machineSteal).
type cpuMeter struct {
	pids    map[string]int
	start   map[string]float64
	machine machineCPU
}

// Names under which used reports the machine's CPU.
const (
	machineBusy  = "machine-busy"
	machineSteal = "machine-steal"
)

func meterCPU(pids map[string]int) *cpuMeter {
	m := &cpuMeter{pids: pids, start: map[string]float64{}}
	for name, pid := range pids {
		if s, err := cpuSeconds(pid); err == nil {
			m.start[name] = s
		}
	}
	m.machine, _ = readMachineCPU()
	return m
}

// used returns the CPU seconds each process spent since meterCPU, and the machine's.
func (m *cpuMeter) used() map[string]float64 {
	out := map[string]float64{}
	for name, pid := range m.pids {
		begin, ok := m.start[name]
		if !ok {
			continue
		}
		if s, err := cpuSeconds(pid); err == nil {
			out[name] = s - begin
		}
	}
	if now, err := readMachineCPU(); err == nil && m.machine.known {
		out[machineBusy] = now.busy - m.machine.busy
		out[machineSteal] = now.steal - m.machine.steal
	}
	return out
}

// machineCPU is the first line of /proc/stat in seconds: every CPU's time busy (user,
// nice, system, irq, softirq) and stolen.
type machineCPU struct {
	busy, steal float64
	known       bool
}

func readMachineCPU() (machineCPU, error) {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return machineCPU{}, err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	return parseMachineCPU(line)
}

// parseMachineCPU reads "cpu user nice system idle iowait irq softirq steal ...".
func parseMachineCPU(line string) (machineCPU, error) {
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return machineCPU{}, fmt.Errorf("/proc/stat: %q is not the cpu line", line)
	}
	var v [8]float64
	for i := range v {
		n, err := strconv.ParseFloat(f[i+1], 64)
		if err != nil {
			return machineCPU{}, fmt.Errorf("/proc/stat: field %d: %w", i+1, err)
		}
		v[i] = n / clockTicks
	}
	return machineCPU{busy: v[0] + v[1] + v[2] + v[5] + v[6], steal: v[7], known: true}, nil
}

// speedProbe is the milliseconds one goroutine takes to hash 16 MiB with SHA-256,
// the best of three: the machine's speed for one core at the time, to tell a slow
// machine from a slow scheduler.
func speedProbe() float64 {
	buf := make([]byte, 16<<20)
	best := time.Duration(math.MaxInt64)
	for range 3 {
		start := time.Now()
		sha256.Sum256(buf)
		best = min(best, time.Since(start))
	}
	return round(float64(best)/float64(time.Millisecond), 1)
}

// loadAverage is the machine's one-minute load average, to say how busy it was
// (other work on the machine slows every run).
func loadAverage() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

// logTail is the last n lines of a log, joined by " | ", so that a process that died
// says why where the run's status is printed (the log's folder may be gone by then).
func logTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}
