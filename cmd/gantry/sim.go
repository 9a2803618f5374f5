package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/sim"
)

func init() {
	register(command{
		name:    "sim",
		summary: "replay a trace through the placement core: gantry sim openb [flags]",
		run:     runSim,
	})
}

func runSim(ctx context.Context, args []string) error {
	if len(args) == 0 || args[0] != "openb" {
		return usageError{"which trace? usage: gantry sim openb [flags] (openb is the only trace so far)"}
	}
	return runSimOpenb(ctx, args[1:], os.Stdout, os.Stderr)
}

func runSimOpenb(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("gantry sim openb", flag.ContinueOnError)
	fs.SetOutput(stderr)
	nodesPath := fs.String("nodes", openbDefault("openb_node_list_gpu_node.csv"), "openb node list CSV")
	podsPath := fs.String("pods", openbDefault("openb_pod_list_default.csv"), "openb pod list CSV")
	seedSpec := fs.String("seeds", "42-51", "seeds: a list and ranges, e.g. 42-51 or 1,5,7-9")
	policySpec := fs.String("policy", placement.DefaultPolicy, "placement policies, comma-separated: "+strings.Join(placement.Policies(), ", "))
	inflate := fs.Float64("inflate", 1.3, "replay until this multiple of the cluster's GPU capacity has arrived")
	asJSON := fs.Bool("json", false, "print one JSON object instead of a table")
	outDir := fs.String("out", "", "write curves.csv, summary.csv and unallocated.png into this directory")
	publishedPath := fs.String("published", openbDefault("published_unallocated_gpu_pct.csv"), "published results to compare with (empty: none)")
	workers := fs.Int("workers", 0, "seeds replayed at once (0: one per CPU)")
	remix := fs.String("remix", "", "rebuild a published family from the trace first: multigpu20..50, gpushare40..100, gpuspec10..33, cpu050..250")
	oracleMix := fs.Bool("oracle-mix", false, "research only: give the placer the whole trace's mix before the first arrival (default: learn it from arrivals, as the scheduler does)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gantry sim openb [flags]")
		fmt.Fprintln(stderr, "\nReplays the openb trace with the published protocol (shuffle per seed, inflate by")
		fmt.Fprintln(stderr, "resampling, one pod at a time, no retries) and reports unallocated GPU % by arrived %.")
		fmt.Fprintln(stderr, "\nflags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected arguments %q", fs.Args())}
	}
	if *nodesPath == "" || *podsPath == "" {
		return usageError{"--nodes and --pods are required: no ../shared/data/openb was found next to the repository"}
	}
	seeds, err := parseSeeds(*seedSpec)
	if err != nil {
		return usageError{err.Error()}
	}
	var policies []string
	for _, p := range strings.Split(*policySpec, ",") {
		if p = strings.TrimSpace(p); p != "" {
			policies = append(policies, p)
		}
	}
	if len(policies) == 0 {
		return usageError{"--policy names no policy"}
	}

	nodes, err := sim.LoadNodes(*nodesPath)
	if err != nil {
		return fmt.Errorf("load nodes: %w", err)
	}
	tasks, err := sim.LoadTasks(*podsPath)
	if err != nil {
		return fmt.Errorf("load pods: %w", err)
	}
	workload := strings.TrimSuffix(filepath.Base(*podsPath), filepath.Ext(*podsPath))
	if *remix != "" {
		kind, fraction, err := sim.ParseRemix(*remix)
		if err != nil {
			return usageError{err.Error()}
		}
		// One fixed seed: the remixed trace is the same for every replay seed.
		if tasks, err = sim.Remix(tasks, nodes, kind, fraction, 1); err != nil {
			return err
		}
		workload += "+" + *remix
	}
	cfg := sim.Config{Nodes: nodes, Tasks: tasks, Policies: policies, Seeds: seeds, Inflate: *inflate, Workers: *workers, OracleMix: *oracleMix}

	if isTerminal(stderr) {
		bar := &progressBar{w: stderr}
		cfg.Progress = bar.update
		defer bar.finish()
	}
	start := time.Now()
	result, err := sim.Replay(ctx, cfg)
	if err != nil {
		return err
	}
	wall := time.Since(start).Seconds()

	var published []sim.Published
	if *publishedPath != "" && *remix == "" {
		if published, err = sim.LoadPublished(*publishedPath, workload); err != nil {
			return fmt.Errorf("load published results: %w", err)
		}
	}
	curves := sim.Curves(result)
	if *outDir != "" {
		if err := writeOutputs(*outDir, workload, cfg, curves, published); err != nil {
			return err
		}
	}
	if *asJSON {
		rep := sim.NewReport(cfg, result, *nodesPath, *podsPath)
		rep.Remix = *remix
		rep.OracleMix = *oracleMix
		rep.WallSeconds = math.Round(wall*10) / 10
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printTable(stdout, workload, cfg, curves, published, wall)
	return nil
}

