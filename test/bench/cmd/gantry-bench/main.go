// Command gantry-bench runs the scheduler throughput benchmark: gantry-scheduler
// against kube-scheduler v1.37.2 on fresh control planes from bin/ (test/bench).
//
//	go run ./test/bench/cmd/gantry-bench                        # scenarios a, b, c, d
//	go run ./test/bench/cmd/gantry-bench -scenarios a,c -scale 0.1   # a quick look
//	go run ./test/bench/cmd/gantry-bench -scenarios a -cpuprofile cpu.pprof
//	go run ./test/bench/cmd/gantry-bench -scenarios scale -repeat 3  # issue 21, beside the floor
//	go run ./test/bench/cmd/gantry-bench -scenarios drain-5k -schedulers floor,gantry -profile-dir prof
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
		scenarios = flag.String("scenarios", "all", "comma-separated scenarios to run: a, b, c, d, e, or all (a to e); scale (every scale scenario) or drain-5k, drain-20k, drain-100k, gang-1k, gang-5k, steady-RATE-NODESk")
		only      = flag.String("schedulers", "", "run only these schedulers of each scenario: gantry, kube, floor (default: the scenario's)")
		scale     = flag.Float64("scale", 1, "multiply every scenario's nodes and pods by this (0.1 for a quick run)")
		qps       = flag.Int("qps", 5000, "client QPS and burst of both schedulers and of the harness")
		workers   = flag.Int("workers", 48, "goroutines creating nodes and pods")
		repeat    = flag.Int("repeat", 1, "run every scenario this many times, alternating the schedulers; medians decide the goals")
		binDir    = flag.String("bin", "", "directory of kube-apiserver, etcd, kube-scheduler… (default: $GANTRY_BIN_DIR or bin/)")
		gantry    = flag.String("gantry-scheduler", "", "gantry-scheduler binary (default: BIN/gantry-scheduler)")
		runTO     = flag.Duration("run-timeout", 5*time.Minute, "longest one scheduler may take to bind a scenario's pods")
		stallTO   = flag.Duration("stall-timeout", time.Minute, "give a run up when no pod was bound for this long (for gantry-scheduler counted from its readiness: informers synced)")
		timeout   = flag.Duration("timeout", 60*time.Minute, "bound on the whole benchmark")
		jsonOut   = flag.String("json", "", "write the results as JSON to this file")
		workDir   = flag.String("workdir", "", "folder for the schedulers' logs (default: a new temporary folder)")
		cpuProf   = flag.String("cpuprofile", "", "run gantry-scheduler in-process and write a CPU profile of each scenario to SCENARIO-FILE")
		heapProf  = flag.String("heapprofile", "", "run gantry-scheduler in-process and write a heap profile at the last bind to SCENARIO-FILE")
		profDir   = flag.String("profile-dir", "", "run gantry-scheduler's binary with --profiling-address and save its CPU (first -profile-seconds), heap, block, mutex and goroutine profiles of each run here")
		profSecs  = flag.Duration("profile-seconds", 10*time.Second, "length of the CPU profile of each run with -profile-dir")
	)
	flag.Parse()
	opts := bench.Options{
		BinDir: *binDir, GantryBinary: *gantry, Scale: *scale, QPS: *qps, Workers: *workers, Repeat: *repeat,
		RunTimeout: *runTO, StallTimeout: *stallTO, WorkDir: *workDir,
		CPUProfile: *cpuProf, HeapProfile: *heapProf, Progress: os.Stderr,
		ProfileDir: *profDir, ProfileSeconds: *profSecs,
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
	bench.WriteScaleTable(os.Stdout, rep.Results)
	if jsonOut != "" {
		rep.Command = strings.Join(os.Args, " ")
		if err := bench.WriteJSON(jsonOut, *rep); err != nil {
			return err
		}
	}
	return runErr
}
