package fairshare

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

const (
	gpu    = model.ResourceGPU
	cpu    = model.ResourceCPU
	memory = model.ResourceMemory
)

var (
	h100 = model.GPUModelResource("NVIDIA H100 80GB HBM3")
	a10g = model.GPUModelResource("NVIDIA A10G")
)

// bound is a quota/limit/overQuotaWeight triple, as written in a Queue spec.
func bound(quota, limit, weight float64) model.QueueResource {
	return model.QueueResource{Quota: quota, Limit: limit, OverQuotaWeight: weight}
}

func queue(name, parent string, priority int32, resources map[model.ResourceName]model.QueueResource) *model.Queue {
	return &model.Queue{Name: name, Parent: parent, Priority: priority, Resources: resources}
}

func tree(qs ...*model.Queue) map[string]*model.Queue {
	out := map[string]*model.Queue{}
	for _, q := range qs {
		out[q.Name] = q
	}
	return out
}

// seedQueues are /work/shared/seed/queues.yaml as the scheduler sees them: department-1
// and its child team-a, every resource -1/-1/1, priority 100 by default.
func seedQueues() map[string]*model.Queue {
	unlimited := map[model.ResourceName]model.QueueResource{
		gpu: bound(-1, -1, 1), cpu: bound(-1, -1, 1), memory: bound(-1, -1, 1),
	}
	return tree(
		queue("department-1", "", 100, unlimited),
		queue("team-a", "department-1", 100, unlimited),
	)
}

func requested(amounts Amounts) Usage { return Usage{Requested: amounts} }

func near(a, b float64) bool { return math.Abs(a-b) < 1e-6 }

