// Package scenario is the one vocabulary the scheduling core's tests use to write a
// cluster down as data: nodes, queues, running and pending gangs, and what the cycle
// must decide (binds, evictions, nominations, and why the rest waits). Multi-cycle
// scenarios carry each Plan out on the snapshot, as the cluster would, and then run
// more cycles to show that nothing flips back.
//
// It is for tests only. It builds model values and runs pkg/scheduler; it must not
// depend on a Kubernetes client or any I/O. Tests of pkg/scheduler and pkg/preempt
// import it from their external test packages (package scheduler_test, preempt_test).
package scenario

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/gantry-dev/gantry/pkg/model"
	"github.com/gantry-dev/gantry/pkg/scheduler"
)

// GiB is 2^30 bytes.
const GiB = int64(1) << 30

// Now is the scenarios' clock in the first cycle; each later cycle adds one second.
const Now = int64(1_000_000)

// Scenario is one test: a cluster, and what the scheduler must decide about it.
type Scenario struct {
	Name string
	// Source names where a ported case comes from: "volcano
	// pkg/scheduler/actions/preempt/preempt_test.go: TestPreempt/<case name>".
	Source string
	// Differs says in one line why Gantry decides otherwise than the source, when it
	// does on purpose; the expectations are Gantry's.
	Differs string

	Nodes  []Node
	Queues []Queue
	// Gangs are running (On set) or pending.
	Gangs []Gang
	// DefaultQueue charges gangs with no queue (model.Snapshot.DefaultQueue).
	DefaultQueue string
	// NoPreemption turns preempt and reclaim off.
	NoPreemption      bool
	MinRuntimeSeconds int64

	// Expect is checked against the first cycle's Plan.
	Expect Expect
	// Later are expectations of later cycles' Plans, by cycle number (2 and up).
	Later map[int]Expect
	// Cycles is how many cycles to run (1 when zero). With more, each Plan is carried
	// out before the next cycle (Apply), Arrive and Leave change the cluster, Final is
	// checked after the last, and the last Settle cycles must change nothing.
	Cycles int
	// Arrive are gangs created just before the cycle of that number (1 is the first).
	Arrive map[int][]Gang
	// Leave are gangs that finish (all their pods go) just before that cycle.
	Leave map[int][]string
	// Settle is how many final cycles must bind and evict nothing (2 when zero and
	// Cycles > 1).
	Settle int
	Final  *Final
	// NamespaceLabels are the namespaces' labels, for namespaceSelectors.
	NamespaceLabels map[string]map[string]string
	// Linger keeps evicted pods on the named node terminating (bound, holding their
	// resources) for that many cycles before they go.
	Linger map[string]int
}

// Node is a machine with GPUs GPUs of one model.
type Node struct {
	Name string
	GPUs int
	// Model defaults to "NVIDIA-H100"; GPUMemory to 80 GiB.
	Model     string
	GPUMemory int64
	// CPU (millicores) and Memory (bytes) default to 64 cores and 512 GiB; Pods (the
	// most pods the node takes) to 110.
	CPU, Memory, Pods int64
	Labels            map[string]string
	Taints            []corev1.Taint
	// CSILimits are the node's CSI attach limits per driver.
	CSILimits map[string]int
	// LiveFree overrides, per GPU index, the free memory the node agent measured
	// (unknown otherwise).
	LiveFree map[int]int64
}

// Queue is a queue with its GPU bounds; CPU and memory are unbounded (quota and limit
// -1) unless CPU or Memory is set.
type Queue struct {
	Name, Parent string
	// Priority defaults to 100.
	Priority int32
	// Quota is the GPU quota (-1 for unlimited).
	Quota float64
	// Limit is the GPU limit; 0 means none (-1). A limit of zero GPUs is not
	// expressible here.
	Limit float64
	// Weight is the GPU overQuotaWeight; 0 means 1, NoWeight means 0.
	Weight float64
	// CPU and Memory, when not nil, replace the unbounded defaults.
	CPU, Memory *model.QueueResource
}

// NoWeight is a Queue.Weight of zero: no share of spare capacity.
const NoWeight = -1

