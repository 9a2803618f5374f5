package preempt_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
	"github.com/gantry-dev/gantry/pkg/preempt"
	"github.com/gantry-dev/gantry/pkg/scheduler"
	sc "github.com/gantry-dev/gantry/pkg/scheduler/scenario"
)

// The victim search's own cases, written in the core's one scenario vocabulary
// (pkg/scheduler/scenario): the cluster as data, one pending gang searched for, and
// what the search must answer.

const GiB = sc.GiB

// seedQueues are /work/shared/seed/queues.yaml: department-1 and its child team-a,
// GPUs unlimited.
var seedQueues = []sc.Queue{{Name: "department-1", Quota: -1}, {Name: "team-a", Parent: "department-1", Quota: -1}}

// twoTeams share 4 GPUs: each is guaranteed 2, may borrow the rest; threeTeams add
// team-c, guaranteed nothing.
var (
	twoTeams   = []sc.Queue{{Name: "team-a", Quota: 2}, {Name: "team-b", Quota: 2}}
	threeTeams = append(slices.Clone(twoTeams), sc.Queue{Name: "team-c", Quota: 0})
)

// findCase is one search: Scenario's cluster, the gang searched for (Preemptor), and
// the answer.
type findCase struct {
	sc.Scenario
	Preemptor string
	// Victims are pod IDs; Kind defaults to preempt; Reason and Err are substrings.
	Victims      []string
	Kind         string
	Reason, Err  string
	Needed, Free int64
}

// find runs the victim search for one pending gang of a scenario, with the shares
// the cycle computes and the scenario's protection window.
func find(t *testing.T, s sc.Scenario, gang string) (*preempt.Result, error) {
	t.Helper()
	snap, err := sc.Build(s)
	if err != nil {
		t.Fatal(err)
	}
	return findIn(t, snap, gang, s.MinRuntimeSeconds)
}

func findIn(t *testing.T, snap *model.Snapshot, gang string, minRuntime int64) (*preempt.Result, error) {
	t.Helper()
	sched, err := scheduler.New("", scheduler.Config{Preemption: true})
	if err != nil {
		t.Fatal(err)
	}
	shares, err := sched.Shares(snap)
	if err != nil {
		t.Fatal(err)
	}
	g := snap.Gangs[model.GangID(gang)]
	if g == nil {
		t.Fatalf("no gang %s in the scenario", gang)
	}
	var pods []*model.Pod
	for _, p := range snap.GangPods(g) {
		if !p.Bound() {
			pods = append(pods, p)
		}
	}
	return preempt.Find(preempt.Request{
		Gang: g, Pods: pods, Snapshot: snap, View: placement.NewView(snap), Placer: sched.Placer, Shares: shares,
		Now: snap.Now, MinRuntimeSeconds: minRuntime,
	})
}

// serve is the pending single-pod service of most cases, in team-a.
func serve(gpus int, share int64) sc.Gang {
	return sc.Gang{Name: "serve", Queue: "team-a", Priority: 125, NonPreemptible: true, GPUs: gpus, Share: share}
}

// lone is a running preemptible gang of one pod in team-a.
func lone(name string, priority int32, gpus int, on string) sc.Gang {
	return sc.Gang{Name: name, Queue: "team-a", Priority: priority, GPUs: gpus, On: on}
}

// sharer is a running preemptible pod holding a memory share in team-a.
func sharer(name string, priority int32, share int64, on string, startedAgo int64) sc.Gang {
	return sc.Gang{Name: name, Queue: "team-a", Priority: priority, Share: share, On: on, StartedAgo: startedAgo}
}