func TestComputeFairShares(t *testing.T) {
	gpuOnly := func(quota, limit, weight float64) map[model.ResourceName]model.QueueResource {
		return map[model.ResourceName]model.QueueResource{gpu: bound(quota, limit, weight)}
	}
	tests := []struct {
		name     string
		queues   map[string]*model.Queue
		capacity Amounts
		usage    map[string]Usage
		want     map[string]Amounts
	}{
		{
			name:     "seed queues: the one A10G goes to team-a, which asks for two (train and inference)",
			queues:   seedQueues(),
			capacity: Amounts{gpu: 1, cpu: 8000, memory: 32e9},
			usage: map[string]Usage{"team-a": {
				Allocated: Amounts{gpu: 1, cpu: 2000, memory: 3 << 30},
				Requested: Amounts{gpu: 2, cpu: 4000, memory: 22 << 30},
			}},
			want: map[string]Amounts{
				"department-1": {gpu: 1, cpu: 4000, memory: 22 << 30},
				"team-a":       {gpu: 1, cpu: 4000, memory: 22 << 30},
			},
		},
		{
			name: "a quota of -1 with a finite limit: all its demand, up to the limit (KAI's meaning)",
			queues: tree(
				queue("team-a", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(2, -1, 1), cpu: bound(-1, 3000, 1)}),
				queue("team-b", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(2, -1, 1), cpu: bound(-1, -1, 1)}),
			),
			capacity: Amounts{gpu: 4, cpu: 8000},
			usage: map[string]Usage{
				"team-a": requested(Amounts{cpu: 6000}),
				"team-b": requested(Amounts{cpu: 2000}),
			},
			want: map[string]Amounts{"team-a": {cpu: 3000}, "team-b": {cpu: 2000}},
		},
		{
			name: "borrowing: team-a uses team-b's idle quota",
			queues: tree(
				queue("team-a", "", 100, gpuOnly(4, -1, 1)),
				queue("team-b", "", 100, gpuOnly(4, -1, 1)),
			),
			capacity: Amounts{gpu: 8},
			usage:    map[string]Usage{"team-a": requested(Amounts{gpu: 8})},
			want:     map[string]Amounts{"team-a": {gpu: 8}, "team-b": {gpu: 0}},
		},
		{
			name: "borrowing ends when the lender asks: each back to its quota",
			queues: tree(
				queue("team-a", "", 100, gpuOnly(4, -1, 1)),
				queue("team-b", "", 100, gpuOnly(4, -1, 1)),
			),
			capacity: Amounts{gpu: 8},
			usage: map[string]Usage{
				"team-a": {Allocated: Amounts{gpu: 8}, Requested: Amounts{gpu: 8}},
				"team-b": requested(Amounts{gpu: 4}),
			},
			want: map[string]Amounts{"team-a": {gpu: 4}, "team-b": {gpu: 4}},
		},
		{
			name: "the lender asking for part of its quota leaves the rest borrowed",
			queues: tree(
				queue("team-a", "", 100, gpuOnly(4, -1, 1)),
				queue("team-b", "", 100, gpuOnly(4, -1, 1)),
			),
			capacity: Amounts{gpu: 8},
			usage: map[string]Usage{
				"team-a": requested(Amounts{gpu: 8}),
				"team-b": requested(Amounts{gpu: 1}),
			},
			want: map[string]Amounts{"team-a": {gpu: 7}, "team-b": {gpu: 1}},
		},
		{
			name: "spare capacity by overQuotaWeight among equal priority",
			queues: tree(
				queue("heavy", "", 100, gpuOnly(0, -1, 3)),
				queue("light", "", 100, gpuOnly(0, -1, 1)),
			),
			capacity: Amounts{gpu: 8},
			usage: map[string]Usage{
				"heavy": requested(Amounts{gpu: 100}),
				"light": requested(Amounts{gpu: 100}),
			},
			want: map[string]Amounts{"heavy": {gpu: 6}, "light": {gpu: 2}},
		},
		{
			name: "water-filling: a queue needing less than its part leaves the rest to others",
			queues: tree(
				queue("a", "", 100, gpuOnly(0, -1, 1)),
				queue("b", "", 100, gpuOnly(0, -1, 1)),
				queue("c", "", 100, gpuOnly(0, -1, 1)),
			),
			capacity: Amounts{gpu: 9},
			usage: map[string]Usage{
				"a": requested(Amounts{gpu: 1}),
				"b": requested(Amounts{gpu: 10}),
				"c": requested(Amounts{gpu: 10}),
			},
			want: map[string]Amounts{"a": {gpu: 1}, "b": {gpu: 4}, "c": {gpu: 4}},
		},
		{
			name: "higher priority gets spare capacity first, lower priority keeps its quota",
			queues: tree(
				queue("inference", "", 200, gpuOnly(2, -1, 1)),
				queue("training", "", 100, gpuOnly(2, -1, 5)),
			),
			capacity: Amounts{gpu: 8},
			usage: map[string]Usage{
				"inference": requested(Amounts{gpu: 7}),
				"training":  requested(Amounts{gpu: 7}),
			},
			want: map[string]Amounts{"inference": {gpu: 6}, "training": {gpu: 2}},
		},
		{
			name: "overQuotaWeight 0: quota only, no part of spare capacity",
			queues: tree(
				queue("no-share", "", 100, gpuOnly(1, -1, 0)),
				queue("sharer", "", 100, gpuOnly(0, -1, 1)),
			),
			capacity: Amounts{gpu: 8},
			usage: map[string]Usage{
				"no-share": requested(Amounts{gpu: 8}),
				"sharer":   requested(Amounts{gpu: 3}),
			},
			want: map[string]Amounts{"no-share": {gpu: 1}, "sharer": {gpu: 3}},
		},
		{
			name: "a limit caps the fair share; what it cannot take goes to others",
			queues: tree(
				queue("capped", "", 100, gpuOnly(0, 3, 10)),
				queue("other", "", 100, gpuOnly(0, -1, 1)),
			),
			capacity: Amounts{gpu: 10},
			usage: map[string]Usage{
				"capped": requested(Amounts{gpu: 10}),
				"other":  requested(Amounts{gpu: 10}),
			},
			want: map[string]Amounts{"capped": {gpu: 3}, "other": {gpu: 7}},
		},
		{
			name: "quotas larger than the cluster: priority first, then in proportion",
			queues: tree(
				queue("a", "", 200, gpuOnly(3, -1, 1)),
				queue("b", "", 100, gpuOnly(3, -1, 1)),
				queue("c", "", 100, gpuOnly(1, -1, 1)),
			),
			capacity: Amounts{gpu: 4},
			usage: map[string]Usage{
				"a": requested(Amounts{gpu: 10}),
				"b": requested(Amounts{gpu: 10}),
				"c": requested(Amounts{gpu: 10}),
			},
			want: map[string]Amounts{"a": {gpu: 3}, "b": {gpu: 0.75}, "c": {gpu: 0.25}},
		},
		{
			name: "fractional GPUs are divided as fractions",
			queues: tree(
				queue("a", "", 100, gpuOnly(0.5, -1, 1)),
				queue("b", "", 100, gpuOnly(0, -1, 1)),
			),
			capacity: Amounts{gpu: 1},
			usage: map[string]Usage{
				"a": requested(Amounts{gpu: 0.75}),
				"b": requested(Amounts{gpu: 0.25}),
			},
			want: map[string]Amounts{"a": {gpu: 0.75}, "b": {gpu: 0.25}},
		},
		{
			name:     "no demand, no fair share: idle capacity is nobody's",
			queues:   tree(queue("a", "", 100, gpuOnly(4, -1, 1))),
			capacity: Amounts{gpu: 8},
			want:     map[string]Amounts{"a": {gpu: 0}},
		},
		{
			name:     "three levels, mixed weights, priorities, limits and per-model quotas",
			queues:   threeLevelTree(),
			capacity: Amounts{gpu: 16, h100: 8, a10g: 8},
			usage: map[string]Usage{
				"vision":  requested(Amounts{gpu: 10, h100: 6, a10g: 4}),
				"nlp":     requested(Amounts{gpu: 8, h100: 4, a10g: 4}),
				"serving": requested(Amounts{gpu: 6, a10g: 6}),
				"sandbox": requested(Amounts{gpu: 4}),
			},
			want: map[string]Amounts{
				// gpu: research 8 + prod 4 by quota; 4 spare: prod (priority 200)
				// takes the 2 it still needs, research and sandbox split the last 2.
				// Inside research (9): vision 4 + nlp 2 by quota, 3 spare by weight 2:1.
				// H100: nobody but research asks; vision gets its H100 quota 4 and
				// then, capped at its H100 limit 6, 2 of the spare 4; nlp (no entry)
				// the other 2.
				// A10G: no queue declares it, so priority 200 (prod) is served
				// first; research's 2 are split by the gpu weights 2:1.
				"research": {gpu: 9, h100: 8, a10g: 2},
				"vision":   {gpu: 6, h100: 6, a10g: 4 / 3.0},
				"nlp":      {gpu: 3, h100: 2, a10g: 2 / 3.0},
				"prod":     {gpu: 6, h100: 0, a10g: 6},
				"serving":  {gpu: 6, a10g: 6},
				"sandbox":  {gpu: 1, h100: 0},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shares, err := Compute(tt.queues, tt.capacity, tt.usage)
			if err != nil {
				t.Fatalf("Compute: %v", err)
			}
			for q, want := range tt.want {
				for r, v := range want {
					if got := shares.FairShare(q, r); !near(got, v) {
						t.Errorf("fair share of %s for queue %s = %g, want %g", r, q, got, v)
					}
				}
			}
			assertParentsDivideExactly(t, shares)
		})
	}
}

