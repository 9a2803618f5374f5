package sim

import (
	"encoding/csv"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
)

// Curve is one policy's mean over seeds: Mean[x] and SD[x] are the unallocated GPU %
// once x% of the capacity has arrived.
type Curve struct {
	Policy string
	Mean   []float64
	SD     []float64
	// PerSeed holds each seed's run, in seed order.
	PerSeed []Run
}

// Curves averages the runs of each policy over seeds, policies in first-seen order.
func Curves(r Result) []Curve {
	var curves []Curve
	index := map[string]int{}
	for _, run := range r.Runs {
		i, ok := index[run.Policy]
		if !ok {
			i = len(curves)
			index[run.Policy] = i
			curves = append(curves, Curve{Policy: run.Policy})
		}
		curves[i].PerSeed = append(curves[i].PerSeed, run)
	}
	for i := range curves {
		c := &curves[i]
		points := len(c.PerSeed[0].Unallocated)
		c.Mean = make([]float64, points)
		c.SD = make([]float64, points)
		for x := 0; x < points; x++ {
			var sum, sumSq float64
			for _, run := range c.PerSeed {
				sum += run.Unallocated[x]
			}
			n := float64(len(c.PerSeed))
			mean := sum / n
			for _, run := range c.PerSeed {
				sumSq += (run.Unallocated[x] - mean) * (run.Unallocated[x] - mean)
			}
			c.Mean[x] = mean
			if n > 1 {
				c.SD[x] = math.Sqrt(sumSq / (n - 1))
			}
		}
	}
	return curves
}

// PolicyReport is one policy's figures in the JSON report.
type PolicyReport struct {
	// UnallocatedPct maps an arrived percentage ("90", "100", "130") to the mean
	// unallocated GPU % over seeds.
	UnallocatedPct   map[string]float64 `json:"unallocated_pct"`
	UnallocatedPctSD map[string]float64 `json:"unallocated_pct_sd"`
	// PerSeed maps a seed ("42") to its unallocated GPU % by arrived percentage.
	PerSeed map[string]map[string]float64 `json:"per_seed"`
	// Failed is the mean number of tasks that fit nowhere, per seed.
	Failed float64 `json:"failed_tasks"`
}

// Report is what `gantry sim openb --json` prints. Its top-level figures are those
// of the first policy; with several policies, Policies holds each one's.
type Report struct {
	Nodes string `json:"nodes"`
	Pods  string `json:"pods"`
	// Remix is the --remix the trace was resampled with, if any.
	Remix string `json:"remix,omitempty"`
	// OracleMix is true when the placer was given the whole trace's mix in advance
	// (research only: the scheduler learns it from arrivals).
	OracleMix bool     `json:"oracleMix,omitempty"`
	GPUs      int64    `json:"gpus"`
	Tasks     int      `json:"tasks"`
	Policy    string   `json:"policy"`
	Seeds     []uint64 `json:"seeds"`
	Inflate   float64  `json:"inflate"`
	PolicyReport
	Policies    map[string]PolicyReport `json:"policies,omitempty"`
	WallSeconds float64                 `json:"wall_seconds"`
}

