package bench

import (
	"debug/buildinfo"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"
)

// Statuses of a run. Anything else is an error message.
const (
	StatusOK           = "ok"
	StatusTimeout      = "timeout"
	StatusStalled      = "stalled"
	StatusNotSupported = "not supported yet"
)

// Result is one scheduler's run of one scenario.
type Result struct {
	Scenario  string  `json:"scenario"`
	Scheduler string  `json:"scheduler"`
	Scale     float64 `json:"scale"`
	Nodes     int     `json:"nodes"`
	Pods      int     `json:"pods"`
	Bound     int     `json:"bound"`
	// PodsPerSecond is Bound over the first-to-last-bind window.
	PodsPerSecond float64 `json:"podsPerSecond"`
	// WallPodsPerSecond is Bound over the time from the scheduler's start to the
	// last bind.
	WallPodsPerSecond float64 `json:"wallPodsPerSecond"`
	FirstBindSeconds  float64 `json:"firstBindSeconds"`
	LastBindSeconds   float64 `json:"lastBindSeconds"`
	// Ratio is gantry's PodsPerSecond over kube-scheduler's in the same scenario, on
	// gantry's row; WallRatio the same for WallPodsPerSecond.
	Ratio     float64 `json:"ratio,omitempty"`
	WallRatio float64 `json:"wallRatio,omitempty"`
	// PeakRSSMiB is the largest VmRSS sampled every 100 ms; HWMMiB the kernel's VmHWM.
	PeakRSSMiB float64     `json:"peakRSSMiB,omitempty"`
	HWMMiB     float64     `json:"hwmMiB,omitempty"`
	Gang       *GangResult `json:"gang,omitempty"`
	// ClaimsAllocated and ClaimsReserved count DRA claims at the end of the run.
	ClaimsAllocated *int `json:"claimsAllocated,omitempty"`
	ClaimsReserved  *int `json:"claimsReserved,omitempty"`
	// SetupSeconds is the time to create the namespace, nodes, pods (and claims).
	SetupSeconds float64     `json:"setupSeconds"`
	Status       string      `json:"status"`
	Goals        []GoalCheck `json:"goals,omitempty"`
}

// GangResult is what the watch saw of gangs: for each gang the time between its
// first and last member's bind (spread), and how many gangs were partly bound
// (0 < bound < size) at the worst event and at the end.
type GangResult struct {
	Gangs             int     `json:"gangs"`
	Complete          int     `json:"complete"`
	MaxSpreadSeconds  float64 `json:"maxSpreadSeconds"`
	P99SpreadSeconds  float64 `json:"p99SpreadSeconds"`
	MaxPartialAtOnce  int     `json:"maxPartialAtOnce"`
	PartialAtTheEnd   int     `json:"partialAtTheEnd"`
	SpreadGoalSeconds float64 `json:"spreadGoalSeconds,omitempty"`
}

// GoalCheck is one goal of a scenario and whether gantry met it.
type GoalCheck struct {
	Goal string `json:"goal"`
	Got  string `json:"got"`
	Met  bool   `json:"met"`
}

