// Command gantry-bench runs the scheduler throughput benchmark: gantry-scheduler
// against kube-scheduler v1.37.2 on fresh control planes from bin/ (test/bench).
//
//	go run ./test/bench/cmd/gantry-bench                        # scenarios a, b, c, d
//	go run ./test/bench/cmd/gantry-bench -scenarios a,c -scale 0.1   # a quick look
//	go run ./test/bench/cmd/gantry-bench -scenarios a -cpuprofile cpu.pprof
//
// Flags and wiring only; the benchmark is in test/bench.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/test/bench"
)

func main() {
	var (
		scenarios = flag.String("scenarios", "all", "comma-separated scenarios to run: a, b, c, d, e, or all")
		only      = flag.String("schedulers", "", "run only these schedulers of each scenario: gantry, kube (default: the scenario's)")
		scale     = flag.Float64("scale", 1, "multiply every scenario's nodes and pods by this (0.1 for a quick run)")
		qps       = flag.Int("qps", 5000, "client QPS and burst of both schedulers and of the harness")
		workers   = flag.Int("workers", 48, "goroutines creating nodes and pods")
		repeat    = flag.Int("repeat", 1, "run every scenario this many times, alternating the schedulers; medians decide the goals")
		binDir    = flag.String("bin", "", "directory of kube-apiserver, etcd, kube-scheduler… (default: $GANTRY_BIN_DIR or bin/)")
		gantry    = flag.String("gantry-scheduler", "", "gantry-scheduler binary (default: BIN/gantry-scheduler)")
		runTO     = flag.Duration("run-timeout", 5*time.Minute, "longest one scheduler may take to bind a scenario's pods")
		stallTO   = flag.Duration("stall-timeout", time.Minute, "give a run up when no pod was bound for this long")
		timeout   = flag.Duration("timeout", 60*time.Minute, "bound on the whole benchmark")
		jsonOut   = flag.String("json", "", "write the results as JSON to this file")
		workDir   = flag.String("workdir", "", "folder for the schedulers' logs (default: a new temporary folder)")
		cpuProf   = flag.String("cpuprofile", "", "run gantry-scheduler in-process and write a CPU profile of each scenario to SCENARIO-FILE")
		heapProf  = flag.String("heapprofile", "", "run gantry-scheduler in-process and write a heap profile at the last bind to SCENARIO-FILE")
	)
	flag.Parse()
	opts := bench.Options{
		BinDir: *binDir, GantryBinary: *gantry, Scale: *scale, QPS: *qps, Workers: *workers, Repeat: *repeat,
		RunTimeout: *runTO, StallTimeout: *stallTO, WorkDir: *workDir,
		CPUProfile: *cpuProf, HeapProfile: *heapProf, Progress: os.Stderr,
	}
	if *only != "" {
		var err error
		if opts.Only, err = bench.ParseSchedulers(*only); err != nil {
			fmt.Fprintln(os.Stderr, "gantry-bench:", err)
			os.Exit(2)
		}
	}
	if err := run(*scenarios, *jsonOut, *timeout, opts); err != nil {
		fmt.Fprintln(os.Stderr, "gantry-bench:", err)
		os.Exit(1)
	}
}

func run(names, jsonOut string, timeout time.Duration, opts bench.Options) error {
	scenarios, err := bench.Select(names)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	rep, runErr := bench.Run(ctx, scenarios, opts)
	if rep == nil {
		return runErr
	}
	fmt.Println()
	bench.WriteTable(os.Stdout, rep.Results, rep.Summary)
	if jsonOut != "" {
		rep.Command = strings.Join(os.Args, " ")
		if err := bench.WriteJSON(jsonOut, *rep); err != nil {
			return err
		}
	}
	return runErr
}