// NewReport builds the JSON report of an experiment.
func NewReport(cfg Config, r Result, nodesPath, podsPath string) Report {
	curves := Curves(r)
	rep := Report{
		Nodes: nodesPath, Pods: podsPath, GPUs: r.CapacityMilli / 1000, Tasks: len(cfg.Tasks),
		Seeds: cfg.Seeds, Inflate: cfg.Inflate,
	}
	points := Checkpoints(cfg.Inflate)
	for i, c := range curves {
		pr := PolicyReport{
			UnallocatedPct:   map[string]float64{},
			UnallocatedPctSD: map[string]float64{},
			PerSeed:          map[string]map[string]float64{},
		}
		for _, x := range points {
			if x >= len(c.Mean) {
				continue
			}
			key := strconv.Itoa(x)
			pr.UnallocatedPct[key] = round3(c.Mean[x])
			pr.UnallocatedPctSD[key] = round3(c.SD[x])
		}
		for _, run := range c.PerSeed {
			seed := map[string]float64{}
			for _, x := range points {
				if x < len(run.Unallocated) {
					seed[strconv.Itoa(x)] = round3(run.Unallocated[x])
				}
			}
			pr.PerSeed[strconv.FormatUint(run.Seed, 10)] = seed
			pr.Failed += float64(run.Failed) / float64(len(c.PerSeed))
		}
		if i == 0 {
			rep.Policy = c.Policy
			rep.PolicyReport = pr
		}
		if len(curves) > 1 {
			if rep.Policies == nil {
				rep.Policies = map[string]PolicyReport{}
			}
			rep.Policies[c.Policy] = pr
		}
	}
	return rep
}

func round3(v float64) float64 { return math.Round(v*1000) / 1000 }

// WriteCSV writes curves.csv (every seed's unallocated GPU % at every arrived
// percentage) and summary.csv (mean and standard deviation at the checkpoints, in
// the columns of the published results file) into dir.
func WriteCSV(dir, workload string, inflate float64, curves []Curve) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	var all [][]string
	all = append(all, []string{"policy", "seed", "arrived_pct", "unallocated_pct"})
	for _, c := range curves {
		for _, run := range c.PerSeed {
			for x, v := range run.Unallocated {
				all = append(all, []string{c.Policy, strconv.FormatUint(run.Seed, 10), strconv.Itoa(x), strconv.FormatFloat(v, 'f', 3, 64)})
			}
		}
	}
	if err := writeCSVFile(filepath.Join(dir, "curves.csv"), all); err != nil {
		return err
	}
	summary := [][]string{{"workload", "policy", "arrived_pct", "unallocated_pct_mean", "unallocated_pct_sd", "n_seeds"}}
	for _, c := range curves {
		for _, x := range Checkpoints(inflate) {
			if x >= len(c.Mean) {
				continue
			}
			summary = append(summary, []string{workload, c.Policy, strconv.Itoa(x),
				strconv.FormatFloat(c.Mean[x], 'f', 2, 64), strconv.FormatFloat(c.SD[x], 'f', 2, 64), strconv.Itoa(len(c.PerSeed))})
		}
	}
	return writeCSVFile(filepath.Join(dir, "summary.csv"), summary)
}

func writeCSVFile(path string, rows [][]string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	if err := w.WriteAll(rows); err != nil {
		f.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return f.Close()
}

// Published is one published result: a policy's mean unallocated GPU % by arrived
// percentage.
type Published struct {
	Policy string
	Mean   map[int]float64
}

// LoadPublished reads published_unallocated_gpu_pct.csv rows for one workload (the
// pod list's file name without .csv).
func LoadPublished(path, workload string) ([]Published, error) {
	rows, err := readCSV(path, []string{"workload", "policy", "arrived_pct", "unallocated_pct_mean"})
	if err != nil {
		return nil, err
	}
	var out []Published
	index := map[string]int{}
	for _, rec := range rows.records {
		if rows.get(rec, "workload") != workload {
			continue
		}
		policy := rows.get(rec, "policy")
		x, err := strconv.Atoi(rows.get(rec, "arrived_pct"))
		if err != nil {
			return nil, fmt.Errorf("%s: arrived_pct: %w", path, err)
		}
		mean, err := strconv.ParseFloat(rows.get(rec, "unallocated_pct_mean"), 64)
		if err != nil {
			return nil, fmt.Errorf("%s: unallocated_pct_mean: %w", path, err)
		}
		i, ok := index[policy]
		if !ok {
			i = len(out)
			index[policy] = i
			out = append(out, Published{Policy: policy, Mean: map[int]float64{}})
		}
		out[i].Mean[x] = mean
	}
	return out, nil
}