func (c findCase) check(t *testing.T, res *preempt.Result, err error) {
	t.Helper()
	if err != nil {
		t.Logf("error: %v", err)
	} else {
		t.Logf("reason: %s", res.Reason)
	}
	if c.Err != "" {
		if err == nil {
			t.Fatalf("Find evicted %v, want an error containing %q", podIDs(res.Victims), c.Err)
		}
		if !errors.Is(err, preempt.ErrNoVictims) || !strings.Contains(err.Error(), c.Err) {
			t.Fatalf("Find error = %q, want ErrNoVictims containing %q", err, c.Err)
		}
		return
	}
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	want := slices.Clone(c.Victims)
	slices.Sort(want)
	if got := podIDs(res.Victims); !slices.Equal(got, want) {
		t.Errorf("victims = %v, want %v\nreason: %s", got, want, res.Reason)
	}
	kind := c.Kind
	if kind == "" {
		kind = preempt.KindPreempt
	}
	if res.Kind != kind {
		t.Errorf("kind = %q, want %q", res.Kind, kind)
	}
	if c.Reason != "" && !strings.Contains(res.Reason, c.Reason) {
		t.Errorf("reason = %q, want it to contain %q", res.Reason, c.Reason)
	}
	if c.Needed != 0 && res.NeededBytes != c.Needed {
		t.Errorf("needed = %s, want %s", placement.FormatBytes(res.NeededBytes), placement.FormatBytes(c.Needed))
	}
	if c.Free != 0 && res.FreedBytes != c.Free {
		t.Errorf("freed = %s, want %s", placement.FormatBytes(res.FreedBytes), placement.FormatBytes(c.Free))
	}
}

func podIDs(pods []*model.Pod) []string {
	ids := make([]string, len(pods))
	for i, p := range pods {
		ids[i] = string(p.ID)
	}
	slices.Sort(ids)
	return ids
}

