package placement

import (
	"fmt"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	corev1helpers "k8s.io/component-helpers/scheduling/corev1"
	"k8s.io/component-helpers/scheduling/corev1/nodeaffinity"

	"github.com/gantry-dev/gantry/pkg/model"
)

// Reasons a node cannot take a pod, as counted in Unschedulable.Reasons. An
// untolerated taint is counted as ReasonTaint followed by the taint's key.
const (
	ReasonCordoned        = "node is cordoned"
	ReasonAffinity        = "node selector or affinity does not match"
	ReasonTaint           = "untolerated taint"
	ReasonTooManyPods     = "too many pods"
	ReasonCPU             = "insufficient CPU"
	ReasonMemory          = "insufficient memory"
	ReasonNoGPU           = "no GPUs"
	ReasonGPUModel        = "no GPU of an accepted model"
	ReasonSharesNeedAgent = "GPU shares need the node agent's per-GPU inventory"
	ReasonFreeGPUs        = "insufficient free GPUs"
	ReasonGPUMemory       = "insufficient GPU memory"
	ReasonLiveGPUMemory   = "insufficient live free GPU memory"
	ReasonDevices         = "no devices that satisfy the pod's ResourceClaims"
	ReasonChosenGPUsTaken = "the GPUs allocated for the pod's ResourceClaims are taken"

	ReasonPodAffinity          = "node(s) didn't match pod affinity rules"
	ReasonPodAntiAffinity      = "node(s) didn't match pod anti-affinity rules"
	ReasonExistingAntiAffinity = "node(s) didn't satisfy existing pods anti-affinity rules"
	ReasonSpreadLabel          = "node(s) didn't match pod topology spread constraints (missing required label)"
	ReasonSpread               = "node(s) didn't match pod topology spread constraints"
	ReasonHostPort             = "node(s) didn't have free ports for the requested pod ports"
	ReasonVolumeNode           = "node(s) had volume node affinity conflict"
	ReasonVolumeBinding        = "node(s) didn't find available persistent volumes to bind"
	ReasonVolumeLimit          = "node(s) exceed max volume count"
	ReasonClaimInUse           = "a ReadWriteOncePod PersistentVolumeClaim of the pod is used by another pod"
	ReasonNodeFeatures         = "node(s) didn't declare the features the pod needs"
)

// misfit is why a node cannot take a pod; fits when it can. Checks return a code
// rather than text so that scoring thousands of nodes builds no strings.
type misfit uint8

const (
	fits misfit = iota
	misfitCordoned
	misfitAffinity
	misfitTaint
	misfitTooManyPods
	misfitCPU
	misfitMemory
	misfitNoGPU
	misfitGPUModel
	misfitSharesNeedAgent
	misfitFreeGPUs
	misfitGPUMemory
	misfitLiveGPUMemory
	misfitDevices
	misfitChosenGPUsTaken
	misfitPodAffinity
	misfitPodAntiAffinity
	misfitExistingAntiAffinity
	misfitSpreadLabel
	misfitSpread
	misfitHostPort
	misfitVolumeNode
	misfitVolumeBinding
	misfitVolumeLimit
	misfitClaimInUse
	misfitNodeFeatures
)

var misfitReasons = [...]string{
	fits:                  "",
	misfitCordoned:        ReasonCordoned,
	misfitAffinity:        ReasonAffinity,
	misfitTaint:           ReasonTaint,
	misfitTooManyPods:     ReasonTooManyPods,
	misfitCPU:             ReasonCPU,
	misfitMemory:          ReasonMemory,
	misfitNoGPU:           ReasonNoGPU,
	misfitGPUModel:        ReasonGPUModel,
	misfitSharesNeedAgent: ReasonSharesNeedAgent,
	misfitFreeGPUs:        ReasonFreeGPUs,
	misfitGPUMemory:       ReasonGPUMemory,
	misfitLiveGPUMemory:   ReasonLiveGPUMemory,
	misfitDevices:         ReasonDevices,
	misfitChosenGPUsTaken: ReasonChosenGPUsTaken,

	misfitPodAffinity:          ReasonPodAffinity,
	misfitPodAntiAffinity:      ReasonPodAntiAffinity,
	misfitExistingAntiAffinity: ReasonExistingAntiAffinity,
	misfitSpreadLabel:          ReasonSpreadLabel,
	misfitSpread:               ReasonSpread,
	misfitHostPort:             ReasonHostPort,
	misfitVolumeNode:           ReasonVolumeNode,
	misfitVolumeBinding:        ReasonVolumeBinding,
	misfitVolumeLimit:          ReasonVolumeLimit,
	misfitClaimInUse:           ReasonClaimInUse,
	misfitNodeFeatures:         ReasonNodeFeatures,
}

