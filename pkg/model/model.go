// Package model is the scheduler's own snapshot of a cluster: nodes and their GPUs,
// pods and their demands, gangs and queues, as plain Go values.
//
// It must not depend on a Kubernetes client, an informer or any I/O. The scheduling
// core (pkg/placement, pkg/fairshare, pkg/gang, pkg/preempt, pkg/scheduler) reads and
// writes only these types; pkg/kube translates the API objects into them, and pkg/sim
// builds them from traces. Node taints, tolerations and node affinity use the core/v1
// types because k8s.io/component-helpers evaluates them.
package model

import (
	"fmt"
	"math"
	"strconv"
	"strings"

	corev1 "k8s.io/api/core/v1"
)

// MilliPerGPU is one whole GPU in GPU milli-units, the unit of fractional demand.
const MilliPerGPU = 1000

// Resources is an amount of the scalar node resources a pod requests.
type Resources struct {
	MilliCPU    int64
	MemoryBytes int64
	Pods        int64
}

// Add returns r + o.
func (r Resources) Add(o Resources) Resources {
	return Resources{r.MilliCPU + o.MilliCPU, r.MemoryBytes + o.MemoryBytes, r.Pods + o.Pods}
}

// Sub returns r - o.
func (r Resources) Sub(o Resources) Resources {
	return Resources{r.MilliCPU - o.MilliCPU, r.MemoryBytes - o.MemoryBytes, r.Pods - o.Pods}
}

// Fits reports whether r fits into free.
func (r Resources) Fits(free Resources) bool {
	return r.MilliCPU <= free.MilliCPU && r.MemoryBytes <= free.MemoryBytes && r.Pods <= free.Pods
}

// GPU is one physical GPU (or MIG device) on a node, and what is booked on it.
type GPU struct {
	Index int
	UUID  string
	// Model is the product name as the inventory reports it ("NVIDIA A10G", "A10").
	Model       string
	MemoryBytes int64
	// AllocatedBytes is memory booked by pods placed on this GPU. A pod that holds the
	// whole GPU books all of MemoryBytes and sets Exclusive.
	AllocatedBytes int64
	// Exclusive is true while a pod holds the whole GPU; no share may join it.
	Exclusive bool
	// Sharers counts pods holding a share of this GPU.
	Sharers int
	// LiveFreeBytes is free memory as the node agent last measured it (NVML), or
	// UnknownBytes. Book-kept free memory can overstate it when something outside the
	// scheduler's view (another scheduler, a leaking process) uses the GPU.
	LiveFreeBytes int64
	Healthy       bool
	// Partition marks a MIG device: it is taken whole, and only by a claim whose
	// devices the structured allocator chose (Pod.DeviceChoices); the core places
	// no count or share on it by itself.
	Partition bool
}

// UnknownBytes marks a memory figure that no one has measured.
const UnknownBytes int64 = -1

// FreeBytes is memory not booked by any pod.
func (g *GPU) FreeBytes() int64 {
	if g.Exclusive {
		return 0
	}
	return g.MemoryBytes - g.AllocatedBytes
}

// Idle reports whether nothing is booked on the GPU.
func (g *GPU) Idle() bool { return !g.Exclusive && g.AllocatedBytes == 0 && g.Sharers == 0 }

// Node is a schedulable machine.
type Node struct {
	Name          string
	Labels        map[string]string
	Taints        []corev1.Taint
	Unschedulable bool
	Allocatable   Resources
	// Requested is the sum of requests of all pods counted on the node, including pods
	// of other schedulers.
	Requested Resources
	GPUs      []GPU
	// GPUsByCountOnly is true when the node has no per-device inventory (no node
	// agent): GPUs then come from the nvidia.com/gpu count and GFD labels, and only
	// whole-GPU demands are placed on it, since the device plugin picks the device.
	GPUsByCountOnly bool
	// Pods are the pods counted on the node (bound, assumed or placed in this cycle),
	// for the checks that look at other pods: inter-pod affinity, topology spread,
	// host ports, CSI attach limits. Book and Unbook keep it; it is never changed in
	// place, so a clone may share it.
	Pods []*Pod
	// AntiAffinityPods counts the Pods with required anti-affinity terms, so that a
	// pod without constraints skips nodes where none can repel it.
	AntiAffinityPods int
	// AffinityPods counts the Pods with terms that score the pods placed near them
	// (Pod.HasAffinityTerms).
	AffinityPods int
	// DeclaredFeatures are the features the node declares (status.declaredFeatures),
	// which pods needing them require.
	DeclaredFeatures []string
	// CSIAttachLimits is the most volumes each CSI driver may attach on the node
	// (CSINode drivers[].allocatable.count); a driver not listed has no limit.
	CSIAttachLimits map[string]int
}

// SoftTainted reports whether n has a PreferNoSchedule taint, which every pod that
// does not tolerate it is scored against.
func (n *Node) SoftTainted() bool {
	for i := range n.Taints {
		if n.Taints[i].Effect == corev1.TaintEffectPreferNoSchedule {
			return true
		}
	}
	return false
}

// Free returns the unrequested node resources.
func (n *Node) Free() Resources { return n.Allocatable.Sub(n.Requested) }

