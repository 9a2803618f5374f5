package preempt

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/placement"
)

// seedQueues are /work/shared/seed/queues.yaml: department-1 and its child team-a,
// GPUs unlimited.
var seedQueues = []queueSpec{
	{name: "department-1", quota: -1, limit: -1, weight: 1},
	{name: "team-a", parent: "department-1", quota: -1, limit: -1, weight: 1},
}

// twoTeams share 4 GPUs: each is guaranteed 2, may borrow the rest.
var twoTeams = []queueSpec{
	{name: "team-a", quota: 2, limit: -1, weight: 1},
	{name: "team-b", quota: 2, limit: -1, weight: 1},
}

// threeTeams add team-c, guaranteed nothing.
var threeTeams = append(slices.Clone(twoTeams), queueSpec{name: "team-c", quota: 0, limit: -1, weight: 1})

type scenario struct {
	name    string
	nodes   []nodeSpec
	queues  []queueSpec
	running []gangSpec
	pending gangSpec
	// queued are other pending gangs; they count in their queues' fair shares.
	queued []gangSpec
	// minRuntime is the protection window in seconds.
	minRuntime int64

	wantVictims []string
	wantKind    string
	// wantReason and wantErr are substrings.
	wantReason string
	wantErr    string
	// wantNeeded and wantFreed are checked when not zero.
	wantNeeded, wantFreed int64
}