// Gang is a gang of identical pods. Its ID is Name; its pods are "ns/<Name>-<i>".
type Gang struct {
	Name  string
	Queue string
	// Priority defaults to 0.
	Priority int32
	// NonPreemptible marks the gang (and its pods) as not preemptible;
	// NonPreemptiblePods marks single pods, by index.
	NonPreemptible     bool
	NonPreemptiblePods []int
	// NeverPreempts is model.Gang.NeverPreempts (preemptionPolicy: Never).
	NeverPreempts bool
	// Pods is how many members exist (1 when zero); Min how many must start together
	// (Pods when zero). Members past Min are elastic.
	Pods, Min int
	// GPUs is whole GPUs per pod; CPU (millicores, default 1000) and Memory (default
	// 1 GiB) per pod. PodGPUs, by index, replaces GPUs for single pods (0 for a Ray
	// head beside its GPU workers).
	GPUs    int
	PodGPUs map[int]int
	// Share, when set, makes each pod ask for that much memory of one shared GPU
	// instead of GPUs whole ones; StartFree is its engine's gpu_memory_utilization
	// (model.GPUDemand.StartFreeFraction), for shares or whole GPUs.
	Share       int64
	StartFree   float64
	CPU, Memory int64
	// BestEffort pods request no CPU or memory (they still take a pod slot).
	BestEffort bool
	// NodeSelector applies to every pod; PodNodeSelectors, by index, replace it.
	NodeSelector     map[string]string
	PodNodeSelectors map[int]map[string]string
	// On is the node a running gang's pods are bound to; OnNodes gives one node per
	// bound pod instead. Empty for a pending gang.
	On      string
	OnNodes []string
	// Bound is how many members are bound when running (all when zero).
	Bound int
	// NominatedTo is the node an earlier cycle nominated the gang's pending pods to
	// (a preemption made room for them there); NominationOrder numbers that
	// nomination among others (model.Pod.NominationOrder; unknown when zero).
	NominatedTo     string
	NominationOrder int64
	// CreatedAt, when not zero, is when the gang was created; by default gangs are
	// created one second apart in the order of Scenario.Gangs.
	CreatedAt int64
	// StartedAgo is how long ago a running gang started, in seconds (default 3600).
	StartedAgo int64
	// NodeGone says that the node On names was deleted while the gang's pods are
	// still known: they are bound there and booked nowhere.
	NodeGone bool
	// Foreign marks the gang's pods as another scheduler's: counted, never moved.
	Foreign bool
	// DeviceChoices and PreemptionDeviceChoices are every pod's
	// model.Pod.DeviceChoices and PreemptionDeviceChoices (devices an allocator
	// outside the core chose, node by node).
	DeviceChoices, PreemptionDeviceChoices map[string][]model.GPUBinding
	// Pod is what every pod of the gang states beyond resources, in the API's terms
	// (see Spec).
	Spec
}

// Expect is what one cycle must decide. Every list is compared whole and sorted.
type Expect struct {
	// Binds are gang names, with "+N" for N elastic members ("ray+2").
	Binds []string
	// Evicted are pod names without namespace ("train-0").
	Evicted []string
	// Nominated are gang names whose victims are on their way out.
	Nominated []string
	// Withdrawn are gang names whose nomination the cycle ended (Plan.Withdrawn).
	Withdrawn []string
	// Pending maps every gang left pending to why.
	Pending map[string]scheduler.PendingKind
	// FitsOn maps a pending gang to the nodes its first pending pod fits on before
	// the cycle (every filter, no ranking), in any order.
	FitsOn map[string][]string
	// Placed maps a bound gang to the nodes of its placements, one per pod in pod
	// order.
	Placed map[string][]string
}

// Final is the state after the last cycle.
type Final struct {
	// Running are the gangs with at least their minimum bound.
	Running []string
	// Pending maps gangs with pending members to the kind of the last cycle's reason
	// ("" when the last cycle did not report them).
	Pending map[string]scheduler.PendingKind
}

// Build turns the scenario's cluster into a snapshot: running gangs bound and booked
// on their nodes, pending ones unbound.
func Build(sc Scenario) (*model.Snapshot, error) {
	snap := model.NewSnapshot()
	snap.Now = Now
	snap.DefaultQueue = sc.DefaultQueue
	snap.NamespaceLabels = sc.NamespaceLabels
	for _, n := range sc.Nodes {
		snap.AddNode(newNode(n))
	}
	for _, q := range sc.Queues {
		snap.Queues[q.Name] = newQueue(q)
	}
	for i, g := range sc.Gangs {
		if err := AddGang(snap, g, int64(i)); err != nil {
			return nil, err
		}
	}
	return snap, nil
}