// IdleGPUs counts GPUs with nothing booked on them.
func (n *Node) IdleGPUs() int {
	c := 0
	for i := range n.GPUs {
		if n.GPUs[i].Healthy && !n.GPUs[i].Partition && n.GPUs[i].Idle() {
			c++
		}
	}
	return c
}

// Clone returns a deep copy of the mutable parts of n (GPUs); labels and taints are
// shared because the core never writes them.
func (n *Node) Clone() *Node {
	c := *n
	c.GPUs = append([]GPU(nil), n.GPUs...)
	return &c
}

// GPUDemand is what a pod needs of GPUs. Count GPUs on one node; on each, either the
// whole GPU (MemoryBytes == 0 and FractionMilli == 0) or a share by memory or fraction.
type GPUDemand struct {
	Count int
	// MemoryBytes is the per-GPU share in bytes (DRA capacity request, or the
	// gantry.dev/gpu-memory annotation). Zero when not a memory share.
	MemoryBytes int64
	// FractionMilli is the per-GPU share in 1/1000 of a GPU (gantry.dev/gpu-fraction,
	// or a trace's gpu_milli). Zero when not a fractional share.
	FractionMilli int64
	// Models lists the accepted GPU models; empty accepts any.
	Models []string
	// ByDevice is true when the scheduler must name the devices (a DRA claim): only
	// nodes with a per-device inventory qualify, not GPUsByCountOnly ones.
	ByDevice bool
	// StartFreeFraction is the fraction of each GPU's total memory that must be free,
	// live, when the pod starts (vLLM's gpu_memory_utilization). Zero when unknown.
	StartFreeFraction float64
}

// Whole reports whether the demand takes whole GPUs.
func (d GPUDemand) Whole() bool { return d.Count > 0 && d.MemoryBytes == 0 && d.FractionMilli == 0 }

// Shared reports whether the demand is a share of one GPU.
func (d GPUDemand) Shared() bool { return d.Count > 0 && !d.Whole() }

// BytesOn returns how much memory the demand books on gpu: all of it for a whole GPU,
// else what the pod needs free to start there (BytesOnMemory).
func (d GPUDemand) BytesOn(g *GPU) int64 {
	if d.Whole() {
		return g.MemoryBytes
	}
	return d.BytesOnMemory(g.MemoryBytes)
}

// BytesOnMemory is what a share books on a GPU of the given memory: the largest of its
// share (bytes, or a fraction rounded up to whole bytes) and StartFreeFraction of the
// memory. One number serves placement, booking and preemption: a vLLM engine with
// gpu_memory_utilization 0.75 takes 75% of the GPU whatever share it asked for, so
// booking less would let a second engine in that could not start. A whole-GPU demand
// books all of memory.
func (d GPUDemand) BytesOnMemory(memory int64) int64 {
	var share int64
	switch {
	case d.MemoryBytes > 0:
		share = d.MemoryBytes
	case d.FractionMilli > 0:
		share = (memory*d.FractionMilli + MilliPerGPU - 1) / MilliPerGPU
	default:
		return memory
	}
	return max(share, d.startFreeBytes(memory))
}

func (d GPUDemand) startFreeBytes(memory int64) int64 {
	if d.StartFreeFraction <= 0 {
		return 0
	}
	return int64(d.StartFreeFraction * float64(memory))
}

// NeedsLiveFreeBytes returns how much memory must be free live on gpu for the pod to
// start: the larger of its booking and StartFreeFraction of the total.
func (d GPUDemand) NeedsLiveFreeBytes(g *GPU) int64 {
	return max(d.BytesOn(g), d.startFreeBytes(g.MemoryBytes))
}

// ShareConflict says, when the demand's share and its engine's start-up need
// contradict on a GPU of the given memory (a 20 GiB share with
// gpu_memory_utilization 0.75 on an 80 GiB GPU needs 60 GiB free), what is booked and
// why, in words for a warning Event; "" when they agree or the demand is not a share.
func (d GPUDemand) ShareConflict(memory int64) string {
	if !d.Shared() || d.StartFreeFraction <= 0 || memory <= 0 {
		return ""
	}
	share := d.MemoryBytes
	what := fmt.Sprintf("a share of %s", formatGiB(share))
	if share == 0 {
		share = (memory*d.FractionMilli + MilliPerGPU - 1) / MilliPerGPU
		what = fmt.Sprintf("a fraction of %.3g of the GPU (%s)", float64(d.FractionMilli)/MilliPerGPU, formatGiB(share))
	}
	start := d.startFreeBytes(memory)
	if start <= share {
		return ""
	}
	return fmt.Sprintf("the pod asks for %s, but its engine's gpu_memory_utilization %.3g needs %s free on a GPU of %s to start; "+
		"it is booked for %s: raise the share to match, or lower gpu_memory_utilization", what, d.StartFreeFraction,
		formatGiB(start), formatGiB(memory), formatGiB(start))
}

// formatGiB shows bytes in GiB with at most one decimal: "20 GiB", "59.6 GiB".
func formatGiB(b int64) string {
	return strconv.FormatFloat(math.Round(float64(b)/float64(1<<30)*10)/10, 'f', -1, 64) + " GiB"
}