// Feasible reports whether node n can take pod p as the node is now, and if not,
// why, in words (for example "insufficient GPU memory: needs a 20 GiB share of 1
// GPU, the most free on one GPU is 12.0 GiB").
func Feasible(n *model.Node, p *model.Pod) (ok bool, reason string) {
	t := newPodTerms(p)
	m := t.staticMisfit(n)
	if m == fits && p.Constraints != nil {
		// Only what the node itself decides: domain-wide constraints need a View.
		m = (&constraintState{pod: p, c: p.Constraints, terms: t}).localMisfit(n)
	}
	if m == fits {
		m = t.resourceMisfit(n)
	}
	if m == fits {
		return true, ""
	}
	return false, t.explain(n, m)
}

// podTerms is what one pod asks of every node, prepared once per placement so that
// selectors are parsed once, not once per node.
type podTerms struct {
	pod      *model.Pod
	requests model.Resources
	// affinity holds the node selector and required node affinity; nil when the
	// pod has neither.
	affinity *nodeaffinity.RequiredNodeAffinity
	// affinityNode carries a node's name and labels in the shape component-helpers
	// matches against; reused across nodes.
	affinityNode corev1.Node
}

// taintLogger discards: a toleration that cannot be parsed simply does not match.
var taintLogger = logr.Discard()

func newPodTerms(p *model.Pod) *podTerms {
	t := &podTerms{pod: p, requests: p.BookedRequests()}
	if len(p.NodeSelector) > 0 || p.RequiredAffinity != nil {
		var affinity *corev1.Affinity
		if p.RequiredAffinity != nil {
			affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
				RequiredDuringSchedulingIgnoredDuringExecution: p.RequiredAffinity,
			}}
		}
		a := nodeaffinity.NewRequiredNodeAffinity(p.NodeSelector, affinity)
		t.affinity = &a
	}
	return t
}

// check runs the node-level checks in the order kube-scheduler's filters would
// report them, cheapest first.
func (t *podTerms) check(n *model.Node) misfit {
	if m := t.staticMisfit(n); m != fits {
		return m
	}
	return t.resourceMisfit(n)
}

// staticMisfit checks what does not change as pods come and go: cordon, node
// selector and affinity, taints.
func (t *podTerms) staticMisfit(n *model.Node) misfit {
	if n.Unschedulable && !t.tolerates(&unschedulableTaint) {
		return misfitCordoned
	}
	if t.affinity != nil && !t.matchesAffinity(n) {
		return misfitAffinity
	}
	if untoleratedTaint(n, t.pod) != nil {
		return misfitTaint
	}
	if t.pod.DeviceChoices != nil {
		if _, ok := t.pod.DeviceChoices[n.Name]; !ok {
			return misfitDevices
		}
	}
	return fits
}

// resourceMisfit checks pod slots, CPU, memory and GPUs against what is free.
func (t *podTerms) resourceMisfit(n *model.Node) misfit {
	free := n.Free()
	switch {
	case t.requests.Pods > free.Pods:
		return misfitTooManyPods
	case t.requests.MilliCPU > free.MilliCPU:
		return misfitCPU
	case t.requests.MemoryBytes > free.MemoryBytes:
		return misfitMemory
	}
	if t.pod.DeviceChoices != nil {
		return chosenGPUsMisfit(n, t.pod.DeviceChoices[n.Name], t.pod.GPU.StartFreeFraction)
	}
	return gpuMisfit(n, t.pod.GPU)
}