func (r *Result) fill(st bindStats, s Scenario) {
	r.Bound = st.Bound
	r.PodsPerSecond = round(st.podsPerSecond(), 1)
	r.WallPodsPerSecond = round(st.wallPodsPerSecond(), 1)
	r.FirstBindSeconds = round(st.FirstBind.Seconds(), 3)
	r.LastBindSeconds = round(st.LastBind.Seconds(), 3)
	if s.GangSize > 0 {
		r.Gang = &GangResult{
			Gangs: s.Gangs(), Complete: st.GangsComplete,
			MaxSpreadSeconds: round(st.GangMaxSpread.Seconds(), 3), P99SpreadSeconds: round(st.GangP99Spread.Seconds(), 3),
			MaxPartialAtOnce: st.MaxPartialGangs, PartialAtTheEnd: st.PartialGangsEnd,
			SpreadGoalSeconds: s.Goals.MaxGangSpread.Seconds(),
		}
	}
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// checkGoals fills the ratios and gantry's goal checks of one scenario's results.
func checkGoals(s Scenario, scale float64, results []Result) {
	var kube, gantry *Result
	for i := range results {
		switch results[i].Scheduler {
		case KubeScheduler.Label():
			kube = &results[i]
		case Gantry.Label():
			gantry = &results[i]
		}
	}
	if gantry == nil {
		return
	}
	ok := gantry.Status == StatusOK
	if kube != nil && kube.Status == StatusOK && ok && kube.PodsPerSecond > 0 {
		gantry.Ratio = round(gantry.PodsPerSecond/kube.PodsPerSecond, 2)
		gantry.WallRatio = round(gantry.WallPodsPerSecond/kube.WallPodsPerSecond, 2)
	}
	g := s.Goals
	add := func(goal, got string, met bool) {
		gantry.Goals = append(gantry.Goals, GoalCheck{Goal: goal, Got: got, Met: met && ok})
	}
	if g.MinRatio > 0 {
		add(fmt.Sprintf("≥ %g× kube-scheduler", g.MinRatio), fmt.Sprintf("%.2f×", gantry.Ratio), gantry.Ratio >= g.MinRatio)
	}
	if g.MinPodsPerSecond > 0 {
		add(fmt.Sprintf("≥ %g pods/s", g.MinPodsPerSecond), fmt.Sprintf("%.0f pods/s", gantry.PodsPerSecond), gantry.PodsPerSecond >= g.MinPodsPerSecond)
	}
	if g.MaxRSSMiB > 0 && gantry.HWMMiB > 0 {
		add(fmt.Sprintf("VmHWM < %g MiB", g.MaxRSSMiB), fmt.Sprintf("%.0f MiB", gantry.HWMMiB), gantry.HWMMiB < g.MaxRSSMiB)
	}
	if gantry.Gang != nil {
		add("no gang partly bound at the end", fmt.Sprintf("%d", gantry.Gang.PartialAtTheEnd), gantry.Gang.PartialAtTheEnd == 0 && gantry.Gang.Complete == gantry.Gang.Gangs)
		if g.MaxGangSpread > 0 {
			add(fmt.Sprintf("every gang's first-to-last bind ≤ %s", g.MaxGangSpread), fmt.Sprintf("max %.3fs", gantry.Gang.MaxSpreadSeconds),
				time.Duration(gantry.Gang.MaxSpreadSeconds*float64(time.Second)) <= g.MaxGangSpread)
		}
	}
	if scale != 1 {
		for i := range gantry.Goals {
			gantry.Goals[i].Goal += fmt.Sprintf(" (at scale %g)", scale)
		}
	}
}

// WriteTable prints the results as an aligned table, then the goals.
func WriteTable(w io.Writer, results []Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tscheduler\tnodes\tpods\tbound\tpods/s\tpods/s from start\tfirst bind s\tlast bind s\tgantry/kube\tVmHWM MiB\tstatus\t")
	for _, r := range results {
		ratio, mem := "", ""
		if r.Ratio > 0 {
			ratio = fmt.Sprintf("%.2f× (%.2f×)", r.Ratio, r.WallRatio)
		}
		if r.HWMMiB > 0 {
			mem = fmt.Sprintf("%.0f", r.HWMMiB)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%.0f\t%.0f\t%.2f\t%.2f\t%s\t%s\t%s\t\n",
			r.Scenario, r.Scheduler, r.Nodes, r.Pods, r.Bound, r.PodsPerSecond, r.WallPodsPerSecond,
			r.FirstBindSeconds, r.LastBindSeconds, ratio, mem, r.Status)
	}
	tw.Flush()
	for _, r := range results {
		if r.Gang != nil {
			fmt.Fprintf(w, "\n%s %s gangs: %d of %d complete; first-to-last bind per gang max %.3fs, p99 %.3fs; at most %d partly bound at once, %d at the end\n",
				r.Scenario, r.Scheduler, r.Gang.Complete, r.Gang.Gangs, r.Gang.MaxSpreadSeconds, r.Gang.P99SpreadSeconds, r.Gang.MaxPartialAtOnce, r.Gang.PartialAtTheEnd)
		}
		if r.ClaimsAllocated != nil {
			fmt.Fprintf(w, "\n%s %s DRA: %d claims allocated, %d reserved for their pod\n", r.Scenario, r.Scheduler, *r.ClaimsAllocated, *r.ClaimsReserved)
		}
	}
	var goals []string
	for _, r := range results {
		for _, g := range r.Goals {
			mark := "MET "
			if !g.Met {
				mark = "MISS"
			}
			goals = append(goals, fmt.Sprintf("  %s %s %s: %s", mark, r.Scenario, g.Goal, g.Got))
		}
	}
	if len(goals) > 0 {
		fmt.Fprintf(w, "\ngoals (gantry-scheduler):\n%s\n", strings.Join(goals, "\n"))
	}
}

// Report is the JSON result file.
type Report struct {
	Started  time.Time `json:"started"`
	Command  string    `json:"command"`
	Machine  Machine   `json:"machine"`
	Gantry   Binary    `json:"gantryScheduler"`
	QPS      int       `json:"clientQPS"`
	Results  []Result  `json:"results"`
	Duration float64   `json:"durationSeconds"`
}

// Machine says where the figures were measured.
type Machine struct {
	CPUs      int    `json:"cpus"`
	GoVersion string `json:"goVersion"`
	Kernel    string `json:"kernel,omitempty"`
}

// Binary identifies the gantry-scheduler build that was measured.
type Binary struct {
	Path     string    `json:"path"`
	Revision string    `json:"revision,omitempty"`
	Modified string    `json:"modified,omitempty"`
	Built    time.Time `json:"built"`
}

// DescribeMachine reads the CPU count, Go version and kernel release.
func DescribeMachine() Machine {
	m := Machine{CPUs: runtime.NumCPU(), GoVersion: runtime.Version()}
	if b, err := os.ReadFile("/proc/sys/kernel/osrelease"); err == nil {
		m.Kernel = strings.TrimSpace(string(b))
	}
	return m
}

// DescribeBinary reads a Go binary's VCS stamp (absent with -buildvcs=false) and
// modification time, so a report names the build it measured.
func DescribeBinary(path string) Binary {
	b := Binary{Path: path}
	if st, err := os.Stat(path); err == nil {
		b.Built = st.ModTime().UTC()
	}
	if info, err := buildinfo.ReadFile(path); err == nil {
		for _, s := range info.Settings {
			switch s.Key {
			case "vcs.revision":
				b.Revision = s.Value
			case "vcs.modified":
				b.Modified = s.Value
			}
		}
	}
	return b
}

// WriteJSON writes the report to path.
func WriteJSON(path string, rep Report) error {
	b, err := json.MarshalIndent(rep, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