func TestFind(t *testing.T) {
	oneGPUNode := []nodeSpec{{name: "node-a", gpus: 1}}
	twoGPUNode := []nodeSpec{{name: "node-a", gpus: 2}}
	// inference is a pending single-GPU service in team-a.
	inference := func(demand model.GPUDemand) gangSpec {
		return gangSpec{id: "team-a/serve", queue: "team-a", priority: 125, pods: []podSpec{{name: "0", demand: demand}}}
	}

	tests := []scenario{
		{
			name:   "seed: inference preempts the whole training RayCluster, head and worker",
			nodes:  []nodeSpec{{name: "node-a", gpus: 1, gpuMemory: 24 * GiB, model: "NVIDIA A10G", cpu: 8000, memory: 32 * GiB}},
			queues: seedQueues,
			running: []gangSpec{{id: "team-a/raycluster-sample", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{
				{name: "head", cpu: 1000, memory: 2 * GiB},
				{name: "worker", cpu: 1000, memory: 1 * GiB, gpus: []model.GPUBinding{whole(0)}},
			}}},
			pending: gangSpec{id: "team-a/ray-kai-scheduler-serve-llm", queue: "team-a", priority: 125, pods: []podSpec{
				{name: "head", cpu: 1000, memory: 4 * GiB},
				{name: "gpu-worker", cpu: 1000, memory: 15 * GiB, demand: model.GPUDemand{Count: 1, StartFreeFraction: 0.75}},
			}},
			wantVictims: []string{"team-a/raycluster-sample-head", "team-a/raycluster-sample-worker"},
			wantKind:    KindPreempt,
			wantReason:  "gang team-a/ray-kai-scheduler-serve-llm (priority 125) preempts gang team-a/raycluster-sample (priority 50): frees 1 GPU (24 GiB) on node-a",
			wantNeeded:  24 * GiB, wantFreed: 24 * GiB,
		},
		{
			// The node was deleted while its pods are still known (they are bound
			// to it until garbage-collected): they are no candidates, and no crash.
			name:  "victims on a deleted node are passed over",
			nodes: oneGPUNode,
			running: []gangSpec{
				onNode(lone("team-a/orphan", 10, whole(0)), "node-gone"),
				lone("team-a/train", 50, whole(0)),
			},
			pending:     inference(wholeGPUs(1)),
			wantVictims: []string{"team-a/train-0"},
		},
		{
			// A DRA claim whose devices the allocator chose: nothing is free now
			// (DeviceChoices empty); were preemptible pods gone, it would take GPU 1 of
			// node-a, so the one on GPU 1 goes, not the cheaper one on GPU 0.
			name:  "devices chosen outside the core: the victim is the holder of the chosen GPU",
			nodes: twoGPUNode,
			running: []gangSpec{
				withStart(lone("team-a/train-short", 50, whole(0)), 60),
				withStart(lone("team-a/train-long", 50, whole(1)), 36000),
			},
			pending: gangSpec{id: "team-a/serve", queue: "team-a", priority: 125, pods: []podSpec{{
				name: "0", demand: model.GPUDemand{Count: 1, ByDevice: true},
				choices:        map[string][]model.GPUBinding{},
				preemptChoices: map[string][]model.GPUBinding{"node-a": {whole(1)}},
			}}},
			wantVictims: []string{"team-a/train-long-0"},
		},
		{
			name:  "elastic before core: an autoscaled worker goes, not its gang nor another gang",
			nodes: []nodeSpec{{name: "node-a", gpus: 3}},
			running: []gangSpec{
				{id: "team-a/train", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{
					{name: "head"}, {name: "w0", gpus: []model.GPUBinding{whole(0)}}, {name: "w1", gpus: []model.GPUBinding{whole(1)}, elastic: true},
				}},
				lone("team-a/eval", 50, whole(2)),
			},
			pending:     inference(wholeGPUs(1)),
			wantVictims: []string{"team-a/train-w1"},
			wantReason:  "preempts 1 elastic member of gang team-a/train (priority 50)",
		},
		{
			name:  "never below minimum: one core worker is needed, the whole gang goes",
			nodes: twoGPUNode,
			running: []gangSpec{{id: "team-a/train", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{
				{name: "head"}, {name: "w0", gpus: []model.GPUBinding{whole(0)}}, {name: "w1", gpus: []model.GPUBinding{whole(1)}},
			}}},
			pending:     inference(wholeGPUs(1)),
			wantVictims: []string{"team-a/train-head", "team-a/train-w0", "team-a/train-w1"},
		},
		{
			name:  "never below minimum: the elastic worker is not enough, so the whole gang goes",
			nodes: twoGPUNode,
			running: []gangSpec{{id: "team-a/train", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{
				{name: "head"}, {name: "w0", gpus: []model.GPUBinding{whole(0)}}, {name: "w1", gpus: []model.GPUBinding{whole(1)}, elastic: true},
			}}},
			pending:     inference(wholeGPUs(2)),
			wantVictims: []string{"team-a/train-head", "team-a/train-w0", "team-a/train-w1"},
		},
		{
			name:        "cheapest: lower priority first, though it has run longer",
			nodes:       twoGPUNode,
			running:     []gangSpec{withStart(lone("team-a/build", 100, whole(0)), 3600), withStart(lone("team-a/train", 50, whole(1)), 36000)},
			pending:     inference(wholeGPUs(1)),
			wantVictims: []string{"team-a/train-0"},
		},
		{
			name:  "cheapest: fewer gangs at equal priority",
			nodes: []nodeSpec{{name: "node-a", gpus: 1}, {name: "node-b", gpus: 1}},
			running: []gangSpec{
				lone("team-a/notebook-1", 50, share(0, 40*GiB)), lone("team-a/notebook-2", 50, share(0, 40*GiB)),
				onNode(lone("team-a/train", 50, whole(0)), "node-b"),
			},
			pending:     inference(wholeGPUs(1)),
			wantVictims: []string{"team-a/train-0"},
		},
		{
			name:  "cheapest: lower priority beats fewer gangs",
			nodes: []nodeSpec{{name: "node-a", gpus: 1}, {name: "node-b", gpus: 1}},
			running: []gangSpec{
				lone("team-a/notebook-1", 50, share(0, 40*GiB)), lone("team-a/notebook-2", 50, share(0, 40*GiB)),
				onNode(lone("team-a/train", 60, whole(0)), "node-b"),
			},
			pending:     inference(wholeGPUs(1)),
			wantVictims: []string{"team-a/notebook-1-0", "team-a/notebook-2-0"},
		},
		{
			name:  "cheapest: one gang either way, the one holding less memory goes",
			nodes: []nodeSpec{{name: "node-a", gpus: 1}, {name: "node-b", gpus: 1}},
			running: []gangSpec{
				lone("team-a/big", 50, share(0, 60*GiB)),
				onNode(lone("team-a/small", 50, share(0, 40*GiB)), "node-b"),
			},
			pending:     inference(memoryShare(60 * GiB)),
			wantVictims: []string{"team-a/small-0"},
			wantNeeded:  60 * GiB, wantFreed: 40 * GiB,
		},
		{
			name:  "cheapest: one 30 GiB sharer rather than two 20 GiB ones, though smaller ones come first in cost order",
			nodes: oneGPUNode,
			running: []gangSpec{
				lone("team-a/s20-a", 50, share(0, 20*GiB)), lone("team-a/s20-b", 50, share(0, 20*GiB)), lone("team-a/s30", 50, share(0, 30*GiB)),
			},
			pending:     inference(memoryShare(40 * GiB)),
			wantVictims: []string{"team-a/s30-0"},
			wantNeeded:  40 * GiB, wantFreed: 30 * GiB,
		},
		{
			name:  "memory-sized: a 20 GiB share evicts one of four 20 GiB sharers, the youngest",
			nodes: oneGPUNode,
			running: []gangSpec{
				withStart(lone("team-a/s1", 50, share(0, 20*GiB)), 4*3600), withStart(lone("team-a/s2", 50, share(0, 20*GiB)), 3*3600),
				withStart(lone("team-a/s3", 50, share(0, 20*GiB)), 2*3600), withStart(lone("team-a/s4", 50, share(0, 20*GiB)), 1*3600),
			},
			pending:     inference(memoryShare(20 * GiB)),
			wantVictims: []string{"team-a/s4-0"},
			wantReason:  "frees 20 GiB of shared GPU memory on node-a",
			wantNeeded:  20 * GiB, wantFreed: 20 * GiB,
		},
		{
			name:  "memory-sized: vLLM needing half the GPU free at start evicts two sharers",
			nodes: oneGPUNode,
			running: []gangSpec{
				withStart(lone("team-a/s1", 50, share(0, 20*GiB)), 4*3600), withStart(lone("team-a/s2", 50, share(0, 20*GiB)), 3*3600),
				withStart(lone("team-a/s3", 50, share(0, 20*GiB)), 2*3600), withStart(lone("team-a/s4", 50, share(0, 20*GiB)), 1*3600),
			},
			pending:     inference(model.GPUDemand{Count: 1, MemoryBytes: 20 * GiB, StartFreeFraction: 0.5}),
			wantVictims: []string{"team-a/s3-0", "team-a/s4-0"},
			wantNeeded:  40 * GiB, wantFreed: 40 * GiB,
		},
		{
			name: "live free memory: the cheaper GPU is short of measured memory, the other node's victim goes",
			nodes: []nodeSpec{
				// Something outside the scheduler's view uses 16 GiB on node-a's GPU.
				{name: "node-a", gpus: 1, liveFree: map[int]int64{0: 4 * GiB}},
				{name: "node-b", gpus: 1},
			},
			running: []gangSpec{
				lone("team-a/notebook", 50, share(0, 20*GiB)),
				{id: "team-a/chat", queue: "team-a", priority: 125, pods: []podSpec{{name: "0", gpus: []model.GPUBinding{share(0, 40*GiB)}}}},
				withStart(onNode(lone("team-a/batch-1", 60, share(0, 40*GiB)), "node-b"), 7200),
				withStart(onNode(lone("team-a/batch-2", 60, share(0, 40*GiB)), "node-b"), 3600),
			},
			pending:     inference(memoryShare(30 * GiB)),
			wantVictims: []string{"team-a/batch-2-0"},
		},
		{
			name:  "live free memory: book-kept room is not enough, nothing is evicted",
			nodes: []nodeSpec{{name: "node-a", gpus: 1, liveFree: map[int]int64{0: 4 * GiB}}},
			running: []gangSpec{
				lone("team-a/notebook", 50, share(0, 20*GiB)),
				{id: "team-a/chat", queue: "team-a", priority: 125, pods: []podSpec{{name: "0", gpus: []model.GPUBinding{share(0, 40*GiB)}}}},
			},
			pending: inference(memoryShare(30 * GiB)),
			wantErr: "insufficient live free GPU memory",
		},
		{
			name:        "protection window: the gang that just started is spared, an older one goes",
			nodes:       twoGPUNode,
			running:     []gangSpec{withStart(lone("team-a/new", 50, whole(0)), 60), withStart(lone("team-a/old", 100, whole(1)), 7200)},
			pending:     inference(wholeGPUs(1)),
			minRuntime:  600,
			wantVictims: []string{"team-a/old-0"},
		},
		{
			name:       "protection window: nothing else to evict",
			nodes:      oneGPUNode,
			running:    []gangSpec{withStart(lone("team-a/new", 50, whole(0)), 60)},
			pending:    inference(wholeGPUs(1)),
			minRuntime: 600,
			wantErr:    "1 within the protection window (600 s)",
		},
		{
			name:  "not preemptible: the lower-priority gang is kept, a preemptible one goes",
			nodes: twoGPUNode,
			running: []gangSpec{
				{id: "team-a/pinned", queue: "team-a", priority: 50, pods: []podSpec{{name: "0", gpus: []model.GPUBinding{whole(0)}}}},
				lone("team-a/build", 100, whole(1)),
			},
			pending:     inference(wholeGPUs(1)),
			wantVictims: []string{"team-a/build-0"},
		},
		{
			name:  "not preemptible: one member marked non-preemptible keeps its whole gang",
			nodes: oneGPUNode,
			running: []gangSpec{{id: "team-a/train", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{
				{name: "head", notPreemptible: true}, {name: "w0", gpus: []model.GPUBinding{whole(0)}},
			}}},
			pending: inference(wholeGPUs(1)),
			wantErr: "1 not preemptible",
		},
		{
			name:  "another scheduler's pod is never a victim",
			nodes: oneGPUNode,
			running: []gangSpec{{id: "other/job", queue: "team-a", priority: 0, preemptible: true, pods: []podSpec{
				{name: "0", gpus: []model.GPUBinding{whole(0)}, foreign: true},
			}}},
			pending: inference(wholeGPUs(1)),
			wantErr: "1 of another scheduler",
		},
		{
			name:  "a terminating gang is not evicted again; its GPU stays booked until it is gone",
			nodes: oneGPUNode,
			running: []gangSpec{{id: "team-a/train", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{
				{name: "0", gpus: []model.GPUBinding{whole(0)}, terminating: true},
			}}},
			pending: inference(wholeGPUs(1)),
			wantErr: "1 already terminating",
		},
		{
			name:    "equal priority never preempts",
			nodes:   oneGPUNode,
			running: []gangSpec{lone("team-a/other-serve", 125, whole(0))},
			pending: inference(wholeGPUs(1)),
			wantErr: "1 in the same queue but not of lower priority",
		},
		{
			name:  "priority does not cross queues when no fair shares are given",
			nodes: oneGPUNode,
			running: []gangSpec{{id: "team-b/train", queue: "team-b", priority: 50, preemptible: true, pods: []podSpec{
				{name: "0", gpus: []model.GPUBinding{whole(0)}},
			}}},
			pending: inference(wholeGPUs(1)),
			wantErr: "1 in another queue, and no fair shares are known",
		},
		{
			name:  "a gang spanning nodes goes whole, so a one-node gang of equal priority is cheaper",
			nodes: []nodeSpec{{name: "node-a", gpus: 1}, {name: "node-b", gpus: 1}, {name: "node-c", gpus: 1}},
			running: []gangSpec{
				{id: "team-a/ddp", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{
					{name: "w0", node: "node-a", gpus: []model.GPUBinding{whole(0)}},
					{name: "w1", node: "node-b", gpus: []model.GPUBinding{whole(0)}},
				}},
				onNode(lone("team-a/small", 50, whole(0)), "node-c"),
			},
			pending:     inference(wholeGPUs(1)),
			wantVictims: []string{"team-a/small-0"},
		},
		{
			name:  "a gang spanning nodes: evicted on every node, and all it frees is counted",
			nodes: []nodeSpec{{name: "node-a", gpus: 1}, {name: "node-b", gpus: 1}},
			running: []gangSpec{{id: "team-a/ddp", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{
				{name: "w0", node: "node-a", gpus: []model.GPUBinding{whole(0)}},
				{name: "w1", node: "node-b", gpus: []model.GPUBinding{whole(0)}},
			}}},
			pending:     inference(wholeGPUs(1)),
			wantVictims: []string{"team-a/ddp-w0", "team-a/ddp-w1"},
			wantReason:  "frees 2 GPUs (160 GiB) on node-a, node-b",
			wantNeeded:  80 * GiB, wantFreed: 160 * GiB,
		},
		{
			name:  "a gang of two 4-GPU pods needs two nodes: victims on both, no more",
			nodes: []nodeSpec{{name: "node-a", gpus: 4}, {name: "node-b", gpus: 4}, {name: "node-c", gpus: 4}},
			running: []gangSpec{
				onNode(lone("team-a/a", 50, whole(0), whole(1), whole(2), whole(3)), "node-a"),
				onNode(lone("team-a/b", 50, whole(0), whole(1), whole(2), whole(3)), "node-b"),
				onNode(lone("team-a/c", 60, whole(0), whole(1), whole(2), whole(3)), "node-c"),
			},
			pending: gangSpec{id: "team-a/serve", queue: "team-a", priority: 125, pods: []podSpec{
				{name: "0", demand: wholeGPUs(4)}, {name: "1", demand: wholeGPUs(4)},
			}},
			wantVictims: []string{"team-a/a-0", "team-a/b-0"},
		},
		{
			name:   "reclaim: team-a, below its fair share, takes back two of the four GPUs team-b borrowed",
			nodes:  []nodeSpec{{name: "node-a", gpus: 4}},
			queues: twoTeams,
			running: []gangSpec{
				inQueue(withStart(lone("team-b/b1", 50, whole(0)), 4*3600), "team-b"),
				inQueue(withStart(lone("team-b/b2", 50, whole(1)), 3*3600), "team-b"),
				inQueue(withStart(lone("team-b/b3", 50, whole(2)), 2*3600), "team-b"),
				inQueue(withStart(lone("team-b/b4", 50, whole(3)), 1*3600), "team-b"),
			},
			pending:     gangSpec{id: "team-a/train", queue: "team-a", priority: 50, pods: []podSpec{{name: "0", demand: wholeGPUs(2)}}},
			wantVictims: []string{"team-b/b3-0", "team-b/b4-0"},
			wantKind:    KindReclaim,
			wantReason:  "reclaims gang team-b/b4 (priority 50), gang team-b/b3 (priority 50) from queue team-b (4 GPUs, above its quota of 2)",
		},
		{
			name:   "reclaim stops at the victim's fair share: one GPU of surplus serves a one-GPU gang",
			nodes:  []nodeSpec{{name: "node-a", gpus: 4}},
			queues: threeTeams,
			running: []gangSpec{
				inQueue(withStart(lone("team-b/b1", 50, whole(0)), 3*3600), "team-b"),
				inQueue(withStart(lone("team-b/b2", 50, whole(1)), 2*3600), "team-b"),
				inQueue(withStart(lone("team-b/b3", 50, whole(2)), 1*3600), "team-b"),
				{id: "team-c/serve", queue: "team-c", priority: 125, pods: []podSpec{{name: "0", gpus: []model.GPUBinding{whole(3)}}}},
			},
			pending:     gangSpec{id: "team-a/train", queue: "team-a", priority: 50, pods: []podSpec{{name: "0", demand: wholeGPUs(1)}}},
			queued:      []gangSpec{{id: "team-a/eval", queue: "team-a", priority: 50, pods: []podSpec{{name: "0", demand: wholeGPUs(1)}}}},
			wantVictims: []string{"team-b/b3-0"},
			wantKind:    KindReclaim,
		},
		{
			name:   "reclaim stops at the victim's fair share: a two-GPU gang would take team-b below it",
			nodes:  []nodeSpec{{name: "node-a", gpus: 4}},
			queues: threeTeams,
			running: []gangSpec{
				inQueue(lone("team-b/b1", 50, whole(0)), "team-b"),
				inQueue(lone("team-b/b2", 50, whole(1)), "team-b"),
				inQueue(lone("team-b/b3", 50, whole(2)), "team-b"),
				{id: "team-c/serve", queue: "team-c", priority: 125, pods: []podSpec{{name: "0", gpus: []model.GPUBinding{whole(3)}}}},
			},
			pending: gangSpec{id: "team-a/train", queue: "team-a", priority: 50, pods: []podSpec{{name: "0", demand: wholeGPUs(2)}}},
			wantErr: "reclaim stops where a queue would go below its GPU fair share",
		},
		{
			name:  "reclaim in a queue tree: team-a within its quota takes from its sibling above its quota",
			nodes: []nodeSpec{{name: "node-a", gpus: 5}},
			queues: []queueSpec{
				{name: "dept-1", quota: 2, limit: -1, weight: 1},
				{name: "team-a", parent: "dept-1", quota: 2, limit: -1, weight: 1},
				{name: "team-b", parent: "dept-1", quota: 0, limit: -1, weight: 1},
				{name: "dept-2", quota: 2, limit: -1, weight: 0},
				{name: "team-c", parent: "dept-2", quota: 2, limit: -1, weight: 1},
			},
			running: []gangSpec{
				inQueue(lone("team-b/b1", 50, whole(0)), "team-b"),
				inQueue(lone("team-b/b2", 50, whole(1)), "team-b"),
				inQueue(withStart(lone("team-c/c1", 50, whole(2)), 7200), "team-c"),
				inQueue(withStart(lone("team-c/c2", 50, whole(3)), 3600), "team-c"),
				inQueue(withStart(lone("team-c/c3", 50, whole(4)), 5400), "team-c"),
			},
			pending: gangSpec{id: "team-a/train", queue: "team-a", priority: 50, pods: []podSpec{{name: "0", demand: wholeGPUs(1)}}},
			// Quota is guaranteed: team-b holds 2 GPUs on a quota of 0, so team-a, within
			// its quota, takes from its sibling first (the cheaper victim by name).
			wantVictims: []string{"team-b/b1-0"},
			wantKind:    KindReclaim,
			wantReason:  "(priority 50; queue team-a holds 0 GPUs, within its quota of 2) reclaims gang team-b/b1 (priority 50) from queue team-b (2 GPUs, above its quota of 0)",
		},
		{
			name:  "reclaim in a queue tree: a queue above its share in a department at its share is its sibling's to reclaim, not another department's",
			nodes: []nodeSpec{{name: "node-a", gpus: 4}},
			queues: []queueSpec{
				{name: "dept-1", quota: 2, limit: -1, weight: 1},
				{name: "team-a", parent: "dept-1", quota: 2, limit: -1, weight: 1},
				{name: "dept-2", quota: 2, limit: -1, weight: 1},
				{name: "team-c", parent: "dept-2", quota: 0, limit: -1, weight: 1},
				{name: "team-d", parent: "dept-2", quota: 2, limit: -1, weight: 1},
			},
			running: []gangSpec{
				lone("team-a/a1", 50, whole(0)),
				inQueue(lone("team-c/c1", 50, whole(1)), "team-c"),
				inQueue(lone("team-c/c2", 50, whole(2)), "team-c"),
				{id: "other/job", pods: []podSpec{{name: "0", gpus: []model.GPUBinding{whole(3)}, foreign: true}}},
			},
			pending: gangSpec{id: "team-a/train", queue: "team-a", priority: 50, pods: []podSpec{{name: "0", demand: wholeGPUs(1)}}},
			queued:  []gangSpec{{id: "team-d/train", queue: "team-d", priority: 50, pods: []podSpec{{name: "0", demand: wholeGPUs(2)}}}},
			wantErr: "2 in another queue, and by quota, that queue is not above its GPU quota, and by fair share, that queue is not above its GPU fair share",
		},
		{
			name:   "reclaim: a queue at its fair share is not reclaimed from, whatever the priorities",
			nodes:  []nodeSpec{{name: "node-a", gpus: 4}},
			queues: threeTeams,
			running: []gangSpec{
				lone("team-a/a1", 125, whole(0)),
				inQueue(lone("team-b/b1", 10, whole(1)), "team-b"),
				inQueue(lone("team-b/b2", 10, whole(2)), "team-b"),
				{id: "team-c/serve", queue: "team-c", priority: 125, pods: []podSpec{{name: "0", gpus: []model.GPUBinding{whole(3)}}}},
			},
			pending: gangSpec{id: "team-a/serve", queue: "team-a", priority: 125, pods: []podSpec{{name: "0", demand: wholeGPUs(1)}}},
			wantErr: "2 in another queue, and by quota, that queue is not above its GPU quota, and by fair share, that queue is not above its GPU fair share",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := build(t, tc.nodes, tc.queues, tc.running, tc.pending, tc.queued...)
			res, err := Find(w.request(t, tc.minRuntime))
			check(t, tc, res, err)
		})
	}
}

