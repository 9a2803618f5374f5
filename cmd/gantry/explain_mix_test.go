package main

import (
	"context"
	"fmt"
	"io"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/gantry-dev/gantry/pkg/kube/metrics"
	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// TestWorkloadMixFromMetrics: the mix a Placer learned, published as the scheduler
// publishes it and served as its metrics endpoint serves it, is what explain reads
// back, largest share first.
func TestWorkloadMixFromMetrics(t *testing.T) {
	p, err := placement.NewOnline("")
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 300; i++ {
		p.Arrive(&model.Pod{ID: "train", Requests: model.Resources{MilliCPU: 8000, MemoryBytes: 32 << 30}, GPU: model.GPUDemand{Count: 1}})
		if i%3 == 0 {
			p.Arrive(&model.Pod{ID: "etl", Requests: model.Resources{MilliCPU: 2000, MemoryBytes: 4 << 30}})
		}
	}
	mix := p.Mix()[:2]
	reg := prometheus.NewRegistry()
	m := metrics.New(reg, nil)
	m.SetWorkloadMix([]string{placement.DescribeShape(mix[1]), placement.DescribeShape(mix[0]), `odd "quoted\ shape`},
		[]float64{mix[1].Weight, mix[0].Weight, 0.001}, p.Settings().Arrivals)
	srv := httptest.NewServer(promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	defer srv.Close()
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()

	got := parseMix(string(body))
	if len(got) != 3 {
		t.Fatalf("parseMix read %d shapes, want 3: %+v\n%s", len(got), got, body)
	}
	if got[0].Shape != "1 GPU, 8 CPUs and 32 GiB memory" || got[1].Shape != "2 CPUs and 4 GiB memory" || got[2].Shape != `odd "quoted\ shape` {
		t.Errorf("shapes = %q, %q, %q", got[0].Shape, got[1].Shape, got[2].Shape)
	}
	if got[0].Share < 0.6 || got[0].Share != mix[0].Weight {
		t.Errorf("share of the GPU shape = %v, want the learned %v (about 3/4)", got[0].Share, mix[0].Weight)
	}
	var out strings.Builder
	(&explanation{WorkloadMix: got}).printMix(&out)
	if want := fmt.Sprintf("%.1f %%  1 GPU, 8 CPUs and 32 GiB memory", 100*mix[0].Weight); !strings.Contains(out.String(), want) {
		t.Errorf("printMix = %q", out.String())
	}
}

func TestWorkloadMixWithoutScheduler(t *testing.T) {
	_, err := workloadMix(context.Background(), fake.NewSimpleClientset())
	if err == nil || !strings.Contains(err.Error(), "port named metrics") {
		t.Fatalf("workloadMix with no scheduler installed: err = %v, want one that says what is missing", err)
	}
}
