package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// BurstMetrics are gantry-scheduler's preemption counters, summed over kinds.
type BurstMetrics struct {
	// Preemptions are decisions carried out (gantry_scheduler_preemptions_total);
	// Victims the pods evicted (gantry_scheduler_preemption_victims_total).
	Preemptions float64 `json:"preemptions"`
	Victims     float64 `json:"victims"`
	// WholeGPUs and SharedVictims count whole GPUs held by victims and victims that
	// held shares; FreedGiB the GPU memory freed, whole GPUs and shares alike.
	WholeGPUs     float64 `json:"wholeGPUs"`
	SharedVictims float64 `json:"sharedVictims"`
	FreedGiB      float64 `json:"freedGiB"`
}

// scrapeBurstMetrics reads the preemption counters from a /metrics endpoint.
func scrapeBurstMetrics(ctx context.Context, url string) (BurstMetrics, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return BurstMetrics{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return BurstMetrics{}, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return BurstMetrics{}, fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return parseBurstMetrics(resp.Body)
}

// parseBurstMetrics sums the preemption counters of a Prometheus text exposition.
func parseBurstMetrics(r io.Reader) (BurstMetrics, error) {
	var m BurstMetrics
	fields := map[string]*float64{
		"gantry_scheduler_preemptions_total":                &m.Preemptions,
		"gantry_scheduler_preemption_victims_total":         &m.Victims,
		"gantry_scheduler_preempted_whole_gpus_total":       &m.WholeGPUs,
		"gantry_scheduler_preempted_shared_victims_total":   &m.SharedVictims,
		"gantry_scheduler_preempted_gpu_memory_bytes_total": &m.FreedGiB,
	}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64*1024), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "#") {
			continue
		}
		name, rest, ok := strings.Cut(line, "{")
		if !ok {
			name, rest, _ = strings.Cut(line, " ")
		} else if _, after, found := strings.Cut(rest, "} "); found {
			rest = after
		}
		dst := fields[name]
		if dst == nil {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
		if err != nil {
			return m, fmt.Errorf("metric line %q: %w", line, err)
		}
		*dst += v
	}
	m.FreedGiB /= 1 << 30
	return m, sc.Err()
}
