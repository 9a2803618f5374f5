// Command gantry-node-agent runs on every GPU node: it reads the GPUs through
// NVML, publishes them as DRA ResourceSlices, serves the gpu.gantry.dev DRA
// kubelet plugin, writes GPUNode status and serves DCGM-compatible metrics.
// This file only parses flags and wires pkg/agent together.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/expfmt"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/dynamic-resource-allocation/kubeletplugin"
	"k8s.io/klog/v2"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/gantry-dev/gantry/gpu"
	"github.com/gantry-dev/gantry/gpu/fake"
	"github.com/gantry-dev/gantry/pkg/agent"
	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/names"
)

func main() {
	os.Exit(run(os.Args[1:], os.Stdout, os.Stderr))
}

type options struct {
	nodeName, kubeconfig, fakeGPUs, nvmlLibrary   string
	pluginDataDir, registrarDir, cdiRoot          string
	metricsAddr, podResourcesSocket               string
	metricsCertDir, probeAddr                     string
	metricsSecure                                 bool
	mps, installDeviceClass, smoke, watchNode     bool
	dcgmSeries                                    bool
	pollInterval, statusMinInterval, statusMaxInt time.Duration
	readTimeout, gcGrace                          time.Duration
	cdi                                           agent.CDIOptions
	mpsRoot, mpsControl                           string
	mpsBindShm, claimStatus                       bool
}

func parseFlags(args []string, stderr io.Writer) (*options, error) {
	o := &options{}
	fs := flag.NewFlagSet("gantry-node-agent", flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.nodeName, "node-name", os.Getenv("NODE_NAME"), "name of this node (default $NODE_NAME)")
	fs.StringVar(&o.kubeconfig, "kubeconfig", "", "kubeconfig file; empty means in-cluster configuration")
	fs.StringVar(&o.fakeGPUs, "fake-gpus", "", "use fake GPUs instead of NVML: "+fake.Profiles())
	fs.StringVar(&o.nvmlLibrary, "nvml-library", gpu.LibraryName, "NVML library to load")
	fs.StringVar(&o.pluginDataDir, "kubelet-plugin-dir", kubeletplugin.KubeletPluginsDir+"/"+names.DriverName, "directory for the DRA socket and the checkpoint")
	fs.StringVar(&o.registrarDir, "kubelet-registrar-dir", kubeletplugin.KubeletRegistryDir, "directory where the kubelet looks for plugin registration sockets")
	fs.StringVar(&o.cdiRoot, "cdi-root", kubeletplugin.DefaultCDIDir, "directory for CDI spec files")
	fs.StringVar(&o.metricsAddr, "metrics-bind-address", ":9402", `address for /metrics; "0" disables it`)
	fs.BoolVar(&o.metricsSecure, "metrics-secure", true, "serve /metrics over HTTPS to callers the API server authenticates and authorizes (get on /metrics); a loopback --metrics-bind-address is plain HTTP either way")
	fs.StringVar(&o.metricsCertDir, "metrics-cert-dir", "", "directory with tls.crt and tls.key for /metrics, reloaded when they change (default: a self-signed certificate)")
	fs.StringVar(&o.probeAddr, "health-probe-bind-address", ":9403", `address for /healthz and /readyz (the kubelet accepted the plugin's registration); "0" disables it`)
	fs.StringVar(&o.podResourcesSocket, "pod-resources-socket", agent.DefaultPodResourcesSocket, "kubelet PodResources socket for pod labels on metrics; empty disables")
	fs.BoolVar(&o.mps, "mps", false, "enforce memory shares: run an MPS control daemon for each claim holding shares, with the claim's pinned device-memory limit on each GPU")
	fs.StringVar(&o.mpsRoot, "mps-root", agent.DefaultMPSRoot, "host directory (same path in the agent) under which each claim's MPS pipe, shm and log directories are made")
	fs.BoolVar(&o.mpsBindShm, "mps-bind-shm", true, "run each MPS daemon in its own mount namespace with the claim's shm directory at /dev/shm, as its clients have it (needs CAP_SYS_ADMIN)")
	fs.BoolVar(&o.claimStatus, "claim-status", false, "write whether each claim's memory shares are enforced into its status.devices (condition "+agent.ConditionShareEnforced+"); needs update on resourceclaims/status")
	fs.StringVar(&o.mpsControl, "mps-control", "nvidia-cuda-mps-control", "the MPS control program (under --driver-root)")
	fs.StringVar(&o.cdi.DriverRoot, "driver-root", "/", "where the agent sees the NVIDIA driver's files (GPU Operator: the mount of /run/nvidia/driver)")
	fs.StringVar(&o.cdi.HostDriverRoot, "host-driver-root", "", "the same directory on the host, as CDI specs must name it (default --driver-root)")
	fs.StringVar(&o.cdi.DevRoot, "dev-root", "", "where /dev is found (default: --driver-root if it holds dev/nvidiactl, else /)")
	fs.StringVar(&o.cdi.HookPath, "nvidia-cdi-hook-path", "/usr/bin/nvidia-cdi-hook", "nvidia-cdi-hook on the host (GPU Operator: /usr/local/nvidia/toolkit/nvidia-cdi-hook)")
	fs.BoolVar(&o.dcgmSeries, "dcgm-series", true, "serve the GPUs' DCGM_FI_* series; turn off where dcgm-exporter also runs (gantry_* series stay)")
	fs.BoolVar(&o.watchNode, "watch-node", true, "follow the node's labels to release NVML during a GPU Operator driver upgrade (or while "+agent.ReleaseNVMLLabel+"=true)")
	fs.DurationVar(&o.readTimeout, "read-timeout", 30*time.Second, "a GPU reading that takes longer counts as NVML not answering")
	fs.DurationVar(&o.gcGrace, "checkpoint-gc-grace", 5*time.Minute, "how long a prepared claim must be missing from the API before it is unprepared; 0 disables")
	fs.BoolVar(&o.installDeviceClass, "install-device-class", true, "create the gpu.gantry.dev DeviceClass if it is missing")
	fs.BoolVar(&o.smoke, "smoke", false, "read the GPUs once, print them and their metrics, and exit (no Kubernetes needed)")
	fs.DurationVar(&o.pollInterval, "poll-interval", 10*time.Second, "how often the GPUs are read")
	fs.DurationVar(&o.statusMinInterval, "status-min-interval", 10*time.Second, "least time between two GPUNode status writes")
	fs.DurationVar(&o.statusMaxInt, "status-max-interval", 5*time.Minute, "most time between two GPUNode status writes")
	klogFlags := flag.NewFlagSet("klog", flag.ContinueOnError)
	klog.InitFlags(klogFlags)
	klogFlags.VisitAll(func(f *flag.Flag) { fs.Var(f.Value, f.Name, f.Usage) })
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("unexpected arguments %v", fs.Args())
	}
	return o, nil
}

