package bench

import (
	"bufio"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// CycleStats are gantry-scheduler's cycles as its cycle trace tells them
// (--cycle-trace: one line per cycle, pkg/kube/dispatch's cycleTrace).
type CycleStats struct {
	Cycles int `json:"cycles"`
	// Cycle time percentiles and maximum, in milliseconds.
	P50Ms float64 `json:"p50Ms"`
	P99Ms float64 `json:"p99Ms"`
	MaxMs float64 `json:"maxMs"`
	// TotalMs is the time spent in cycles, all together.
	TotalMs float64 `json:"totalMs"`
	// Pods sent to bind per cycle: the mean over cycles that sent any, and the most.
	BindingCycles   int     `json:"bindingCycles"`
	PodsPerCycle    float64 `json:"podsPerCycle"`
	MaxPodsPerCycle int     `json:"maxPodsPerCycle"`
	// Binds in flight when each cycle started: the mean, the share of cycles that
	// found none in flight while pods were still to bind (the pipeline ran dry), and
	// the mean of each second from the first cycle.
	InFlightMean     float64   `json:"inFlightMean"`
	DryStartShare    float64   `json:"dryStartShare"`
	InFlightBySecond []float64 `json:"inFlightBySecond,omitempty"`
}

// cycleLine is one cycle of the trace.
type cycleLine struct {
	at                            time.Time
	micros, pods, pending, flight int
}

// parseCycleTrace reads a gantry-scheduler cycle trace. An empty trace gives nil.
func parseCycleTrace(path string) (*CycleStats, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var lines []cycleLine
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if l, ok := parseTraceLine(sc.Text()); ok {
			lines = append(lines, l)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	return cycleStats(lines), nil
}

// parseTraceLine reads `start-µs<TAB>micros<TAB>pods<TAB>gangs<TAB>pending<TAB>inFlight…`;
// fields after these may be added.
func parseTraceLine(s string) (cycleLine, bool) {
	f := strings.Split(s, "\t")
	if len(f) < 6 {
		return cycleLine{}, false
	}
	var v [6]int64
	for i := range v {
		n, err := strconv.ParseInt(f[i], 10, 64)
		if err != nil {
			return cycleLine{}, false
		}
		v[i] = n
	}
	return cycleLine{at: time.UnixMicro(v[0]), micros: int(v[1]), pods: int(v[2]), pending: int(v[4]), flight: int(v[5])}, true
}

func cycleStats(lines []cycleLine) *CycleStats {
	if len(lines) == 0 {
		return nil
	}
	st := &CycleStats{Cycles: len(lines)}
	times := make([]int, 0, len(lines))
	pods, flight, dry := 0, 0, 0
	var bySecond [][2]int // sum, count
	for _, l := range lines {
		times = append(times, l.micros)
		st.TotalMs += float64(l.micros) / 1000
		flight += l.flight
		if l.pods > 0 {
			st.BindingCycles++
			pods += l.pods
			st.MaxPodsPerCycle = max(st.MaxPodsPerCycle, l.pods)
			if l.flight == 0 {
				dry++
			}
		}
		sec := int(l.at.Sub(lines[0].at) / time.Second)
		for len(bySecond) <= sec {
			bySecond = append(bySecond, [2]int{})
		}
		bySecond[sec][0] += l.flight
		bySecond[sec][1]++
	}
	slices.Sort(times)
	ms := func(us int) float64 { return round(float64(us)/1000, 2) }
	st.P50Ms, st.P99Ms, st.MaxMs = ms(percentile(times, 0.5)), ms(percentile(times, 0.99)), ms(times[len(times)-1])
	st.TotalMs = round(st.TotalMs, 1)
	st.InFlightMean = round(float64(flight)/float64(len(lines)), 1)
	if st.BindingCycles > 0 {
		st.PodsPerCycle = round(float64(pods)/float64(st.BindingCycles), 1)
		st.DryStartShare = round(float64(dry)/float64(st.BindingCycles), 2)
	}
	for _, b := range bySecond {
		v := 0.0
		if b[1] > 0 {
			v = round(float64(b[0])/float64(b[1]), 1)
		}
		st.InFlightBySecond = append(st.InFlightBySecond, v)
	}
	return st
}