// threeLevelTree:
//
//	research  priority 100, gpu quota 8, weight 1
//	  vision  gpu quota 4 weight 2; H100 quota 4 limit 6
//	  nlp     gpu quota 2 limit 5 weight 1; no H100 entry
//	prod      priority 200, gpu quota 4
//	  serving gpu quota -1
//	sandbox   priority 100, gpu quota 0 limit 2
func threeLevelTree() map[string]*model.Queue {
	return tree(
		queue("research", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(8, -1, 1)}),
		queue("vision", "research", 100, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 2), h100: bound(4, 6, 1)}),
		queue("nlp", "research", 100, map[model.ResourceName]model.QueueResource{gpu: bound(2, 5, 1)}),
		queue("prod", "", 200, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 1)}),
		queue("serving", "prod", 100, map[model.ResourceName]model.QueueResource{gpu: bound(-1, -1, 1)}),
		queue("sandbox", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(0, 2, 1)}),
	)
}

// assertParentsDivideExactly checks that no parent hands its children more than it has,
// and that a parent whose children can use its share passes all of it on.
func assertParentsDivideExactly(t *testing.T, s *Shares) {
	t.Helper()
	for name, qs := range s.queues {
		if qs.IsLeaf() {
			continue
		}
		for r, rs := range qs.Resources {
			sum, weighted := 0.0, true
			for _, c := range qs.Children {
				sum += s.queues[c].Resources[r].FairShare
				if s.queues[c].Resources[r].OverQuotaWeight == 0 {
					weighted = false
				}
			}
			if sum > rs.FairShare+1e-6 {
				t.Errorf("children of %s get %g of %s, more than its fair share %g", name, sum, r, rs.FairShare)
			}
			if weighted && !near(sum, rs.FairShare) {
				t.Errorf("children of %s get %g of %s, not all of its fair share %g", name, sum, r, rs.FairShare)
			}
		}
	}
}