// run returns the exit code. Failures are one line on stderr that says what to change.
func run(args []string, stdout, stderr io.Writer) int {
	o, err := parseFlags(args, stderr)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return 2
	}
	if err := execute(o, stdout); err != nil {
		fmt.Fprintf(stderr, "gantry-node-agent: %v\n", err)
		return 1
	}
	return 0
}

// gpuLibrary is NVML, not yet initialised: the agent opens and closes it.
func gpuLibrary(o *options) (nvml.Interface, error) {
	if o.fakeGPUs != "" {
		return fake.New(o.fakeGPUs, o.nodeName)
	}
	return gpu.Library(o.nvmlLibrary), nil
}

func execute(o *options, stdout io.Writer) error {
	lib, err := gpuLibrary(o)
	if err != nil {
		return err
	}
	if o.smoke {
		if err := gpu.InitError(lib.Init()); err != nil {
			return err
		}
		defer lib.Shutdown()
		return smoke(lib, o, stdout)
	}
	if o.nodeName == "" {
		return errors.New("--node-name (or $NODE_NAME) is required")
	}

	cfg, err := restConfig(o.kubeconfig)
	if err != nil {
		return err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return fmt.Errorf("Kubernetes client: %w", err)
	}
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		return err
	}
	if err := gpuv1alpha1.AddToScheme(scheme); err != nil {
		return err
	}
	statusClient, err := client.New(cfg, client.Options{Scheme: scheme})
	if err != nil {
		return fmt.Errorf("GPUNode client: %w", err)
	}

	acfg := agentConfig(o, lib, kube, statusClient)
	a, err := agent.New(acfg)
	if err != nil {
		return err
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()

	onError := func(err error) {
		klog.ErrorS(err, "HTTP server failed")
		stop()
	}
	if o.metricsAddr != "0" && o.metricsAddr != "" {
		var pods agent.PodResourcesLister
		if o.podResourcesSocket != "" {
			lister, closePods, err := agent.NewPodResourcesClient(o.podResourcesSocket)
			if err != nil {
				return err
			}
			defer closePods()
			pods = lister
		}
		reg := prometheus.NewRegistry()
		m := agent.NewMetrics(o.nodeName, a.Snapshot(), a.Driver().Allocations, pods)
		m.NoDCGMSeries = !o.dcgmSeries
		reg.MustRegister(m)
		if _, err := serveMetrics(ctx, o, cfg, reg, onError); err != nil {
			return err
		}
	}
	if _, err := serveProbes(ctx, o.probeAddr, a, onError); err != nil {
		return err
	}
	return a.Run(ctx)
}

