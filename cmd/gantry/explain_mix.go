package main

import (
	"context"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/gantry-dev/gantry/pkg/kube/metrics"
)

// mixShare is one shape of the workload mix the scheduler scores placements
// against, as its metrics endpoint publishes it.
type mixShare struct {
	Shape string  `json:"shape"`
	Share float64 `json:"share"`
}

// schedulerComponent selects the chart's scheduler Services, its metrics one among
// them.
const schedulerComponent = "app.kubernetes.io/component=scheduler"

// workloadMix reads the learned workload mix from the scheduler's metrics Service
// (found by the chart's component label, in any namespace) through the API
// server's service proxy. It returns why not when it cannot.
func workloadMix(ctx context.Context, client kubernetes.Interface) ([]mixShare, error) {
	svcs, err := client.CoreV1().Services("").List(ctx, metav1.ListOptions{LabelSelector: schedulerComponent})
	if err != nil {
		return nil, fmt.Errorf("list the scheduler's Services (%s): %w", schedulerComponent, err)
	}
	var errs []string
	for _, svc := range svcs.Items {
		for _, port := range svc.Spec.Ports {
			if port.Name != "metrics" {
				continue
			}
			body, err := client.CoreV1().Services(svc.Namespace).ProxyGet("http", svc.Name, port.Name, "/metrics", nil).DoRaw(ctx)
			if err != nil {
				errs = append(errs, fmt.Sprintf("%s/%s: %v", svc.Namespace, svc.Name, err))
				continue
			}
			return parseMix(string(body)), nil
		}
	}
	if len(errs) == 0 {
		return nil, fmt.Errorf("no Service labelled %s has a port named metrics: is Gantry's scheduler installed with its chart?", schedulerComponent)
	}
	return nil, fmt.Errorf("read the scheduler's metrics: %s", strings.Join(errs, "; "))
}

// printMix prints the workload mix section of `gantry explain`.
func (e *explanation) printMix(w io.Writer) {
	switch {
	case e.MixUnavailable != "":
		fmt.Fprintf(w, "Workload mix: not available: %s\n", e.MixUnavailable)
	case len(e.WorkloadMix) > 0:
		fmt.Fprintln(w, "Workload mix the scheduler scores placements against (learned from the pods it has seen)")
		for _, m := range e.WorkloadMix {
			fmt.Fprintf(w, "  %5.1f %%  %s\n", 100*m.Share, m.Shape)
		}
	}
}

// parseMix picks the workload-mix series out of Prometheus text exposition, largest
// share first.
func parseMix(text string) []mixShare {
	prefix := metrics.WorkloadMixMetric + `{shape="`
	var out []mixShare
	for _, line := range strings.Split(text, "\n") {
		rest, ok := strings.CutPrefix(line, prefix)
		if !ok {
			continue
		}
		shape, rest, ok := unquoteLabel(rest)
		if !ok {
			continue
		}
		fields := strings.Fields(strings.TrimPrefix(rest, "}"))
		if len(fields) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(fields[0], 64); err == nil {
			out = append(out, mixShare{Shape: shape, Share: v})
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Share > out[j].Share })
	return out
}

// unquoteLabel reads an escaped label value up to its closing quote and returns it
// and what follows the quote.
func unquoteLabel(s string) (string, string, bool) {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c == '"':
			return b.String(), s[i+1:], true
		case c == '\\' && i+1 < len(s):
			i++
			if s[i] == 'n' {
				b.WriteByte('\n')
			} else {
				b.WriteByte(s[i])
			}
		default:
			b.WriteByte(c)
		}
	}
	return "", "", false
}
