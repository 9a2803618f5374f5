package convert

import (
	"os"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
	"github.com/gantry-dev/gantry/pkg/fairshare"
	"github.com/gantry-dev/gantry/pkg/model"
)

func TestQueueUnits(t *testing.T) {
	var q v1alpha1.Queue
	err := yaml.Unmarshal([]byte(`
apiVersion: scheduling.gantry.dev/v1alpha1
kind: Queue
metadata: {name: team-a}
spec:
  parentQueue: department-1
  resources:
    gpu: {quota: 2, limit: 4, overQuotaWeight: 2}
    cpu: {quota: 8000, limit: -1, overQuotaWeight: 1}
    memory: {quota: 32000, limit: 64000, overQuotaWeight: 1}
    gpuModels:
    - {model: NVIDIA H100 80GB HBM3, quota: 1, limit: 2, overQuotaWeight: 1}
`), &q)
	if err != nil {
		t.Fatal(err)
	}
	got := Queue(&q)
	want := map[model.ResourceName]model.QueueResource{
		model.ResourceGPU:    {Quota: 2, Limit: 4, OverQuotaWeight: 2},
		model.ResourceCPU:    {Quota: 8000, Limit: -1, OverQuotaWeight: 1},
		model.ResourceMemory: {Quota: 32e9, Limit: 64e9, OverQuotaWeight: 1},
		// Model names are canonicalised: spaces become dashes, as GFD writes them.
		model.GPUModelResource("NVIDIA-H100-80GB-HBM3"): {Quota: 1, Limit: 2, OverQuotaWeight: 1},
	}
	if got.Name != "team-a" || got.Parent != "department-1" || got.Priority != v1alpha1.DefaultQueuePriority {
		t.Errorf("got name %q parent %q priority %d", got.Name, got.Parent, got.Priority)
	}
	if len(got.Resources) != len(want) {
		t.Errorf("got %d resources, want %d: %v", len(got.Resources), len(want), got.Resources)
	}
	for r, w := range want {
		if got.Resources[r] != w {
			t.Errorf("%s = %+v, want %+v", r, got.Resources[r], w)
		}
	}
}

// The seed queues (written for KAI Scheduler) apply with only the apiVersion changed,
// and come out as an all-unlimited tree.
func TestSeedQueues(t *testing.T) {
	data, err := os.ReadFile("testdata/queues.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var items []v1alpha1.Queue
	for _, doc := range splitYAML(data) {
		var q v1alpha1.Queue
		if err := yaml.UnmarshalStrict(doc, &q); err != nil {
			t.Fatalf("seed queue does not match the v1alpha1 schema: %v", err)
		}
		items = append(items, q)
	}
	queues := Queues(items)
	if err := fairshare.Validate(queues); err != nil {
		t.Fatalf("seed queues: %v", err)
	}
	if queues["team-a"].Parent != "department-1" {
		t.Errorf("team-a parent = %q", queues["team-a"].Parent)
	}
	for _, name := range []string{"department-1", "team-a"} {
		for r, b := range queues[name].Resources {
			if b.Quota != model.Unlimited || b.Limit != model.Unlimited || b.OverQuotaWeight != 1 {
				t.Errorf("%s %s = %+v, want -1/-1/1", name, r, b)
			}
		}
	}
}

func TestStatusAmountsInSpecUnits(t *testing.T) {
	queues := map[string]*model.Queue{"team-a": {Name: "team-a", Priority: 100}}
	h100 := model.GPUModelResource("NVIDIA H100 80GB HBM3")
	shares, err := fairshare.Compute(queues, fairshare.Amounts{model.ResourceGPU: 8, model.ResourceMemory: 64e9, h100: 8},
		map[string]fairshare.Usage{"team-a": {
			Allocated: fairshare.Amounts{model.ResourceGPU: 1, model.ResourceMemory: 2e9, h100: 1},
			Requested: fairshare.Amounts{model.ResourceGPU: 2, model.ResourceMemory: 3e9, h100: 2},
		}})
	if err != nil {
		t.Fatal(err)
	}
	alloc, req, fair := StatusAmounts(shares, "team-a")
	if alloc.GPU != 1 || alloc.Memory != 2000 || alloc.GPUModels["NVIDIA H100 80GB HBM3"] != 1 {
		t.Errorf("allocated = %+v", alloc)
	}
	if req.GPU != 2 || req.Memory != 3000 {
		t.Errorf("requested = %+v", req)
	}
	if fair.GPU != 2 || fair.Memory != 3000 {
		t.Errorf("fair share = %+v", fair)
	}
	if a, _, _ := StatusAmounts(shares, "unknown"); a != nil {
		t.Errorf("unknown queue: %+v", a)
	}
}