func check(t *testing.T, tc scenario, res *Result, err error) {
	t.Helper()
	if err != nil {
		t.Logf("error: %v", err)
	} else {
		t.Logf("reason: %s", res.Reason)
	}
	if tc.wantErr != "" {
		if err == nil {
			t.Fatalf("Find evicted %v, want error containing %q", podIDs(res.Victims), tc.wantErr)
		}
		if !errors.Is(err, ErrNoVictims) || !strings.Contains(err.Error(), tc.wantErr) {
			t.Fatalf("Find error = %q, want ErrNoVictims containing %q", err, tc.wantErr)
		}
		return
	}
	if err != nil {
		t.Fatalf("Find: %v", err)
	}
	if got := podIDs(res.Victims); !slices.Equal(got, tc.wantVictims) {
		t.Errorf("victims = %v, want %v\nreason: %s", got, tc.wantVictims, res.Reason)
	}
	wantKind := tc.wantKind
	if wantKind == "" {
		wantKind = KindPreempt
	}
	if res.Kind != wantKind {
		t.Errorf("kind = %q, want %q", res.Kind, wantKind)
	}
	if tc.wantReason != "" && !strings.Contains(res.Reason, tc.wantReason) {
		t.Errorf("reason = %q, want it to contain %q", res.Reason, tc.wantReason)
	}
	if tc.wantNeeded != 0 && res.NeededBytes != tc.wantNeeded {
		t.Errorf("needed = %s, want %s", placement.FormatBytes(res.NeededBytes), placement.FormatBytes(tc.wantNeeded))
	}
	if tc.wantFreed != 0 && res.FreedBytes != tc.wantFreed {
		t.Errorf("freed = %s, want %s", placement.FormatBytes(res.FreedBytes), placement.FormatBytes(tc.wantFreed))
	}
	if len(res.Placements) != len(tc.pending.pods) {
		t.Errorf("%d placements for %d pods", len(res.Placements), len(tc.pending.pods))
	}
}

