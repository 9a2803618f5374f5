package scheduler

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
)

// The scenario tests declare a cluster, its queues and gangs as data, run one cycle,
// and compare what the cycle decided: which gangs it binds, which pods it evicts, and
// why the rest wait.

const gib = int64(1) << 30

func node(name string, gpus int, gpuModel string) *model.Node {
	n := &model.Node{
		Name:        name,
		Allocatable: model.Resources{MilliCPU: 64000, MemoryBytes: 512 * gib, Pods: 110},
	}
	for i := 0; i < gpus; i++ {
		n.GPUs = append(n.GPUs, model.GPU{Index: i, UUID: fmt.Sprintf("%s-%d", name, i), Model: gpuModel, MemoryBytes: 80 * gib, LiveFreeBytes: model.UnknownBytes, Healthy: true})
	}
	return n
}

// gangSpec is a gang in a scenario: size pods of gpus GPUs each; bound ones sit on the
// named node in order.
type gangSpec struct {
	name        string
	queue       string
	priority    int32
	preemptible bool
	size, min   int
	gpus        int
	boundOn     string
	elastic     int
}

func queue(name, parent string, gpuQuota, gpuLimit, weight float64) *model.Queue {
	return &model.Queue{Name: name, Parent: parent, Priority: 100, Resources: map[model.ResourceName]model.QueueResource{
		model.ResourceGPU:    {Quota: gpuQuota, Limit: gpuLimit, OverQuotaWeight: weight},
		model.ResourceCPU:    {Quota: model.Unlimited, Limit: model.Unlimited, OverQuotaWeight: 1},
		model.ResourceMemory: {Quota: model.Unlimited, Limit: model.Unlimited, OverQuotaWeight: 1},
	}}
}

func build(nodes []*model.Node, queues []*model.Queue, gangs []gangSpec) *model.Snapshot {
	s := model.NewSnapshot()
	for _, n := range nodes {
		s.AddNode(n)
	}
	for _, q := range queues {
		s.Queues[q.Name] = q
	}
	nextGPU := map[string]int{}
	for gi, g := range gangs {
		mg := &model.Gang{ID: model.GangID(g.name), Queue: g.queue, Priority: g.priority, Preemptible: g.preemptible, MinMember: g.min, CreatedAt: int64(gi)}
		for i := 0; i < g.size+g.elastic; i++ {
			p := &model.Pod{
				ID: model.PodID(fmt.Sprintf("ns/%s-%d", g.name, i)), UID: fmt.Sprintf("%s-%d", g.name, i), Gang: mg.ID,
				Queue: g.queue, Priority: g.priority, Preemptible: g.preemptible,
				Requests: model.Resources{MilliCPU: 1000, MemoryBytes: gib, Pods: 1},
				GPU:      model.GPUDemand{Count: g.gpus},
				Elastic:  i >= g.size,
			}
			if g.boundOn != "" && i < g.size {
				p.Node = g.boundOn
				for k := 0; k < g.gpus; k++ {
					p.GPUs = append(p.GPUs, model.GPUBinding{Index: nextGPU[g.boundOn], Whole: true})
					nextGPU[g.boundOn]++
				}
				n := s.Node(g.boundOn).Clone()
				n.Book(p, p.GPUs)
				s.AddNode(n)
			}
			s.Pods[p.ID] = p
			mg.Members = append(mg.Members, p.ID)
		}
		s.Gangs[mg.ID] = mg
	}
	return s
}

// summary renders a plan as sorted lines a reader can compare at a glance.
func summary(p *Plan) (binds, evictions []string, pending map[string]string) {
	pending = map[string]string{}
	for _, b := range p.Binds {
		binds = append(binds, fmt.Sprintf("%s:%d", b.Gang, len(b.Placements)))
	}
	for _, e := range p.Evictions {
		evictions = append(evictions, string(e.Pod))
	}
	for _, pd := range p.Pending {
		pending[string(pd.Gang)] = string(pd.Kind)
	}
	sort.Strings(binds)
	sort.Strings(evictions)
	return binds, evictions, pending
}