// agentConfig turns the flags into the agent's configuration.
func agentConfig(o *options, lib nvml.Interface, kube kubernetes.Interface, statusClient client.Client) agent.Config {
	acfg := agent.Config{
		NodeName: o.nodeName, KubeClient: kube, NVML: lib,
		PluginDataDir: o.pluginDataDir, RegistrarDir: o.registrarDir, CDIRoot: o.cdiRoot, CDI: o.cdi,
		PollInterval: o.pollInterval, ReadTimeout: o.readTimeout,
		InstallDeviceClass: o.installDeviceClass, WatchNode: o.watchNode,
		Status: agent.NewStatusWriter(statusClient, o.nodeName, agent.StatusOptions{MinInterval: o.statusMinInterval, MaxInterval: o.statusMaxInt}),
	}
	if o.gcGrace > 0 {
		acfg.GC = &agent.CheckpointGC{Client: kube, Grace: o.gcGrace}
	}
	if o.claimStatus {
		acfg.ClaimStatus = &agent.ClaimStatusWriter{Client: kube}
	}
	if o.mps {
		acfg.MPS = agent.NewMPSManager(agent.MPSOptions{Root: o.mpsRoot, BindShm: o.mpsBindShm,
			Control: filepath.Join(o.cdi.DriverRoot, "usr/bin", filepath.Base(o.mpsControl))})
	}
	if o.fakeGPUs != "" {
		// Fake GPUs have no device nodes or driver files to hand out.
		acfg.NewEditor = func(nvml.Interface) (agent.CDIEditor, error) { return agent.FakeCDIEditor{}, nil }
	}
	return acfg
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig == "" {
		cfg, err := rest.InClusterConfig()
		if err != nil {
			return nil, fmt.Errorf("no --kubeconfig and not in a cluster: %w", err)
		}
		return cfg, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("load kubeconfig %s: %w", kubeconfig, err)
	}
	return cfg, nil
}

// smoke prints what discovery and metrics see, for `make gpu-smoke` on a GPU machine.
func smoke(lib nvml.Interface, o *options, out io.Writer) error {
	inv, err := gpu.Discover(lib)
	if err != nil {
		return err
	}
	if len(inv.Devices) == 0 {
		return errors.New("NVML reports no GPUs")
	}
	fmt.Fprintf(out, "driver %s, CUDA %s, %d GPU(s)\n\n", inv.DriverVersion, inv.CUDADriverVersion, len(inv.Devices))
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "INDEX\tUUID\tPRODUCT\tARCH\tCC\tPCI\tNUMA\tMEMORY USED/TOTAL\tMIG\tNVLINK PEERS\tHEALTH")
	for _, d := range inv.Devices {
		numa := "?"
		if d.NUMANode != nil {
			numa = fmt.Sprint(*d.NUMANode)
		}
		mig := "n/a"
		if d.MIG.Capable {
			mig = fmt.Sprintf("%v (%d devices)", d.MIG.Enabled, len(d.MIG.Devices))
		}
		mem := "unknown"
		if d.Memory.Known {
			mem = fmt.Sprintf("%d/%d MiB", d.Memory.UsedBytes>>20, d.Memory.TotalBytes>>20)
		}
		health := string(d.Health.State)
		if len(d.Health.Reasons) > 0 {
			health += ": " + strings.Join(d.Health.Reasons, "; ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", d.Index, d.UUID, d.ProductName, d.Architecture,
			d.CUDAComputeCapability, d.PCIBusID, numa, mem, mig, len(d.NVLinkPeers), health)
	}
	if err := tw.Flush(); err != nil {
		return err
	}

	hostname := o.nodeName
	if hostname == "" {
		hostname, _ = os.Hostname()
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(agent.NewMetrics(hostname, agent.NewSnapshot(inv), nil, nil))
	fams, err := reg.Gather()
	if err != nil {
		return fmt.Errorf("gather metrics: %w", err)
	}
	fmt.Fprintln(out)
	enc := expfmt.NewEncoder(out, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("encode metrics: %w", err)
		}
	}
	return nil
}