// lone is a running preemptible gang of one pod in team-a.
func lone(id string, priority int32, gpus ...model.GPUBinding) gangSpec {
	return gangSpec{id: id, queue: "team-a", priority: priority, preemptible: true, pods: []podSpec{{name: "0", gpus: gpus}}}
}

func withStart(g gangSpec, startedAgo int64) gangSpec { g.startedAgo = startedAgo; return g }

func inQueue(g gangSpec, queue string) gangSpec { g.queue = queue; return g }

func onNode(g gangSpec, node string) gangSpec {
	g.pods = slices.Clone(g.pods)
	for i := range g.pods {
		g.pods[i].node = node
	}
	return g
}

// TestNoPingPong carries out a decision and runs the next cycle: neither the same
// rule nor the other one may take back what was just decided.
func TestNoPingPong(t *testing.T) {
	t.Run("reclaim: team-b cannot take back what team-a reclaimed", func(t *testing.T) {
		w := build(t, []nodeSpec{{name: "node-a", gpus: 4}}, twoTeams,
			[]gangSpec{
				inQueue(lone("team-b/b1", 50, whole(0)), "team-b"),
				inQueue(lone("team-b/b2", 50, whole(1)), "team-b"),
				inQueue(lone("team-b/b3", 50, whole(2)), "team-b"),
				inQueue(lone("team-b/b4", 50, whole(3)), "team-b"),
			},
			// Preemptible, so that only the fair-share rule keeps team-b from it.
			gangSpec{id: "team-a/train", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{{name: "0", demand: wholeGPUs(2)}}})
		first, err := Find(w.request(t, 0))
		if err != nil || first.Kind != KindReclaim || len(first.VictimGangs) != 2 {
			t.Fatalf("cycle 1: want team-a to reclaim 2 gangs, got %+v, %v", first, err)
		}
		w.apply(first)

		// Cycle 2: every evicted team-b gang asks again. At its own priority nothing
		// may go; at a higher one it may preempt within team-b, never take from team-a.
		for _, id := range first.VictimGangs {
			w.pending = w.snapshot.Gangs[id]
			res, err := Find(w.request(t, 0))
			if err == nil {
				t.Fatalf("cycle 2: %s evicts %v back: %s", id, podIDs(res.Victims), res.Reason)
			}
			if !errors.Is(err, ErrNoVictims) {
				t.Fatalf("cycle 2: %v", err)
			}
			t.Logf("cycle 2, %s: %v", id, err)

			w.pending.Priority = 1000
			res, err = Find(w.request(t, 0))
			if err != nil {
				t.Fatalf("cycle 2: %s at priority 1000 may preempt in its own queue: %v", id, err)
			}
			for _, victim := range res.Victims {
				if victim.Queue != "team-b" {
					t.Fatalf("cycle 2: %s at priority 1000 takes %s from %s: %s", id, victim.ID, victim.Queue, res.Reason)
				}
			}
			w.pending.Priority = 50
		}
	})

	t.Run("preempt: the evicted gang cannot evict its preemptor", func(t *testing.T) {
		w := build(t, []nodeSpec{{name: "node-a", gpus: 1}}, seedQueues,
			[]gangSpec{{id: "team-a/train", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{{name: "0", gpus: []model.GPUBinding{whole(0)}}}}},
			gangSpec{id: "team-a/serve", queue: "team-a", priority: 125, preemptible: true, pods: []podSpec{{name: "0", demand: wholeGPUs(1)}}})
		first, err := Find(w.request(t, 0))
		if err != nil {
			t.Fatalf("cycle 1: %v", err)
		}
		w.apply(first)
		w.pending = w.snapshot.Gangs["team-a/train"]
		if res, err := Find(w.request(t, 0)); err == nil {
			t.Fatalf("cycle 2: team-a/train evicts %v back: %s", podIDs(res.Victims), res.Reason)
		}
	})
}

