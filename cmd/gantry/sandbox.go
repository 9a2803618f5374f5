package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/gantry-dev/gantry/pkg/controlplane"
	"github.com/gantry-dev/gantry/pkg/sandbox"
)

func init() {
	register(command{
		name:    "sandbox",
		summary: "a local cluster with fake GPU nodes: gantry sandbox up [--demo] | demo",
		run:     runSandbox,
	})
}

func runSandbox(ctx context.Context, args []string) error {
	if len(args) == 0 {
		return usageError{"usage: gantry sandbox up [flags] | gantry sandbox demo"}
	}
	switch args[0] {
	case "up":
		if len(args) == 1 || (args[1] != "-h" && args[1] != "--help" && args[1] != "-help") {
			if err := sandboxPreflight(); err != nil {
				return err
			}
		}
		return sandboxUp(ctx, args[1:], os.Stdout, os.Stderr)
	case "demo":
		return sandboxDemo(ctx, args[1:], os.Stdout, os.Stderr)
	default:
		return usageError{fmt.Sprintf("unknown sandbox command %q: use up or demo", args[0])}
	}
}

// sandboxPreflight finds what the sandbox runs on: a Gantry checkout (the seed
// scenario, CRDs and manifests) and the tools `make tools` builds into its bin/. Run
// from an installed binary outside a checkout, it uses the checkout the binary was
// built into (bin/gantry); otherwise it says in one line how to get them.
func sandboxPreflight() error {
	if _, err := controlplane.RepoRoot(); err != nil {
		exe, xerr := os.Executable()
		if xerr == nil {
			exe, _ = filepath.EvalSymlinks(exe)
			root := filepath.Dir(filepath.Dir(exe))
			if b, rerr := os.ReadFile(filepath.Join(root, "go.mod")); rerr == nil && strings.Contains(string(b), "module github.com/gantry-dev/gantry\n") {
				_ = os.Chdir(root)
			}
		}
		if _, err2 := controlplane.RepoRoot(); err2 != nil {
			return fmt.Errorf("the sandbox runs from a Gantry checkout: git clone https://github.com/gantry-dev/gantry && cd gantry && make run")
		}
	}
	bin, err := controlplane.BinDir()
	if err != nil {
		return err
	}
	var missing []string
	for _, tool := range []string{"kube-apiserver", "etcd", "kube-controller-manager", "kwok", "kuberay-operator", "gantry-scheduler", "gantry-node-agent"} {
		if _, err := os.Stat(filepath.Join(bin, tool)); err != nil {
			missing = append(missing, tool)
		}
	}
	if len(missing) > 0 {
		return fmt.Errorf("%s lacks %s: run `make run` in the checkout (it builds them first; about 20 minutes the first time), or `make tools build`",
			bin, strings.Join(missing, ", "))
	}
	return nil
}

func seedDir() string {
	root, err := controlplane.RepoRoot()
	if err != nil {
		return filepath.Join("examples", "seed")
	}
	return filepath.Join(root, "examples", "seed")
}

func sandboxUp(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry sandbox up", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodes := fs.Int("nodes", 1, "number of fake GPU nodes")
	gpus := fs.String("gpus", "1xA10G", "fake GPUs per node: dgxa100, dgxh100, dgxh200 or NxMODEL such as 1xA10G or 8xH100")
	queues := fs.String("queues", filepath.Join(seedDir(), "queues.yaml"), "Queues to install")
	demo := fs.Bool("demo", false, "play the seed scenario once the sandbox is up")
	exit := fs.Bool("exit-after-demo", false, "with --demo: stop the sandbox when the demo ends (for tests and CI)")
	logs := fs.Bool("logs", false, "copy every component's output to stderr")
	if err := fs.Parse(args); err != nil {
		return err
	}
	sb, err := sandbox.Up(ctx, sandbox.Options{Nodes: *nodes, GPUs: *gpus, Queues: *queues, Out: stdout, Logs: *logs})
	if err != nil {
		return err
	}
	defer func() {
		fmt.Fprintln(stdout, "stopping the sandbox…")
		if err := sb.Down(); err != nil {
			fmt.Fprintln(stderr, "stop:", err)
		}
	}()
	fmt.Fprintf(stdout, "\nThe sandbox is up. In another terminal:\n\n  export KUBECONFIG=%s\n\n", sb.Env.Kubeconfig)
	if *demo {
		out, err := sandbox.Demo(ctx, sb.Env.Config, sandbox.DemoOptions{SeedDir: seedDir(), Out: stdout})
		if err != nil {
			return fmt.Errorf("demo: %w", err)
		}
		summarize(stdout, out)
		if *exit {
			if !out.TrainingBoundTogether || !out.InferenceBound || !out.TrainingBack || out.TrainingEvicted < 2 {
				return fmt.Errorf("the demo did not end with the seed's picture: %+v", *out)
			}
			return nil
		}
	}
	explore(stdout, sb)
	<-ctx.Done()
	return nil
}

func sandboxDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry sandbox demo", flag.ContinueOnError)
	fs.SetOutput(stderr)
	ns := fs.String("namespace", "default", "namespace to play the scenario in")
	if err := fs.Parse(args); err != nil {
		return err
	}
	st, err := sandbox.LoadState()
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", st.Kubeconfig)
	if err != nil {
		return err
	}
	out, err := sandbox.Demo(ctx, cfg, sandbox.DemoOptions{SeedDir: seedDir(), Namespace: *ns, Out: stdout, Timeout: 2 * time.Minute})
	if err != nil {
		return err
	}
	summarize(stdout, out)
	return nil
}

func summarize(w io.Writer, o *sandbox.Outcome) {
	check := func(ok bool) string {
		if ok {
			return "yes"
		}
		return "NO"
	}
	fmt.Fprintf(w, "\nSummary:\n  training gang bound together:        %s\n  inference bound:                     %s\n  training pods preempted:             %d\n  training back, whole, after delete:  %s\n",
		check(o.TrainingBoundTogether), check(o.InferenceBound), o.TrainingEvicted, check(o.TrainingBack))
}

func explore(w io.Writer, sb *sandbox.Sandbox) {
	fmt.Fprintf(w, `
Explore:
  export KUBECONFIG=%s
  bin/kubectl get queues
  bin/kubectl get pods -A -o wide
  bin/kubectl get resourceslices
  bin/kubectl get gpunodes -o yaml
  bin/gantry explain POD [-n NAMESPACE]
  bin/gantry sandbox demo              # play the seed scenario again
Metrics:
  scheduler:  %s
  node agents: %s

Ctrl-C stops everything.
`, sb.Env.Kubeconfig, sb.SchedulerMetrics, strings.Join(sb.AgentMetrics, " "))
}