func TestFind(t *testing.T) {
	oneGPU := []sc.Node{{Name: "node-a", GPUs: 1}}
	twoGPUs := []sc.Node{{Name: "node-a", GPUs: 2}}
	twoNodes := []sc.Node{{Name: "node-a", GPUs: 1}, {Name: "node-b", GPUs: 1}}
	fourSharers := []sc.Gang{
		sharer("s1", 50, 20*GiB, "node-a", 4*3600), sharer("s2", 50, 20*GiB, "node-a", 3*3600),
		sharer("s3", 50, 20*GiB, "node-a", 2*3600), sharer("s4", 50, 20*GiB, "node-a", 1*3600),
	}
	for _, c := range []findCase{
		{
			Scenario: sc.Scenario{
				Name:   "seed: inference preempts the whole training RayCluster, head and worker",
				Nodes:  []sc.Node{{Name: "node-a", GPUs: 1, GPUMemory: 24 * GiB, Model: "NVIDIA-A10G", CPU: 8000, Memory: 32 * GiB}},
				Queues: seedQueues,
				Gangs: []sc.Gang{
					{Name: "raycluster-sample", Queue: "team-a", Priority: 50, Pods: 2, GPUs: 1, PodGPUs: map[int]int{0: 0}, Memory: 2 * GiB, On: "node-a"},
					{Name: "ray-kai-scheduler-serve-llm", Queue: "team-a", Priority: 125, NonPreemptible: true, Pods: 2, GPUs: 1, PodGPUs: map[int]int{0: 0},
						StartFree: 0.75, Memory: 15 * GiB},
				},
			},
			Preemptor: "ray-kai-scheduler-serve-llm",
			Victims:   []string{"ns/raycluster-sample-0", "ns/raycluster-sample-1"},
			Reason:    "gang ray-kai-scheduler-serve-llm (priority 125) preempts gang raycluster-sample (priority 50): frees 1 GPU (24 GiB) on node-a",
			Needed:    24 * GiB, Free: 24 * GiB,
		},
		{
			// The node was deleted while its pods are still known (they are bound to
			// it until garbage-collected): they are no candidates, and no crash.
			Scenario: sc.Scenario{
				Name:  "victims on a deleted node are passed over",
				Nodes: oneGPU,
				Gangs: []sc.Gang{
					{Name: "orphan", Queue: "team-a", Priority: 10, GPUs: 1, On: "node-gone", NodeGone: true},
					lone("train", 50, 1, "node-a"), serve(1, 0),
				},
			},
			Victims: []string{"ns/train-0"},
		},
		{
			// A DRA claim whose devices the allocator chose: nothing is free now
			// (DeviceChoices empty); were preemptible pods gone, it would take GPU 1 of
			// node-a, so the one on GPU 1 goes, not the cheaper one on GPU 0.
			Scenario: sc.Scenario{
				Name:  "devices chosen outside the core: the victim is the holder of the chosen GPU",
				Nodes: twoGPUs,
				Gangs: []sc.Gang{
					{Name: "train-short", Queue: "team-a", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 60},
					{Name: "train-long", Queue: "team-a", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 36000},
					{Name: "serve", Queue: "team-a", Priority: 125, NonPreemptible: true, GPUs: 1,
						DeviceChoices:           map[string][]model.GPUBinding{},
						PreemptionDeviceChoices: map[string][]model.GPUBinding{"node-a": {{Index: 1, Whole: true}}}},
				},
			},
			Victims: []string{"ns/train-long-0"},
		},
		{
			Scenario: sc.Scenario{
				Name:  "elastic before core: an autoscaled worker goes, not its gang nor another gang",
				Nodes: []sc.Node{{Name: "node-a", GPUs: 3}},
				Gangs: []sc.Gang{
					{Name: "train", Queue: "team-a", Priority: 50, Pods: 3, Min: 2, GPUs: 1, PodGPUs: map[int]int{0: 0}, On: "node-a"},
					lone("eval", 50, 1, "node-a"), serve(1, 0),
				},
			},
			Victims: []string{"ns/train-2"},
			Reason:  "preempts 1 elastic member of gang train (priority 50)",
		},
		{
			Scenario: sc.Scenario{
				Name:  "never below minimum: one core worker is needed, the whole gang goes",
				Nodes: twoGPUs,
				Gangs: []sc.Gang{
					{Name: "train", Queue: "team-a", Priority: 50, Pods: 3, GPUs: 1, PodGPUs: map[int]int{0: 0}, On: "node-a"},
					serve(1, 0),
				},
			},
			Victims: []string{"ns/train-0", "ns/train-1", "ns/train-2"},
		},
		{
			Scenario: sc.Scenario{
				Name:  "never below minimum: the elastic worker is not enough, so the whole gang goes",
				Nodes: twoGPUs,
				Gangs: []sc.Gang{
					{Name: "train", Queue: "team-a", Priority: 50, Pods: 3, Min: 2, GPUs: 1, PodGPUs: map[int]int{0: 0}, On: "node-a"},
					serve(2, 0),
				},
			},
			Victims: []string{"ns/train-0", "ns/train-1", "ns/train-2"},
		},
		{
			Scenario: sc.Scenario{
				Name:  "cheapest: lower priority first, though it has run longer",
				Nodes: twoGPUs,
				Gangs: []sc.Gang{
					{Name: "build", Queue: "team-a", Priority: 100, GPUs: 1, On: "node-a", StartedAgo: 3600},
					{Name: "train", Queue: "team-a", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 36000},
					serve(1, 0),
				},
			},
			Victims: []string{"ns/train-0"},
		},
		{
			Scenario: sc.Scenario{
				Name:  "cheapest: fewer gangs at equal priority",
				Nodes: twoNodes,
				Gangs: []sc.Gang{
					sharer("notebook-1", 50, 40*GiB, "node-a", 0), sharer("notebook-2", 50, 40*GiB, "node-a", 0),
					lone("train", 50, 1, "node-b"), serve(1, 0),
				},
			},
			Victims: []string{"ns/train-0"},
		},
		{
			Scenario: sc.Scenario{
				Name:  "cheapest: lower priority beats fewer gangs",
				Nodes: twoNodes,
				Gangs: []sc.Gang{
					sharer("notebook-1", 50, 40*GiB, "node-a", 0), sharer("notebook-2", 50, 40*GiB, "node-a", 0),
					lone("train", 60, 1, "node-b"), serve(1, 0),
				},
			},
			Victims: []string{"ns/notebook-1-0", "ns/notebook-2-0"},
		},
		{
			Scenario: sc.Scenario{
				Name:  "cheapest: one gang either way, the one holding less memory goes",
				Nodes: twoNodes,
				Gangs: []sc.Gang{sharer("big", 50, 60*GiB, "node-a", 0), sharer("small", 50, 40*GiB, "node-b", 0), serve(0, 60*GiB)},
			},
			Victims: []string{"ns/small-0"},
			Needed:  60 * GiB, Free: 40 * GiB,
		},
		{
			Scenario: sc.Scenario{
				Name:  "cheapest: one 30 GiB sharer rather than two 20 GiB ones, though smaller ones come first in cost order",
				Nodes: oneGPU,
				Gangs: []sc.Gang{
					sharer("s20-a", 50, 20*GiB, "node-a", 0), sharer("s20-b", 50, 20*GiB, "node-a", 0), sharer("s30", 50, 30*GiB, "node-a", 0),
					serve(0, 40*GiB),
				},
			},
			Victims: []string{"ns/s30-0"},
			Needed:  40 * GiB, Free: 30 * GiB,
		},
		{
			Scenario: sc.Scenario{
				Name:  "memory-sized: a 20 GiB share evicts one of four 20 GiB sharers, the youngest",
				Nodes: oneGPU,
				Gangs: append(slices.Clone(fourSharers), serve(0, 20*GiB)),
			},
			Victims: []string{"ns/s4-0"},
			Reason:  "frees 20 GiB of shared GPU memory on node-a",
			Needed:  20 * GiB, Free: 20 * GiB,
		},
		{
			Scenario: sc.Scenario{
				Name:  "memory-sized: vLLM needing half the GPU free at start evicts two sharers",
				Nodes: oneGPU,
				Gangs: append(slices.Clone(fourSharers), sc.Gang{Name: "serve", Queue: "team-a", Priority: 125, NonPreemptible: true, Share: 20 * GiB, StartFree: 0.5}),
			},
			Victims: []string{"ns/s3-0", "ns/s4-0"},
			Needed:  40 * GiB, Free: 40 * GiB,
		},
		{
			Scenario: sc.Scenario{
				Name: "live free memory: the cheaper GPU is short of measured memory, the other node's victim goes",
				// Something outside the scheduler's view uses 16 GiB on node-a's GPU.
				Nodes: []sc.Node{{Name: "node-a", GPUs: 1, LiveFree: map[int]int64{0: 4 * GiB}}, {Name: "node-b", GPUs: 1}},
				Gangs: []sc.Gang{
					sharer("notebook", 50, 20*GiB, "node-a", 0),
					{Name: "chat", Queue: "team-a", Priority: 125, NonPreemptible: true, Share: 40 * GiB, On: "node-a"},
					sharer("batch-1", 60, 40*GiB, "node-b", 7200), sharer("batch-2", 60, 40*GiB, "node-b", 3600),
					serve(0, 30*GiB),
				},
			},
			Victims: []string{"ns/batch-2-0"},
		},
		{
			Scenario: sc.Scenario{
				Name:  "live free memory: book-kept room is not enough, nothing is evicted",
				Nodes: []sc.Node{{Name: "node-a", GPUs: 1, LiveFree: map[int]int64{0: 4 * GiB}}},
				Gangs: []sc.Gang{
					sharer("notebook", 50, 20*GiB, "node-a", 0),
					{Name: "chat", Queue: "team-a", Priority: 125, NonPreemptible: true, Share: 40 * GiB, On: "node-a"},
					serve(0, 30*GiB),
				},
			},
			Err: "insufficient live free GPU memory",
		},
		{
			Scenario: sc.Scenario{
				Name:  "protection window: the gang that just started is spared, an older one goes",
				Nodes: twoGPUs,
				Gangs: []sc.Gang{
					{Name: "new", Queue: "team-a", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 60},
					{Name: "old", Queue: "team-a", Priority: 100, GPUs: 1, On: "node-a", StartedAgo: 7200},
					serve(1, 0),
				},
				MinRuntimeSeconds: 600,
			},
			Victims: []string{"ns/old-0"},
		},
		{
			Scenario: sc.Scenario{
				Name:              "protection window: nothing else to evict",
				Nodes:             oneGPU,
				Gangs:             []sc.Gang{{Name: "new", Queue: "team-a", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 60}, serve(1, 0)},
				MinRuntimeSeconds: 600,
			},
			Err: "1 within the protection window (600 s)",
		},
		{
			Scenario: sc.Scenario{
				Name:  "not preemptible: the lower-priority gang is kept, a preemptible one goes",
				Nodes: twoGPUs,
				Gangs: []sc.Gang{
					{Name: "pinned", Queue: "team-a", Priority: 50, NonPreemptible: true, GPUs: 1, On: "node-a"},
					lone("build", 100, 1, "node-a"), serve(1, 0),
				},
			},
			Victims: []string{"ns/build-0"},
		},
		{
			Scenario: sc.Scenario{
				Name:  "not preemptible: one member marked non-preemptible keeps its whole gang",
				Nodes: oneGPU,
				Gangs: []sc.Gang{
					{Name: "train", Queue: "team-a", Priority: 50, Pods: 2, GPUs: 1, PodGPUs: map[int]int{0: 0}, NonPreemptiblePods: []int{0}, On: "node-a"},
					serve(1, 0),
				},
			},
			Err: "1 not preemptible",
		},
		{
			Scenario: sc.Scenario{
				Name:  "another scheduler's pod is never a victim",
				Nodes: oneGPU,
				Gangs: []sc.Gang{{Name: "job", Queue: "team-a", GPUs: 1, On: "node-a", Foreign: true, Spec: sc.Spec{Namespace: "other"}}, serve(1, 0)},
			},
			Err: "1 of another scheduler",
		},
		{
			Scenario: sc.Scenario{
				Name:  "a terminating gang is not evicted again; its GPU stays booked until it is gone",
				Nodes: oneGPU,
				Gangs: []sc.Gang{{Name: "train", Queue: "team-a", Priority: 50, GPUs: 1, On: "node-a", Spec: sc.Spec{Terminating: true}}, serve(1, 0)},
			},
			Err: "1 already terminating",
		},
		{
			Scenario: sc.Scenario{
				Name:  "equal priority never preempts",
				Nodes: oneGPU,
				Gangs: []sc.Gang{lone("other-serve", 125, 1, "node-a"), serve(1, 0)},
			},
			Err: "1 in the same queue but not of lower priority",
		},
		{
			Scenario: sc.Scenario{
				Name:  "priority does not cross queues when no fair shares are given",
				Nodes: oneGPU,
				Gangs: []sc.Gang{{Name: "train", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a"}, serve(1, 0)},
			},
			Err: "1 in another queue, and no fair shares are known",
		},
		{
			Scenario: sc.Scenario{
				Name:  "a gang spanning nodes goes whole, so a one-node gang of equal priority is cheaper",
				Nodes: []sc.Node{{Name: "node-a", GPUs: 1}, {Name: "node-b", GPUs: 1}, {Name: "node-c", GPUs: 1}},
				Gangs: []sc.Gang{
					{Name: "ddp", Queue: "team-a", Priority: 50, Pods: 2, GPUs: 1, OnNodes: []string{"node-a", "node-b"}},
					lone("small", 50, 1, "node-c"), serve(1, 0),
				},
			},
			Victims: []string{"ns/small-0"},
		},
		{
			Scenario: sc.Scenario{
				Name:  "a gang spanning nodes: evicted on every node, and all it frees is counted",
				Nodes: twoNodes,
				Gangs: []sc.Gang{{Name: "ddp", Queue: "team-a", Priority: 50, Pods: 2, GPUs: 1, OnNodes: []string{"node-a", "node-b"}}, serve(1, 0)},
			},
			Victims: []string{"ns/ddp-0", "ns/ddp-1"},
			Reason:  "frees 2 GPUs (160 GiB) on node-a, node-b",
			Needed:  80 * GiB, Free: 160 * GiB,
		},
		{
			Scenario: sc.Scenario{
				Name:  "a gang of two 4-GPU pods needs two nodes: victims on both, no more",
				Nodes: []sc.Node{{Name: "node-a", GPUs: 4}, {Name: "node-b", GPUs: 4}, {Name: "node-c", GPUs: 4}},
				Gangs: []sc.Gang{
					lone("a", 50, 4, "node-a"), lone("b", 50, 4, "node-b"), lone("c", 60, 4, "node-c"),
					{Name: "serve", Queue: "team-a", Priority: 125, NonPreemptible: true, Pods: 2, GPUs: 4},
				},
			},
			Victims: []string{"ns/a-0", "ns/b-0"},
		},
		{
			Scenario: sc.Scenario{
				Name:   "reclaim: team-a, below its fair share, takes back two of the four GPUs team-b borrowed",
				Nodes:  []sc.Node{{Name: "node-a", GPUs: 4}},
				Queues: twoTeams,
				Gangs: []sc.Gang{
					{Name: "b1", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 4 * 3600},
					{Name: "b2", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 3 * 3600},
					{Name: "b3", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 2 * 3600},
					{Name: "b4", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 1 * 3600},
					{Name: "train", Queue: "team-a", Priority: 50, NonPreemptible: true, GPUs: 2},
				},
			},
			Preemptor: "train",
			Victims:   []string{"ns/b3-0", "ns/b4-0"},
			Kind:      preempt.KindReclaim,
			Reason:    "reclaims gang b4 (priority 50), gang b3 (priority 50) from queue team-b (4 GPUs, above its quota of 2)",
		},
		{
			Scenario: sc.Scenario{
				Name:   "reclaim stops at the victim's fair share: one GPU of surplus serves a one-GPU gang",
				Nodes:  []sc.Node{{Name: "node-a", GPUs: 4}},
				Queues: threeTeams,
				Gangs: []sc.Gang{
					{Name: "b1", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 3 * 3600},
					{Name: "b2", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 2 * 3600},
					{Name: "b3", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 1 * 3600},
					{Name: "c-serve", Queue: "team-c", Priority: 125, NonPreemptible: true, GPUs: 1, On: "node-a"},
					{Name: "train", Queue: "team-a", Priority: 50, NonPreemptible: true, GPUs: 1},
					{Name: "eval", Queue: "team-a", Priority: 50, NonPreemptible: true, GPUs: 1},
				},
			},
			Preemptor: "train",
			Victims:   []string{"ns/b3-0"},
			Kind:      preempt.KindReclaim,
		},
		{
			Scenario: sc.Scenario{
				Name:   "reclaim stops at the victim's fair share: a two-GPU gang would take team-b below it",
				Nodes:  []sc.Node{{Name: "node-a", GPUs: 4}},
				Queues: threeTeams,
				Gangs: []sc.Gang{
					{Name: "b1", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a"},
					{Name: "b2", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a"},
					{Name: "b3", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a"},
					{Name: "c-serve", Queue: "team-c", Priority: 125, NonPreemptible: true, GPUs: 1, On: "node-a"},
					{Name: "train", Queue: "team-a", Priority: 50, NonPreemptible: true, GPUs: 2},
				},
			},
			Preemptor: "train",
			Err:       "reclaim stops where a queue would go below its GPU fair share",
		},
		{
			Scenario: sc.Scenario{
				Name:  "reclaim in a queue tree: team-a within its quota takes from its sibling above its quota",
				Nodes: []sc.Node{{Name: "node-a", GPUs: 5}},
				Queues: []sc.Queue{
					{Name: "dept-1", Quota: 2}, {Name: "team-a", Parent: "dept-1", Quota: 2}, {Name: "team-b", Parent: "dept-1", Quota: 0},
					{Name: "dept-2", Quota: 2, Weight: sc.NoWeight}, {Name: "team-c", Parent: "dept-2", Quota: 2},
				},
				Gangs: []sc.Gang{
					{Name: "b1", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a"},
					{Name: "b2", Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a"},
					{Name: "c1", Queue: "team-c", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 7200},
					{Name: "c2", Queue: "team-c", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 3600},
					{Name: "c3", Queue: "team-c", Priority: 50, GPUs: 1, On: "node-a", StartedAgo: 5400},
					{Name: "train", Queue: "team-a", Priority: 50, NonPreemptible: true, GPUs: 1},
				},
			},
			// Quota is guaranteed: team-b holds 2 GPUs on a quota of 0, so team-a, within
			// its quota, takes from its sibling first (the cheaper victim by name).
			Preemptor: "train",
			Victims:   []string{"ns/b1-0"},
			Kind:      preempt.KindReclaim,
			Reason:    "(priority 50; queue team-a holds 0 GPUs, within its quota of 2) reclaims gang b1 (priority 50) from queue team-b (2 GPUs, above its quota of 0)",
		},
		{
			Scenario: sc.Scenario{
				Name:  "reclaim in a queue tree: a queue above its share in a department at its share is its sibling's to reclaim, not another department's",
				Nodes: []sc.Node{{Name: "node-a", GPUs: 4}},
				Queues: []sc.Queue{
					{Name: "dept-1", Quota: 2}, {Name: "team-a", Parent: "dept-1", Quota: 2},
					{Name: "dept-2", Quota: 2}, {Name: "team-c", Parent: "dept-2", Quota: 0}, {Name: "team-d", Parent: "dept-2", Quota: 2},
				},
				Gangs: []sc.Gang{
					lone("a1", 50, 1, "node-a"),
					{Name: "c1", Queue: "team-c", Priority: 50, GPUs: 1, On: "node-a"},
					{Name: "c2", Queue: "team-c", Priority: 50, GPUs: 1, On: "node-a"},
					{Name: "job", GPUs: 1, On: "node-a", Foreign: true, Spec: sc.Spec{Namespace: "other"}},
					{Name: "a-train", Queue: "team-a", Priority: 50, NonPreemptible: true, GPUs: 1},
					{Name: "d-train", Queue: "team-d", Priority: 50, NonPreemptible: true, GPUs: 2},
				},
			},
			Preemptor: "a-train",
			Err:       "2 in another queue, and by quota, that queue is not above its GPU quota, and by fair share, that queue is not above its GPU fair share",
		},
		{
			Scenario: sc.Scenario{
				Name:   "reclaim: a queue at its fair share is not reclaimed from, whatever the priorities",
				Nodes:  []sc.Node{{Name: "node-a", GPUs: 4}},
				Queues: threeTeams,
				Gangs: []sc.Gang{
					lone("a1", 125, 1, "node-a"),
					{Name: "b1", Queue: "team-b", Priority: 10, GPUs: 1, On: "node-a"},
					{Name: "b2", Queue: "team-b", Priority: 10, GPUs: 1, On: "node-a"},
					{Name: "c-serve", Queue: "team-c", Priority: 125, NonPreemptible: true, GPUs: 1, On: "node-a"},
					{Name: "train", Queue: "team-a", Priority: 50, NonPreemptible: true, GPUs: 1},
				},
			},
			Preemptor: "train",
			Err:       "2 in another queue, and by quota, that queue is not above its GPU quota, and by fair share, that queue is not above its GPU fair share",
		},
	} {
		t.Run(c.Name, func(t *testing.T) {
			gang := c.Preemptor
			if gang == "" {
				gang = "serve"
			}
			res, err := find(t, c.Scenario, gang)
			c.check(t, res, err)
		})
	}
}

// carryOut applies a search's result as the cluster would: victims gone, the
// preemptor bound where the result placed it.
func carryOut(snap *model.Snapshot, gang string, res *preempt.Result) {
	plan := &scheduler.Plan{Binds: []scheduler.GangBind{{Gang: model.GangID(gang), Placements: res.Placements}}}
	for _, v := range res.Victims {
		plan.Evictions = append(plan.Evictions, scheduler.Eviction{Pod: v.ID, Gang: v.Gang})
	}
	sc.Apply(snap, plan)
}

// TestNoPingPong carries out a decision and searches again for its victims: neither
// the same rule nor the other one may take back what was just decided.
func TestNoPingPong(t *testing.T) {
	t.Run("reclaim: team-b cannot take back what team-a reclaimed", func(t *testing.T) {
		s := sc.Scenario{Nodes: []sc.Node{{Name: "node-a", GPUs: 4}}, Queues: twoTeams}
		for _, b := range []string{"b1", "b2", "b3", "b4"} {
			s.Gangs = append(s.Gangs, sc.Gang{Name: b, Queue: "team-b", Priority: 50, GPUs: 1, On: "node-a"})
		}
		// Preemptible, so that only the fair-share rule keeps team-b from it.
		s.Gangs = append(s.Gangs, sc.Gang{Name: "train", Queue: "team-a", Priority: 50, GPUs: 2})
		snap, err := sc.Build(s)
		if err != nil {
			t.Fatal(err)
		}
		first, err := findIn(t, snap, "train", 0)
		if err != nil || first.Kind != preempt.KindReclaim || len(first.VictimGangs) != 2 {
			t.Fatalf("cycle 1: want team-a to reclaim 2 gangs, got %+v, %v", first, err)
		}
		carryOut(snap, "train", first)

		// Cycle 2: every evicted team-b gang asks again. At its own priority nothing
		// may go; at a higher one it may preempt within team-b, never take from team-a.
		for _, id := range first.VictimGangs {
			res, err := findIn(t, snap, string(id), 0)
			if err == nil {
				t.Fatalf("cycle 2: %s evicts %v back: %s", id, podIDs(res.Victims), res.Reason)
			}
			if !errors.Is(err, preempt.ErrNoVictims) {
				t.Fatalf("cycle 2: %v", err)
			}
			t.Logf("cycle 2, %s: %v", id, err)

			g := *snap.Gangs[id]
			snap.Gangs[id] = &model.Gang{ID: g.ID, Queue: g.Queue, Priority: 1000, Preemptible: g.Preemptible, MinMember: g.MinMember, Members: g.Members}
			res, err = findIn(t, snap, string(id), 0)
			if err != nil {
				t.Fatalf("cycle 2: %s at priority 1000 may preempt in its own queue: %v", id, err)
			}
			for _, victim := range res.Victims {
				if victim.Queue != "team-b" {
					t.Fatalf("cycle 2: %s at priority 1000 takes %s from %s: %s", id, victim.ID, victim.Queue, res.Reason)
				}
			}
			snap.Gangs[id] = &g
		}
	})

	t.Run("preempt: the evicted gang cannot evict its preemptor", func(t *testing.T) {
		snap, err := sc.Build(sc.Scenario{
			Nodes: []sc.Node{{Name: "node-a", GPUs: 1}}, Queues: seedQueues,
			Gangs: []sc.Gang{lone("train", 50, 1, "node-a"), {Name: "serve", Queue: "team-a", Priority: 125, GPUs: 1}},
		})
		if err != nil {
			t.Fatal(err)
		}
		first, err := findIn(t, snap, "serve", 0)
		if err != nil {
			t.Fatalf("cycle 1: %v", err)
		}
		carryOut(snap, "serve", first)
		if res, err := findIn(t, snap, "train", 0); err == nil {
			t.Fatalf("cycle 2: train evicts %v back: %s", podIDs(res.Victims), res.Reason)
		}
	})
}

// TestFindLeavesTheViewAlone checks that Find only simulates: the cycle's view and
// the snapshot are as they were.
func TestFindLeavesTheViewAlone(t *testing.T) {
	snap, err := sc.Build(sc.Scenario{Nodes: []sc.Node{{Name: "node-a", GPUs: 1}}, Gangs: []sc.Gang{lone("train", 50, 1, "node-a"), serve(1, 0)}})
	if err != nil {
		t.Fatal(err)
	}
	sched, err := scheduler.New("", scheduler.Config{Preemption: true})
	if err != nil {
		t.Fatal(err)
	}
	g := snap.Gangs["serve"]
	req := preempt.Request{Gang: g, Pods: snap.GangPods(g), Snapshot: snap, View: placement.NewView(snap), Placer: sched.Placer, Now: snap.Now}
	before := *req.View.Node("node-a").Clone()
	beforeGPU := before.GPUs[0]
	if _, err := preempt.Find(req); err != nil {
		t.Fatal(err)
	}
	after := req.View.Node("node-a")
	if after.GPUs[0] != beforeGPU || after.Requested != before.Requested {
		t.Errorf("Find changed the view: GPU %+v -> %+v", beforeGPU, after.GPUs[0])
	}
	if snap.Node("node-a").GPUs[0] != beforeGPU {
		t.Errorf("Find changed the snapshot")
	}
}

// TestFindWhenTheGangFits returns no victims rather than evicting for nothing.
func TestFindWhenTheGangFits(t *testing.T) {
	res, err := find(t, sc.Scenario{Nodes: []sc.Node{{Name: "node-a", GPUs: 2}}, Gangs: []sc.Gang{lone("train", 50, 1, "node-a"), serve(1, 0)}}, "serve")
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Victims) != 0 || res.Kind != "" || len(res.Placements) != 1 {
		t.Errorf("got victims %v kind %q placements %v, want none, \"\" and one", podIDs(res.Victims), res.Kind, res.Placements)
	}
}