// AcceptsModel reports whether the demand accepts a GPU of the given model.
func (d GPUDemand) AcceptsModel(model string) bool {
	if len(d.Models) == 0 {
		return true
	}
	for _, m := range d.Models {
		if m == model {
			return true
		}
	}
	return false
}

// PodID names a pod: "namespace/name".
type PodID string

// GangID names a gang; a lone pod is a gang of one named after the pod.
type GangID string

// GPUBinding is the share of one GPU that a placed pod holds.
type GPUBinding struct {
	Index       int
	MemoryBytes int64
	Whole       bool
}

// Pod is a pod as the scheduling core sees it.
type Pod struct {
	ID   PodID
	UID  string
	Gang GangID
	// Queue is the leaf queue the pod is charged to.
	Queue       string
	Priority    int32
	Preemptible bool
	Requests    Resources
	GPU         GPUDemand

	NodeSelector map[string]string
	// RequiredAffinity is requiredDuringSchedulingIgnoredDuringExecution, or nil.
	RequiredAffinity *corev1.NodeSelector
	Tolerations      []corev1.Toleration
	// Labels are the pod's labels, which other pods' affinity and spread select on.
	Labels map[string]string
	// Constraints are the pod's inter-pod, topology, port and volume constraints;
	// nil when it has none.
	Constraints *Constraints

	// Node is where the pod is bound (or assumed), empty while pending.
	Node string
	// GPUs are the shares the pod holds on Node.
	GPUs []GPUBinding
	// StartedAt is when the pod was bound, in seconds since an arbitrary epoch
	// (used for the preemption protection window); zero when pending.
	StartedAt int64
	// Elastic is true for members above their gang's minimum (autoscaled Ray
	// workers): placed when capacity allows and given up first.
	Elastic bool
	// Foreign is true for pods of other schedulers: counted, never moved.
	Foreign bool
	// Terminating is true for a bound pod that is being deleted or evicted: it still
	// holds its resources until it is gone.
	Terminating bool
	// TerminatingDeadline is when a terminating pod's grace period ends (the API's
	// deletionTimestamp), in seconds since the epoch of Snapshot.Now; zero while
	// unknown (a victim marked by this scheduler before the API shows its deletion).
	// A pod still there well past it is stuck (a finalizer, an unreachable node): a
	// preemptor stops waiting for it (scheduler.Config.VictimTimeoutSeconds).
	TerminatingDeadline int64
	// NominatedNode is where a pending preemptor will go once its victims are gone
	// (status.nominatedNodeName), so a restarted scheduler does not evict again.
	NominatedNode string
	// NominationOrder orders nominations: a number that grows with every nomination
	// this scheduler makes, set when the pod is nominated to NominatedNode; zero when
	// unknown (a nomination read from the API after a restart). Among preemptors
	// waiting for room, the one nominated first takes the room freed first.
	NominationOrder int64
	// CreatedAt orders pods first-come first-served, in seconds.
	CreatedAt int64
	// DeviceChoices, when not nil, names the only nodes the pod may go to and, for
	// each, the exact GPUs it takes there (possibly none): devices that an allocator
	// outside the core chose node by node, such as DRA's structured allocator for a
	// claim with CEL selectors or other drivers' devices. The core still checks that
	// those GPUs are free in its own view and scores the nodes; GPU then only
	// describes the demand (for messages, ordering and queue charges).
	DeviceChoices map[string][]GPUBinding
	// PreemptionDeviceChoices, when not nil, are DeviceChoices as they would be
	// were preemptible and terminating pods gone: the preemption search places the
	// pod with these, and the victims it releases must make those GPUs free.
	PreemptionDeviceChoices map[string][]GPUBinding
}

// Bound reports whether the pod is on a node.
func (p *Pod) Bound() bool { return p.Node != "" }

// PinnedTo returns a copy of p that may only go to the named node: its required node
// affinity gains metadata.name In [node] in every term (one term when it had none).
// The scheduler places a preemptor so on its nominated node first.
func (p *Pod) PinnedTo(node string) *Pod {
	req := corev1.NodeSelectorRequirement{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node}}
	affinity := &corev1.NodeSelector{NodeSelectorTerms: []corev1.NodeSelectorTerm{{}}}
	if p.RequiredAffinity != nil && len(p.RequiredAffinity.NodeSelectorTerms) > 0 {
		affinity = p.RequiredAffinity.DeepCopy()
	}
	for t := range affinity.NodeSelectorTerms {
		term := &affinity.NodeSelectorTerms[t]
		term.MatchFields = append(term.MatchFields, req)
	}
	q := *p
	q.RequiredAffinity = affinity
	return &q
}

// CanonicalGPUModel is the one spelling of a GPU model that every source is turned
// into before comparison: NVML's product name with spaces as dashes, which is also
// how GPU Feature Discovery writes its nvidia.com/gpu.product label ("NVIDIA A10G"
// and "NVIDIA-A10G" are the same GPU).
func CanonicalGPUModel(name string) string {
	return strings.Join(strings.Fields(name), "-")
}