func TestCycleScenarios(t *testing.T) {
	twoTeams := []*model.Queue{
		queue("dept", "", model.Unlimited, model.Unlimited, 1),
		queue("team-a", "dept", 4, model.Unlimited, 1),
		queue("team-b", "dept", 4, model.Unlimited, 1),
	}
	tests := []struct {
		name          string
		nodes         []*model.Node
		queues        []*model.Queue
		gangs         []gangSpec
		wantBinds     []string
		wantEvictions []string
		wantPending   map[string]string
	}{
		{
			name:      "a gang that fits only together is bound whole",
			nodes:     []*model.Node{node("a", 4, "H100"), node("b", 4, "H100")},
			gangs:     []gangSpec{{name: "train", size: 2, min: 2, gpus: 4, preemptible: true}},
			wantBinds: []string{"train:2"},
		},
		{
			name:        "a gang one GPU too big binds nothing",
			nodes:       []*model.Node{node("a", 4, "H100"), node("b", 4, "H100")},
			gangs:       []gangSpec{{name: "train", size: 3, min: 3, gpus: 3, preemptible: true}},
			wantPending: map[string]string{"train": "no_fit"},
		},
		{
			name:  "elastic members take only what is left after gangs",
			nodes: []*model.Node{node("a", 4, "H100")},
			gangs: []gangSpec{
				{name: "ray", size: 2, min: 2, gpus: 1, elastic: 3, preemptible: true},
			},
			wantBinds: []string{"ray:2", "ray:2"},
		},
		{
			name:   "a queue at its limit waits with the limit as reason",
			nodes:  []*model.Node{node("a", 8, "H100")},
			queues: []*model.Queue{queue("capped", "", 2, 2, 1)},
			gangs: []gangSpec{
				{name: "running", queue: "capped", size: 1, min: 1, gpus: 2, boundOn: "a", preemptible: true},
				{name: "more", queue: "capped", size: 1, min: 1, gpus: 1, preemptible: true},
			},
			wantPending: map[string]string{"more": "queue_limit"},
		},
		{
			name:   "non-preemptible work may not borrow beyond its quota",
			nodes:  []*model.Node{node("a", 8, "H100")},
			queues: twoTeams,
			gangs: []gangSpec{
				{name: "serve", queue: "team-a", priority: 125, size: 1, min: 1, gpus: 6},
			},
			wantPending: map[string]string{"serve": "queue_quota"},
		},
		{
			name:   "the queue furthest below its share goes first",
			nodes:  []*model.Node{node("a", 4, "H100")},
			queues: twoTeams,
			gangs: []gangSpec{
				{name: "a-running", queue: "team-a", size: 1, min: 1, gpus: 2, boundOn: "a", preemptible: true},
				{name: "a-next", queue: "team-a", size: 1, min: 1, gpus: 2, preemptible: true},
				{name: "b-next", queue: "team-b", size: 1, min: 1, gpus: 2, preemptible: true},
			},
			wantBinds:   []string{"b-next:1"},
			wantPending: map[string]string{"a-next": "no_fit"},
		},
		{
			name:  "inference preempts the whole training gang",
			nodes: []*model.Node{node("a", 1, "A10G")},
			gangs: []gangSpec{
				{name: "train", size: 2, min: 2, gpus: 0, boundOn: "a", priority: 50, preemptible: true},
				{name: "train-gpu", size: 1, min: 1, gpus: 1, boundOn: "a", priority: 50, preemptible: true},
				{name: "serve", size: 1, min: 1, gpus: 1, priority: 125},
			},
			wantEvictions: []string{"ns/train-gpu-0"},
		},
		{
			name:  "equal priority never preempts",
			nodes: []*model.Node{node("a", 1, "A10G")},
			gangs: []gangSpec{
				{name: "first", size: 1, min: 1, gpus: 1, boundOn: "a", priority: 50, preemptible: true},
				{name: "second", size: 1, min: 1, gpus: 1, priority: 50, preemptible: true},
			},
			wantPending: map[string]string{"second": "no_fit"},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := New("", Config{Preemption: true})
			if err != nil {
				t.Fatal(err)
			}
			snap := build(tt.nodes, tt.queues, tt.gangs)
			plan := s.Schedule(snap)
			binds, evictions, pending := summary(plan)
			if strings.Join(binds, " ") != strings.Join(tt.wantBinds, " ") {
				t.Errorf("binds = %v, want %v", binds, tt.wantBinds)
			}
			if strings.Join(evictions, " ") != strings.Join(tt.wantEvictions, " ") {
				t.Errorf("evictions = %v, want %v", evictions, tt.wantEvictions)
			}
			if fmt.Sprint(pending) != fmt.Sprint(orEmpty(tt.wantPending)) {
				t.Errorf("pending = %v, want %v", pending, orEmpty(tt.wantPending))
				for _, pd := range plan.Pending {
					t.Logf("  %s: %s", pd.Gang, pd.Reason)
				}
			}
		})
	}
}

func orEmpty(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}

// The cycle decides from its snapshot alone: the same snapshot gives the same plan.
func TestCycleIsDeterministic(t *testing.T) {
	s, _ := New("", Config{Preemption: true})
	gangs := []gangSpec{}
	for i := 0; i < 20; i++ {
		gangs = append(gangs, gangSpec{name: fmt.Sprintf("g%02d", i), size: 2, min: 2, gpus: 1 + i%3, preemptible: true})
	}
	var first string
	for run := 0; run < 5; run++ {
		plan := s.Schedule(build([]*model.Node{node("a", 8, "H100"), node("b", 8, "H100"), node("c", 4, "H100")}, nil, gangs))
		var lines []string
		for _, b := range plan.Binds {
			for _, p := range b.Placements {
				lines = append(lines, fmt.Sprintf("%s@%s%v", p.Pod, p.Node, p.GPUs))
			}
		}
		got := strings.Join(lines, ";")
		if run == 0 {
			first = got
		} else if got != first {
			t.Fatalf("run %d planned differently:\n%s\nvs\n%s", run, got, first)
		}
	}
}

// The cycle never changes the snapshot it is given.
func TestCycleDoesNotModifySnapshot(t *testing.T) {
	s, _ := New("", Config{Preemption: true})
	snap := build([]*model.Node{node("a", 2, "H100")}, nil, []gangSpec{{name: "g", size: 2, min: 2, gpus: 1, preemptible: true}})
	before := fmt.Sprintf("%+v", *snap.Node("a"))
	plan := s.Schedule(snap)
	if len(plan.Binds) != 1 {
		t.Fatalf("binds = %v, want the gang", plan.Binds)
	}
	if after := fmt.Sprintf("%+v", *snap.Node("a")); after != before {
		t.Errorf("node changed by the cycle:\n%s\n%s", before, after)
	}
}