func TestComputeLeavesOutBrokenQueuesButSharesTheRest(t *testing.T) {
	queues := tree(
		queue("good", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(2, -1, 1)}),
		queue("loop-a", "loop-b", 100, nil),
		queue("loop-b", "loop-a", 100, nil),
		queue("below-loop", "loop-a", 100, nil),
		queue("orphan", "missing", 100, nil),
	)
	shares, err := Compute(queues, Amounts{gpu: 4}, map[string]Usage{
		"good":       requested(Amounts{gpu: 4}),
		"below-loop": requested(Amounts{gpu: 4}),
	})
	var verr *ValidationError
	if !errors.As(err, &verr) {
		t.Fatalf("Compute error = %v, want a *ValidationError", err)
	}
	for _, left := range []string{"loop-a", "loop-b", "below-loop", "orphan"} {
		if shares.Queue(left) != nil {
			t.Errorf("queue %s should be left out of the shares", left)
		}
	}
	if got := shares.FairShare("good", gpu); !near(got, 4) {
		t.Errorf("fair share of the valid queue = %g, want all 4 GPUs", got)
	}
}

func TestUsageOfParentQueuesAndUnknownQueuesIsIgnored(t *testing.T) {
	shares, err := Compute(seedQueues(), Amounts{gpu: 4}, map[string]Usage{
		"department-1": requested(Amounts{gpu: 4}),
		"nowhere":      requested(Amounts{gpu: 4}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if got := shares.Queue("department-1").Resources[gpu].Requested; got != 0 {
		t.Errorf("department-1 requested = %g, want 0 (pods in a parent queue are not scheduled)", got)
	}
}

func TestValidate(t *testing.T) {
	tests := []struct {
		name   string
		queues map[string]*model.Queue
		// wantMessages are substrings, one per expected problem, in order.
		wantMessages []string
		wantInvolved []string
	}{
		{name: "seed queues are valid", queues: seedQueues()},
		{name: "three-level tree is valid", queues: threeLevelTree()},
		{
			name:         "unknown parent",
			queues:       tree(queue("team-a", "department-9", 100, nil)),
			wantMessages: []string{"queue team-a names parent department-9, which does not exist: create queue department-9 first, or change spec.parentQueue"},
			wantInvolved: []string{"team-a"},
		},
		{
			name:         "queue names itself",
			queues:       tree(queue("team-a", "team-a", 100, nil)),
			wantMessages: []string{"queue team-a names itself as its parent: remove spec.parentQueue or set it to another queue"},
			wantInvolved: []string{"team-a"},
		},
		{
			name: "cycle of three",
			queues: tree(
				queue("a", "b", 100, nil),
				queue("b", "c", 100, nil),
				queue("c", "a", 100, nil),
				queue("leaf", "a", 100, nil),
			),
			wantMessages: []string{"queues a → b → c → a form a cycle through spec.parentQueue: set the parentQueue of one of them to a queue outside the cycle"},
			wantInvolved: []string{"a", "b", "c"},
		},
		{
			name: "negative quota other than -1",
			queues: tree(queue("team-a", "", 100, map[model.ResourceName]model.QueueResource{
				gpu: bound(-2, -1, 1),
			})),
			wantMessages: []string{"queue team-a: GPU quota is -2: set spec.resources.gpu.quota to -1 (unlimited), 0 or a positive amount"},
			wantInvolved: []string{"team-a"},
		},
		{
			name: "negative limit other than -1, in megabytes for memory",
			queues: tree(queue("team-a", "", 100, map[model.ResourceName]model.QueueResource{
				memory: bound(0, -5e6, 1),
			})),
			wantMessages: []string{"queue team-a: memory limit is -5 MB: set spec.resources.memory.limit to -1 (no limit), 0 or a positive amount"},
		},
		{
			name: "limit below quota",
			queues: tree(queue("team-a", "", 100, map[model.ResourceName]model.QueueResource{
				cpu: bound(4000, 2000, 1),
			})),
			wantMessages: []string{"queue team-a: CPU limit 2000 millicores is below its quota 4000 millicores: raise spec.resources.cpu.limit to at least 4000 millicores, lower the quota, or set the limit to -1 (no limit)"},
		},
		{
			name: "per-model limit below quota names the model entry",
			queues: tree(queue("team-a", "", 100, map[model.ResourceName]model.QueueResource{
				h100: bound(4, 2, 1),
			})),
			wantMessages: []string{`queue team-a: NVIDIA H100 80GB HBM3 GPU limit 2 is below its quota 4: raise spec.resources.gpuModels[model="NVIDIA H100 80GB HBM3"].limit to at least 4`},
		},
		{
			// KAI's own fixtures write this pair for cpu and memory; KAI reads a quota of
			// -1 as "entitled to all its demand", capped by the limit.
			name: "unlimited quota with a finite limit is valid, as in KAI",
			queues: tree(queue("team-a", "", 100, map[model.ResourceName]model.QueueResource{
				gpu:    bound(-1, 8, 1),
				cpu:    bound(-1, 4000, 1),
				memory: bound(-1, 8e9, 1),
			})),
		},
		{
			name: "negative overQuotaWeight",
			queues: tree(queue("team-a", "", 100, map[model.ResourceName]model.QueueResource{
				gpu: bound(0, -1, -1),
			})),
			wantMessages: []string{"queue team-a: GPU overQuotaWeight is -1: set spec.resources.gpu.overQuotaWeight to 0"},
		},
		{
			name: "limit equal to quota and limit 0 are fine",
			queues: tree(queue("team-a", "", 100, map[model.ResourceName]model.QueueResource{
				gpu: bound(4, 4, 1), cpu: bound(0, 0, 0),
			})),
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := Validate(tt.queues)
			if len(tt.wantMessages) == 0 {
				if err != nil {
					t.Fatalf("Validate = %v, want no error", err)
				}
				return
			}
			var verr *ValidationError
			if !errors.As(err, &verr) {
				t.Fatalf("Validate = %v, want a *ValidationError", err)
			}
			if len(verr.Problems) != len(tt.wantMessages) {
				t.Fatalf("got %d problems (%v), want %d", len(verr.Problems), err, len(tt.wantMessages))
			}
			for i, want := range tt.wantMessages {
				if !strings.Contains(verr.Problems[i].Message, want) {
					t.Errorf("problem %d = %q, want it to contain %q", i, verr.Problems[i].Message, want)
				}
			}
			if tt.wantInvolved != nil && strings.Join(verr.Problems[0].Queues, ",") != strings.Join(tt.wantInvolved, ",") {
				t.Errorf("problem involves %v, want %v", verr.Problems[0].Queues, tt.wantInvolved)
			}
		})
	}
}

func TestValidatePodQueue(t *testing.T) {
	queues := seedQueues()
	if err := ValidatePodQueue(queues, "team-a"); err != nil {
		t.Errorf("team-a is a leaf queue: %v", err)
	}
	err := ValidatePodQueue(queues, "department-1")
	if err == nil || !strings.Contains(err.Error(), "queue department-1 has child queues (team-a) and only leaf queues hold pods: set the gantry.dev/queue label to one of them") {
		t.Errorf("parent queue: got %v", err)
	}
	err = ValidatePodQueue(queues, "team-x")
	if err == nil || !strings.Contains(err.Error(), `queue "team-x" does not exist: create the queue or set the gantry.dev/queue label to one of: team-a`) {
		t.Errorf("unknown queue: got %v", err)
	}
}

func TestWarningsForChildQuotasAboveTheParent(t *testing.T) {
	queues := tree(
		queue("dept", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 1)}),
		queue("a", "dept", 100, map[model.ResourceName]model.QueueResource{gpu: bound(3, -1, 1)}),
		queue("b", "dept", 100, map[model.ResourceName]model.QueueResource{gpu: bound(2, -1, 1)}),
	)
	warnings := Warnings(queues)
	if len(warnings) != 1 || !strings.Contains(warnings[0], "the GPU quotas of the children of queue dept add up to 5, more than its quota 4") {
		t.Errorf("warnings = %q", warnings)
	}
	if w := Warnings(seedQueues()); len(w) != 0 {
		t.Errorf("seed queues: unexpected warnings %q", w)
	}
}