func writeOutputs(dir, workload string, cfg sim.Config, curves []sim.Curve, published []sim.Published) error {
	if err := sim.WriteCSV(dir, workload, cfg.Inflate, curves); err != nil {
		return fmt.Errorf("write CSV: %w", err)
	}
	var lines []sim.PlotLine
	for _, c := range curves {
		lines = append(lines, sim.PlotLine{Label: c.Policy, Y: c.Mean})
	}
	for _, p := range published {
		if p.Policy == "FGD" {
			lines = append(lines, sim.PlotLine{Label: "FGD (published)", Points: p.Mean})
		}
	}
	title := fmt.Sprintf("%s: unallocated GPU, mean of %d seeds", workload, len(cfg.Seeds))
	last := int(math.Round(cfg.Inflate * 100))
	if err := sim.WritePlot(filepath.Join(dir, "unallocated.png"), title, max(0, last-50), lines); err != nil {
		return fmt.Errorf("write plot: %w", err)
	}
	return nil
}

func printTable(w io.Writer, workload string, cfg sim.Config, curves []sim.Curve, published []sim.Published, wall float64) {
	points := sim.Checkpoints(cfg.Inflate)
	fmt.Fprintf(w, "%s: unallocated GPU %% by arrived %%, mean ± sd over %d seeds (lower is better)\n\n", workload, len(cfg.Seeds))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "policy\t"
	for _, x := range points {
		header += strconv.Itoa(x) + "\t"
	}
	fmt.Fprintln(tw, header)
	for _, c := range curves {
		row := c.Policy + "\t"
		for _, x := range points {
			if x < len(c.Mean) {
				row += fmt.Sprintf("%.2f ± %.2f\t", c.Mean[x], c.SD[x])
			} else {
				row += "\t"
			}
		}
		fmt.Fprintln(tw, row)
	}
	for _, p := range published {
		row := p.Policy + " (published)\t"
		for _, x := range points {
			if v, ok := p.Mean[x]; ok {
				row += fmt.Sprintf("%.2f\t", v)
			} else {
				row += "-\t"
			}
		}
		fmt.Fprintln(tw, row)
	}
	tw.Flush()
	fmt.Fprintf(w, "\n%d nodes, %d tasks, %d seeds, %.1fs\n", len(cfg.Nodes), len(cfg.Tasks), len(cfg.Seeds), wall)
}

// parseSeeds reads "42-51" or "1,5,7-9".
func parseSeeds(spec string) ([]uint64, error) {
	var seeds []uint64
	for _, part := range strings.Split(spec, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		lo, hi, isRange := strings.Cut(part, "-")
		from, err := strconv.ParseUint(lo, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("--seeds: %q is not a seed or a range", part)
		}
		to := from
		if isRange {
			if to, err = strconv.ParseUint(hi, 10, 64); err != nil || to < from {
				return nil, fmt.Errorf("--seeds: %q is not a seed or a range", part)
			}
		}
		for s := from; s <= to; s++ {
			seeds = append(seeds, s)
		}
	}
	if len(seeds) == 0 {
		return nil, fmt.Errorf("--seeds names no seed")
	}
	return seeds, nil
}

// openbDefault finds a file of ../shared/data/openb, relative to the working
// directory or to the repository root above it; "" when there is none.
func openbDefault(file string) string {
	candidates := []string{filepath.Join("..", "shared", "data", "openb", file)}
	if dir, err := os.Getwd(); err == nil {
		for {
			if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
				candidates = append(candidates, filepath.Join(dir, "..", "shared", "data", "openb", file))
				break
			}
			parent := filepath.Dir(dir)
			if parent == dir {
				break
			}
			dir = parent
		}
	}
	for _, c := range candidates {
		if _, err := os.Stat(c); err == nil {
			return c
		}
	}
	return ""
}

func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	info, err := f.Stat()
	return err == nil && info.Mode()&os.ModeCharDevice != 0
}

// progressBar draws "[#####-----]  50%" on a terminal, at most ten times a second.
type progressBar struct {
	w     io.Writer
	mu    sync.Mutex
	last  time.Time
	shown bool
}

func (b *progressBar) update(done, total int64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if done < total && time.Since(b.last) < 100*time.Millisecond {
		return
	}
	b.last = time.Now()
	const width = 40
	filled := int(float64(width) * float64(done) / float64(max(total, 1)))
	fmt.Fprintf(b.w, "\r[%s%s] %3d%%  %d/%d tasks", strings.Repeat("#", filled), strings.Repeat("-", width-filled), 100*done/max(total, 1), done, total)
	b.shown = true
}

func (b *progressBar) finish() {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.shown {
		fmt.Fprint(b.w, "\r\033[K")
	}
}