func newNode(n Node) *model.Node {
	out := &model.Node{
		Name:        n.Name,
		Labels:      n.Labels,
		Taints:      n.Taints,
		Allocatable: model.Resources{MilliCPU: or(n.CPU, 64000), MemoryBytes: or(n.Memory, 512*GiB), Pods: or(n.Pods, 110)},
	}
	out.CSIAttachLimits = n.CSILimits
	gpuModel := n.Model
	if gpuModel == "" {
		gpuModel = "NVIDIA-H100"
	}
	for i := 0; i < n.GPUs; i++ {
		live := model.UnknownBytes
		if free, ok := n.LiveFree[i]; ok {
			live = free
		}
		out.GPUs = append(out.GPUs, model.GPU{
			Index: i, UUID: fmt.Sprintf("GPU-%s-%d", n.Name, i), Model: gpuModel,
			MemoryBytes: or(n.GPUMemory, 80*GiB), LiveFreeBytes: live, Healthy: true,
		})
	}
	return out
}

func newQueue(q Queue) *model.Queue {
	unbounded := model.QueueResource{Quota: model.Unlimited, Limit: model.Unlimited, OverQuotaWeight: 1}
	gpu := model.QueueResource{Quota: q.Quota, Limit: q.Limit, OverQuotaWeight: q.Weight}
	if gpu.Limit == 0 {
		gpu.Limit = model.Unlimited
	}
	switch gpu.OverQuotaWeight {
	case 0:
		gpu.OverQuotaWeight = 1
	case NoWeight:
		gpu.OverQuotaWeight = 0
	}
	res := map[model.ResourceName]model.QueueResource{model.ResourceGPU: gpu, model.ResourceCPU: unbounded, model.ResourceMemory: unbounded}
	if q.CPU != nil {
		res[model.ResourceCPU] = *q.CPU
	}
	if q.Memory != nil {
		res[model.ResourceMemory] = *q.Memory
	}
	priority := q.Priority
	if priority == 0 {
		priority = 100
	}
	return &model.Queue{Name: q.Name, Parent: q.Parent, Priority: priority, Resources: res}
}

