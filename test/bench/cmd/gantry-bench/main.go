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
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/gantry-dev/gantry/test/bench"
	"github.com/gantry-dev/gantry/test/testenv"
)

func main() {
	var (
		scenarios = flag.String("scenarios", "all", "comma-separated scenarios to run: a, b, c, d, or all")
		scale     = flag.Float64("scale", 1, "multiply every scenario's nodes and pods by this (0.1 for a quick run)")
		qps       = flag.Int("qps", 5000, "client QPS and burst of both schedulers and of the harness")
		workers   = flag.Int("workers", 48, "goroutines creating nodes and pods")
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
	if err := run(*scenarios, *jsonOut, *timeout, bench.Options{
		BinDir: *binDir, GantryBinary: *gantry, Scale: *scale, QPS: *qps, Workers: *workers,
		RunTimeout: *runTO, StallTimeout: *stallTO, WorkDir: *workDir,
		CPUProfile: *cpuProf, HeapProfile: *heapProf, Progress: os.Stderr,
	}); err != nil {
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
	started := time.Now()
	results, runErr := bench.Run(ctx, scenarios, opts)
	fmt.Println()
	bench.WriteTable(os.Stdout, results)
	if jsonOut != "" {
		gantryBin := opts.GantryBinary
		if gantryBin == "" {
			dir := opts.BinDir
			if dir == "" {
				if dir, err = testenv.BinDir(); err != nil {
					return err
				}
			}
			gantryBin = filepath.Join(dir, "gantry-scheduler")
		}
		rep := bench.Report{
			Started: started.UTC(), Command: strings.Join(os.Args, " "), Machine: bench.DescribeMachine(),
			Gantry: bench.DescribeBinary(gantryBin), QPS: opts.QPS, Results: results,
			Duration: time.Since(started).Seconds(),
		}
		if err := bench.WriteJSON(jsonOut, rep); err != nil {
			return err
		}
	}
	return runErr
}
