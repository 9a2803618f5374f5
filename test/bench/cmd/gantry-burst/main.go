// Command gantry-burst runs the live burst benchmark of issue 19 (test/bench): 8 kwok
// nodes × 8 H100 filled by 16 preemptible training RayClusters, then bursts of 1, 8
// and 32 vLLM RayServices at once, with whole GPUs and with memory shares, against the
// real kube-apiserver, etcd, kwok (with a termination grace
// period) and KubeRay operator from bin/, and gantry-scheduler.
//
//	go run ./test/bench/cmd/gantry-burst                          # make bench-burst
//	go run ./test/bench/cmd/gantry-burst -bursts 8 -modes whole -repeat 1
//
// Flags and wiring only; the benchmark is in test/bench.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/test/bench"
)

func main() {
	var o bench.BurstOptions
	bursts := flag.String("bursts", "1,8,32", "comma-separated numbers of RayServices created at once")
	modes := flag.String("modes", "whole,share", "comma-separated: whole (one GPU per service), share (-share of one GPU)")
	flag.StringVar(&o.BinDir, "bin", "", "directory of the tools (default: $GANTRY_BIN_DIR or bin/)")
	flag.StringVar(&o.GantryBinary, "gantry-scheduler", "", "gantry-scheduler binary (default: BIN/gantry-scheduler)")
	flag.IntVar(&o.Nodes, "nodes", 8, "kwok nodes")
	flag.IntVar(&o.GPUs, "gpus", 8, "H100s per node")
	flag.IntVar(&o.Training, "training", 16, "training RayClusters filling the cluster")
	flag.IntVar(&o.Workers, "workers", 4, "one-GPU workers per training RayCluster")
	flag.IntVar(&o.MinWorkers, "min-workers", 0, "minReplicas of the training workers: their gang's minimum (default: all of them)")
	flag.StringVar(&o.Share, "share", "20Gi", names.AnnotationGPUMemory+" of a service's worker in share mode")
	flag.Float64Var(&o.Utilization, "utilization", 0.75, "the vLLM engines' gpu_memory_utilization")
	flag.DurationVar(&o.Grace, "grace", 5*time.Second, "how long kwok keeps a deleted pod before it goes")
	flag.IntVar(&o.Repeat, "repeat", 3, "runs of every burst size and mode; medians are reported")
	flag.DurationVar(&o.Settle, "settle", 10*time.Second, "how long a run goes on after the last service is bound")
	flag.DurationVar(&o.Timeout, "burst-timeout", 3*time.Minute, "longest a burst may take to be bound")
	flag.StringVar(&o.WorkDir, "workdir", "", "folder for the runs' logs (default: a new temporary folder)")
	jsonOut := flag.String("json", "", "write the report as JSON to this file")
	timeout := flag.Duration("timeout", 90*time.Minute, "bound on the whole benchmark")
	flag.Parse()
	for _, b := range strings.Split(*bursts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(b))
		if err != nil || n <= 0 {
			fmt.Fprintf(os.Stderr, "gantry-burst: -bursts %q: use positive numbers, e.g. 1,8,32\n", *bursts)
			os.Exit(2)
		}
		o.Bursts = append(o.Bursts, n)
	}
	for _, m := range strings.Split(*modes, ",") {
		o.Modes = append(o.Modes, strings.TrimSpace(m))
	}
	o.Progress = os.Stderr
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, *timeout)
	defer cancel()
	rep, err := bench.RunBurst(ctx, o)
	if rep != nil {
		rep.Command = strings.Join(os.Args, " ")
		fmt.Println()
		bench.WriteBurstTable(os.Stdout, rep)
		if *jsonOut != "" {
			if werr := bench.WriteBurstJSON(*jsonOut, rep); werr != nil && err == nil {
				err = werr
			}
		}
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "gantry-burst:", err)
		os.Exit(1)
	}
}