// TestFindLeavesTheViewAlone checks that Find only simulates: the cycle's view and
// the snapshot are as they were.
func TestFindLeavesTheViewAlone(t *testing.T) {
	w := build(t, []nodeSpec{{name: "node-a", gpus: 1}}, nil,
		[]gangSpec{{id: "team-a/train", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{{name: "0", gpus: []model.GPUBinding{whole(0)}}}}},
		gangSpec{id: "team-a/serve", queue: "team-a", priority: 125, pods: []podSpec{{name: "0", demand: wholeGPUs(1)}}})
	req := w.request(t, 0)
	before := *req.View.Node("node-a").Clone()
	beforeGPU := before.GPUs[0]
	if _, err := Find(req); err != nil {
		t.Fatal(err)
	}
	after := req.View.Node("node-a")
	if after.GPUs[0] != beforeGPU || after.Requested != before.Requested {
		t.Errorf("Find changed the view: GPU %+v -> %+v", beforeGPU, after.GPUs[0])
	}
	if w.snapshot.Node("node-a").GPUs[0] != beforeGPU {
		t.Errorf("Find changed the snapshot")
	}
}

// TestFindWhenTheGangFits returns no victims rather than evicting for nothing.
func TestFindWhenTheGangFits(t *testing.T) {
	w := build(t, []nodeSpec{{name: "node-a", gpus: 2}}, nil,
		[]gangSpec{{id: "team-a/train", queue: "team-a", priority: 50, preemptible: true, pods: []podSpec{{name: "0", gpus: []model.GPUBinding{whole(0)}}}}},
		gangSpec{id: "team-a/serve", queue: "team-a", priority: 125, pods: []podSpec{{name: "0", demand: wholeGPUs(1)}}})
	res, err := Find(w.request(t, 0))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Victims) != 0 || res.Kind != "" || len(res.Placements) != 1 {
		t.Errorf("got victims %v kind %q placements %v, want none, \"\" and one", podIDs(res.Victims), res.Kind, res.Placements)
	}
}