// AddGang adds g to snap, created at createdAt; a running gang's pods are bound and
// booked on their nodes (whole GPUs, lowest free index first).
func AddGang(snap *model.Snapshot, g Gang, createdAt int64) error {
	size := max(g.Pods, 1)
	minMember := g.Min
	if minMember == 0 {
		minMember = size
	}
	if g.CreatedAt != 0 {
		createdAt = g.CreatedAt
	}
	id := model.GangID(g.Name)
	if snap.Gangs[id] != nil {
		return fmt.Errorf("scenario: gang %s is declared twice", g.Name)
	}
	mg := &model.Gang{ID: id, Queue: g.Queue, Priority: g.Priority, Preemptible: !g.NonPreemptible, MinMember: minMember, CreatedAt: createdAt,
		NeverPreempts: g.NeverPreempts}
	bound := 0
	if g.On != "" || len(g.OnNodes) > 0 {
		bound = size
		if g.Bound > 0 {
			bound = g.Bound
		}
	}
	if g.Share > 0 && g.GPUs > 0 {
		return fmt.Errorf("scenario: gang %s asks for both whole GPUs and a share", g.Name)
	}
	for i := 0; i < size; i++ {
		p := &model.Pod{
			ID: podIDIn(g.Namespace, g.Name, i), UID: fmt.Sprintf("uid-%s-%d", g.Name, i), Gang: id,
			Queue: g.Queue, Priority: g.Priority, Preemptible: !g.NonPreemptible,
			Requests:     model.Resources{MilliCPU: or(g.CPU, 1000), MemoryBytes: or(g.Memory, GiB), Pods: 1},
			GPU:          model.GPUDemand{Count: g.GPUs, StartFreeFraction: g.StartFree},
			Elastic:      i >= minMember,
			CreatedAt:    createdAt,
			NodeSelector: g.NodeSelector,
		}
		if g.Share > 0 {
			p.GPU.Count, p.GPU.MemoryBytes = 1, g.Share
		}
		if n, ok := g.PodGPUs[i]; ok {
			p.GPU.Count = n
			if n == 0 {
				p.GPU = model.GPUDemand{}
			}
		}
		p.Foreign = g.Foreign
		p.DeviceChoices, p.PreemptionDeviceChoices = g.DeviceChoices, g.PreemptionDeviceChoices
		if g.BestEffort {
			p.Requests = model.Resources{Pods: 1}
		}
		if err := g.Spec.apply(snap, p, g.Name, i); err != nil {
			return fmt.Errorf("scenario: gang %s: %w", g.Name, err)
		}
		if sel, ok := g.PodNodeSelectors[i]; ok {
			p.NodeSelector = sel
		}
		if slices.Contains(g.NonPreemptiblePods, i) {
			p.Preemptible = false
		}
		if i < bound {
			nodeName := g.On
			if len(g.OnNodes) > 0 {
				nodeName = g.OnNodes[min(i, len(g.OnNodes)-1)]
			}
			if g.NodeGone {
				p.Node, p.StartedAt = nodeName, Now-or(g.StartedAgo, 3600)
				for k := 0; k < p.GPU.Count; k++ {
					p.GPUs = append(p.GPUs, model.GPUBinding{Index: k, Whole: !p.GPU.Shared(), MemoryBytes: p.GPU.MemoryBytes})
				}
			} else if err := bindPod(snap, p, nodeName, Now-or(g.StartedAgo, 3600)); err != nil {
				return fmt.Errorf("scenario: gang %s: %w", g.Name, err)
			}
		}
		if i >= bound && g.NominatedTo != "" {
			p.NominatedNode, p.NominationOrder = g.NominatedTo, g.NominationOrder
		}
		snap.Pods[p.ID] = p
		mg.Members = append(mg.Members, p.ID)
	}
	snap.Gangs[id] = mg
	return nil
}

// bindPod books p's whole GPUs on the lowest free indexes of the node, or its share
// on the first GPU with room for it.
func bindPod(snap *model.Snapshot, p *model.Pod, nodeName string, startedAt int64) error {
	n := snap.Node(nodeName)
	if n == nil {
		return fmt.Errorf("pod %s is on node %q, which the scenario does not declare", p.ID, nodeName)
	}
	if p.GPU.Shared() {
		for i := range n.GPUs {
			g := &n.GPUs[i]
			if bytes := p.GPU.BytesOn(g); !g.Exclusive && bytes <= g.FreeBytes() {
				place(snap, p, nodeName, []model.GPUBinding{{Index: g.Index, MemoryBytes: bytes}}, startedAt)
				return nil
			}
		}
		return fmt.Errorf("pod %s needs a share of %d bytes, node %s has no GPU with room", p.ID, p.GPU.MemoryBytes, nodeName)
	}
	var gpus []model.GPUBinding
	for i := range n.GPUs {
		if len(gpus) == p.GPU.Count {
			break
		}
		if n.GPUs[i].Idle() {
			gpus = append(gpus, model.GPUBinding{Index: n.GPUs[i].Index, Whole: true})
		}
	}
	if len(gpus) < p.GPU.Count {
		return fmt.Errorf("pod %s needs %d GPUs, node %s has %d free", p.ID, p.GPU.Count, nodeName, len(gpus))
	}
	place(snap, p, nodeName, gpus, startedAt)
	return nil
}

// place binds p to the node with the given GPUs and books them.
func place(snap *model.Snapshot, p *model.Pod, nodeName string, gpus []model.GPUBinding, startedAt int64) {
	p.Node, p.GPUs, p.StartedAt, p.NominatedNode = nodeName, gpus, startedAt, ""
	n := snap.Node(nodeName).Clone()
	n.Book(p, gpus)
	snap.AddNode(n)
}

// PodID is the ID of a gang's i-th pod.
func PodID(gang string, i int) model.PodID { return model.PodID(fmt.Sprintf("ns/%s-%d", gang, i)) }

func or(v, def int64) int64 {
	if v == 0 {
		return def
	}
	return v
}
