package convert

import (
	"encoding/json"
	"math"
	"testing"

	"github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
)

// FuzzQueueSpec reads any Queue JSON the API server could store (JSON has no NaN or
// infinity, but has 1e308), converts it to the model and validates it. A Queue that
// fairshare.Validate accepts must have finite bounds in model units: memory is scaled
// from megabytes to bytes, and 1e308 MB is not a number of bytes.
func FuzzQueueSpec(f *testing.F) {
	f.Add([]byte(`{"metadata":{"name":"a"},"spec":{"resources":{"gpu":{"quota":2,"limit":4,"overQuotaWeight":1},"memory":{"quota":1000,"limit":-1}}}}`))
	f.Add([]byte(`{"metadata":{"name":"a"},"spec":{"resources":{"memory":{"quota":1e305,"limit":1e306,"overQuotaWeight":1}}}}`))
	f.Add([]byte(`{"metadata":{"name":"a"},"spec":{"parentQueue":"a","priority":-5,"resources":{"gpuModels":[{"model":" NVIDIA  A10G ","quota":1,"limit":1},{"model":"","quota":-1,"limit":-1}]}}}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		var q v1alpha1.Queue
		if err := json.Unmarshal(raw, &q); err != nil {
			return
		}
		m := Queue(&q)
		queues := map[string]*model.Queue{q.Name: m}
		if fairshare.Validate(queues) != nil {
			return
		}
		for r, b := range m.Resources {
			for _, v := range []float64{b.Quota, b.Limit, b.OverQuotaWeight} {
				if math.IsNaN(v) || math.IsInf(v, 0) {
					t.Fatalf("queue accepted with %s bounds %+v (spec %s)", r, b, raw)
				}
			}
		}
		shares, _ := fairshare.Compute(queues, fairshare.Amounts{model.ResourceGPU: 8, model.ResourceMemory: 1e12}, nil)
		for r := range m.Resources {
			if fs := shares.FairShare(q.Name, r); math.IsNaN(fs) || math.IsInf(fs, 0) {
				t.Fatalf("fair share of %s is %v for an accepted queue %s", r, fs, raw)
			}
		}
		_ = ResourceAmounts(fairshare.Amounts{model.ResourceGPU: 1})
	})
}