// chosenGPUsMisfit checks GPUs chosen outside the core (Pod.DeviceChoices) against
// the node as it is now: a whole GPU must be idle, a share must fit in the memory not
// booked and never joins a GPU held whole; and, as for any pod, the memory measured
// free must be enough to start (startFree of the GPU, or the share).
func chosenGPUsMisfit(n *model.Node, chosen []model.GPUBinding, startFree float64) misfit {
	live := fits
	for _, b := range chosen {
		g := n.GPUByIndex(b.Index)
		switch {
		case g == nil || !g.Healthy:
			return misfitChosenGPUsTaken
		case b.Whole && !g.Idle():
			return misfitChosenGPUsTaken
		case !b.Whole && (g.Exclusive || b.MemoryBytes > g.FreeBytes()):
			return misfitChosenGPUsTaken
		}
		d := model.GPUDemand{Count: 1, StartFreeFraction: startFree}
		if !b.Whole {
			d.MemoryBytes = b.MemoryBytes
		}
		if !liveFreeEnough(g, d) {
			live = misfitLiveGPUMemory
		}
	}
	return live
}

var unschedulableTaint = corev1.Taint{Key: corev1.TaintNodeUnschedulable, Effect: corev1.TaintEffectNoSchedule}

func (t *podTerms) tolerates(taint *corev1.Taint) bool {
	return corev1helpers.TolerationsTolerateTaint(taintLogger, t.pod.Tolerations, taint, true)
}

func (t *podTerms) matchesAffinity(n *model.Node) bool {
	t.affinityNode.Name = n.Name
	t.affinityNode.Labels = n.Labels
	ok, err := t.affinity.Match(&t.affinityNode)
	// A selector that cannot be parsed matches nothing, as in kube-scheduler.
	return ok && err == nil
}

// untoleratedTaint returns the first NoSchedule or NoExecute taint of n that p does
// not tolerate, or nil.
func untoleratedTaint(n *model.Node, p *model.Pod) *corev1.Taint {
	for i := range n.Taints {
		taint := &n.Taints[i]
		if taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		if !corev1helpers.TolerationsTolerateTaint(taintLogger, p.Tolerations, taint, true) {
			return taint
		}
	}
	return nil
}

// gpuMisfit checks the GPU part of a demand against a node.
func gpuMisfit(n *model.Node, d model.GPUDemand) misfit {
	if d.Count == 0 {
		return fits
	}
	if len(n.GPUs) == 0 {
		return misfitNoGPU
	}
	// Shares and DRA claims need the devices named, which a count cannot do.
	if n.GPUsByCountOnly && (!d.Whole() || d.ByDevice) {
		return misfitSharesNeedAgent
	}
	accepted, usable, bookedOnly := 0, 0, 0
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if !d.AcceptsModel(g.Model) {
			continue
		}
		accepted++
		switch gpuFit(g, d) {
		case gpuUsable:
			usable++
		case gpuLiveShort:
			bookedOnly++
		}
	}
	switch {
	case accepted == 0:
		return misfitGPUModel
	case usable >= d.Count:
		return fits
	case usable+bookedOnly >= d.Count:
		return misfitLiveGPUMemory
	case d.Whole():
		return misfitFreeGPUs
	default:
		return misfitGPUMemory
	}
}

type gpuVerdict uint8

const (
	gpuUsable gpuVerdict = iota
	// gpuLiveShort: the booking fits, but the node agent measured less memory free
	// than the pod needs to start.
	gpuLiveShort
	gpuTaken
)

// gpuFit says whether one GPU (of an accepted model) can take one GPU's worth of
// demand d: a whole GPU must be idle; a share must fit in the memory not booked
// (so shares never add up above the GPU's memory) and never joins a GPU held whole.
func gpuFit(g *model.GPU, d model.GPUDemand) gpuVerdict {
	if !g.Healthy || g.Partition {
		return gpuTaken
	}
	if d.Whole() {
		if !g.Idle() {
			return gpuTaken
		}
	} else if g.Exclusive || d.BytesOn(g) > g.FreeBytes() {
		return gpuTaken
	}
	if !liveFreeEnough(g, d) {
		return gpuLiveShort
	}
	return gpuUsable
}