func TestOrder(t *testing.T) {
	flat := tree(
		queue("a", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 1)}),
		queue("b", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 1)}),
		queue("c", "", 150, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 1)}),
	)
	nested := tree(
		queue("dept-1", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(8, -1, 1)}),
		queue("x", "dept-1", 100, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 1)}),
		queue("x2", "dept-1", 100, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 1)}),
		queue("dept-2", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(8, -1, 1)}),
		queue("y", "dept-2", 100, map[model.ResourceName]model.QueueResource{gpu: bound(8, -1, 1)}),
	)
	tests := []struct {
		name     string
		queues   map[string]*model.Queue
		capacity Amounts
		usage    map[string]Usage
		leaves   []string
		want     string
	}{
		{
			name:     "the queue further below its fair share goes first",
			queues:   flat,
			capacity: Amounts{gpu: 12},
			usage: map[string]Usage{
				"a": {Allocated: Amounts{gpu: 3}, Requested: Amounts{gpu: 4}},
				"b": {Allocated: Amounts{gpu: 1}, Requested: Amounts{gpu: 4}},
				"c": {Allocated: Amounts{gpu: 4}, Requested: Amounts{gpu: 4}},
			},
			leaves: []string{"a", "b", "c"},
			want:   "b,a,c",
		},
		{
			name:     "equal standing: higher priority first, then name",
			queues:   flat,
			capacity: Amounts{gpu: 12},
			usage: map[string]Usage{
				"a": requested(Amounts{gpu: 4}), "b": requested(Amounts{gpu: 4}), "c": requested(Amounts{gpu: 4}),
			},
			leaves: []string{"b", "a", "c"},
			want:   "c,a,b",
		},
		{
			name:     "dominant resource decides: 90% of cpu outweighs 20% of gpu",
			queues:   tree(queue("a", "", 100, nil), queue("b", "", 100, nil)),
			capacity: Amounts{gpu: 10, cpu: 20000},
			usage: map[string]Usage{
				"a": {Allocated: Amounts{gpu: 1, cpu: 9000}, Requested: Amounts{gpu: 5, cpu: 10000}},
				"b": {Allocated: Amounts{gpu: 2.5, cpu: 5000}, Requested: Amounts{gpu: 5, cpu: 10000}},
			},
			leaves: []string{"a", "b"},
			want:   "b,a",
		},
		{
			name:     "hierarchy: the parents compare first",
			queues:   nested,
			capacity: Amounts{gpu: 16},
			usage: map[string]Usage{
				// dept-1 holds 7 of its 8; its x holds only 1 of 4.
				"x":  {Allocated: Amounts{gpu: 1}, Requested: Amounts{gpu: 4}},
				"x2": {Allocated: Amounts{gpu: 4}, Requested: Amounts{gpu: 4}},
				// dept-2 holds 4 of its 8, all of it in y.
				"y": {Allocated: Amounts{gpu: 4}, Requested: Amounts{gpu: 8}},
			},
			leaves: []string{"x", "y"},
			want:   "y,x",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			shares, err := Compute(tt.queues, tt.capacity, tt.usage)
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.Join(shares.Order(tt.leaves), ","); got != tt.want {
				t.Errorf("Order = %s, want %s", got, tt.want)
			}
			next, ok := shares.Next(tt.leaves)
			if !ok || next != strings.Split(tt.want, ",")[0] {
				t.Errorf("Next = %q, %v; want %q", next, ok, strings.Split(tt.want, ",")[0])
			}
		})
	}
}