// liveFreeEnough checks a GPU's measured free memory, when known, against what the
// pod needs free to start. For a share that is the larger of its booking and
// StartFreeFraction of the GPU; for a whole GPU only StartFreeFraction counts,
// because an idle GPU always shows some memory in use by the driver.
func liveFreeEnough(g *model.GPU, d model.GPUDemand) bool {
	if g.LiveFreeBytes < 0 {
		return true
	}
	if d.Whole() {
		if d.StartFreeFraction <= 0 {
			return true
		}
		return g.LiveFreeBytes >= int64(d.StartFreeFraction*float64(g.MemoryBytes))
	}
	return g.LiveFreeBytes >= d.NeedsLiveFreeBytes(g)
}

// reason is the Unschedulable.Reasons key for a misfit on n.
func (t *podTerms) reason(n *model.Node, m misfit) string {
	if m == misfitTaint {
		if taint := untoleratedTaint(n, t.pod); taint != nil {
			return ReasonTaint + " " + taint.Key
		}
	}
	return misfitReasons[m]
}

// explain says in words why n cannot take the pod.
func (t *podTerms) explain(n *model.Node, m misfit) string {
	free := n.Free()
	d := t.pod.GPU
	switch m {
	case misfitTaint:
		if taint := untoleratedTaint(n, t.pod); taint != nil {
			return fmt.Sprintf("%s %s=%s:%s", ReasonTaint, taint.Key, taint.Value, taint.Effect)
		}
	case misfitTooManyPods:
		return fmt.Sprintf("%s: %d of %d pods already on the node", ReasonTooManyPods, n.Requested.Pods, n.Allocatable.Pods)
	case misfitCPU:
		return fmt.Sprintf("%s: needs %s CPUs, %s free", ReasonCPU, formatCPU(t.requests.MilliCPU), formatCPU(free.MilliCPU))
	case misfitMemory:
		return fmt.Sprintf("%s: needs %s, %s free", ReasonMemory, FormatBytes(t.requests.MemoryBytes), FormatBytes(max(0, free.MemoryBytes)))
	case misfitGPUModel:
		return fmt.Sprintf("%s: needs %s, node has %s", ReasonGPUModel, DescribeDemand(t.pod), gpuModels(n))
	case misfitFreeGPUs:
		return fmt.Sprintf("%s: needs %s, %d idle", ReasonFreeGPUs, DescribeDemand(t.pod), countUsable(n, d))
	case misfitGPUMemory:
		return fmt.Sprintf("%s: needs %s, the most free on one GPU is %s", ReasonGPUMemory, DescribeDemand(t.pod), FormatBytes(mostFreeBytes(n, d)))
	case misfitLiveGPUMemory:
		return fmt.Sprintf("%s: needs %s with enough memory free to start, measured free memory is short", ReasonLiveGPUMemory, DescribeDemand(t.pod))
	}
	return misfitReasons[m]
}

func gpuModels(n *model.Node) string {
	seen := map[string]bool{}
	out := ""
	for i := range n.GPUs {
		m := n.GPUs[i].Model
		if seen[m] {
			continue
		}
		seen[m] = true
		if out != "" {
			out += ", "
		}
		out += m
	}
	return out
}

func countUsable(n *model.Node, d model.GPUDemand) int {
	c := 0
	for i := range n.GPUs {
		if d.AcceptsModel(n.GPUs[i].Model) && gpuFit(&n.GPUs[i], d) == gpuUsable {
			c++
		}
	}
	return c
}

func mostFreeBytes(n *model.Node, d model.GPUDemand) int64 {
	var most int64
	for i := range n.GPUs {
		g := &n.GPUs[i]
		if d.AcceptsModel(g.Model) && g.Healthy && !g.Partition {
			most = max(most, g.FreeBytes())
		}
	}
	return most
}