func TestAllocateMovesAQueueBackInLine(t *testing.T) {
	queues := tree(
		queue("a", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 1)}),
		queue("b", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(4, -1, 1)}),
	)
	shares, err := Compute(queues, Amounts{gpu: 8}, map[string]Usage{
		"a": requested(Amounts{gpu: 4}), "b": requested(Amounts{gpu: 4}),
	})
	if err != nil {
		t.Fatal(err)
	}
	if next, _ := shares.Next([]string{"a", "b"}); next != "a" {
		t.Fatalf("first pick = %s, want a (names break the tie)", next)
	}
	shares.Allocate("a", Amounts{gpu: 2})
	if next, _ := shares.Next([]string{"a", "b"}); next != "b" {
		t.Errorf("after a got 2 GPUs, next = %s, want b", next)
	}
	shares.Release("a", Amounts{gpu: 2})
	if next, _ := shares.Next([]string{"a", "b"}); next != "a" {
		t.Errorf("after a gave them back, next = %s, want a", next)
	}
	if _, ok := shares.Next(nil); ok {
		t.Error("Next of no candidates should report false")
	}
}

func TestLimits(t *testing.T) {
	queues := tree(
		queue("department-1", "", 100, map[model.ResourceName]model.QueueResource{
			gpu: bound(0, 10, 1), memory: bound(0, 64000e6, 1),
		}),
		queue("team-a", "department-1", 100, map[model.ResourceName]model.QueueResource{
			gpu: bound(0, 8, 1), h100: bound(0, 2, 1),
		}),
		queue("team-b", "department-1", 100, nil),
	)
	tests := []struct {
		name      string
		allocated map[string]Amounts
		queue     string
		addition  Amounts
		// wantErr is a substring of the error, empty for none.
		wantErr   string
		wantAtErr string
	}{
		{
			name:      "at the limit",
			allocated: map[string]Amounts{"team-a": {gpu: 8}},
			queue:     "team-a",
			addition:  Amounts{gpu: 1},
			wantErr:   "queue team-a is at its GPU limit (8 of 8): wait for its running work to finish, or raise spec.resources.gpu.limit of queue team-a",
			wantAtErr: "queue team-a is at its GPU limit (8 of 8)",
		},
		{
			name:      "would exceed",
			allocated: map[string]Amounts{"team-a": {gpu: 6}},
			queue:     "team-a",
			addition:  Amounts{gpu: 4},
			wantErr:   "queue team-a would exceed its GPU limit (6 of 8 in use, 4 more asked for)",
		},
		{
			name:      "fits exactly",
			allocated: map[string]Amounts{"team-a": {gpu: 6}},
			queue:     "team-a",
			addition:  Amounts{gpu: 2},
		},
		{
			name:      "a parent's limit binds its children",
			allocated: map[string]Amounts{"team-a": {gpu: 4}, "team-b": {gpu: 6}},
			queue:     "team-b",
			addition:  Amounts{gpu: 1},
			wantErr:   "queue department-1 (a parent of team-b) is at its GPU limit (10 of 10): wait for its running work to finish, or raise spec.resources.gpu.limit of queue department-1",
			wantAtErr: "queue department-1 (a parent of team-b) is at its GPU limit (10 of 10)",
		},
		{
			name:      "memory shown in megabytes",
			allocated: map[string]Amounts{"team-b": {memory: 60000e6}},
			queue:     "team-b",
			addition:  Amounts{memory: 8000e6},
			wantErr:   "queue department-1 (a parent of team-b) would exceed its memory limit (60000 of 64000 MB in use, 8000 MB more asked for)",
		},
		{
			name:      "a declared GPU model limit",
			allocated: map[string]Amounts{"team-a": {gpu: 2, h100: 2}},
			queue:     "team-a",
			addition:  Amounts{gpu: 1, h100: 1},
			wantErr:   `queue team-a is at its NVIDIA H100 80GB HBM3 GPU limit (2 of 2): wait for its running work to finish, or raise spec.resources.gpuModels[model="NVIDIA H100 80GB HBM3"].limit of queue team-a`,
		},
		{
			name:      "other GPU models are bounded by gpu alone",
			allocated: map[string]Amounts{"team-a": {gpu: 2, h100: 2}},
			queue:     "team-a",
			addition:  Amounts{gpu: 1, a10g: 1},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			usage := map[string]Usage{}
			for q, a := range tt.allocated {
				usage[q] = Usage{Allocated: a, Requested: a}
			}
			shares, err := Compute(queues, Amounts{gpu: 16, memory: 128e9, h100: 8, a10g: 8}, usage)
			if err != nil {
				t.Fatal(err)
			}
			checkErr(t, "WouldExceedLimit", shares.WouldExceedLimit(tt.queue, tt.addition), tt.wantErr)
			if tt.wantAtErr != "" {
				checkErr(t, "AtLimit", shares.AtLimit(tt.queue), tt.wantAtErr)
			}
		})
	}
}

func TestLimitsFollowAllocationsWithinACycle(t *testing.T) {
	queues := tree(queue("team-a", "", 100, map[model.ResourceName]model.QueueResource{gpu: bound(0, 2, 1)}))
	shares, err := Compute(queues, Amounts{gpu: 8}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := shares.AtLimit("team-a"); err != nil {
		t.Fatalf("empty queue at limit: %v", err)
	}
	shares.Allocate("team-a", Amounts{gpu: 2})
	checkErr(t, "AtLimit", shares.AtLimit("team-a"), "queue team-a is at its GPU limit (2 of 2)")
}

func checkErr(t *testing.T, what string, err error, want string) {
	t.Helper()
	if want == "" {
		if err != nil {
			t.Errorf("%s = %v, want nil", what, err)
		}
		return
	}
	var lerr *LimitError
	if !errors.As(err, &lerr) {
		t.Fatalf("%s = %v, want a *LimitError containing %q", what, err, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Errorf("%s = %q\nwant it to contain %q", what, err.Error(), want)
	}
}
