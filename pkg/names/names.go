// Package names is the one home of every name Gantry reads or writes on Kubernetes
// objects: labels, annotations, the DRA driver, condition types and reasons, Event
// reasons, and the API resources it watches (derived from pkg/apis, never retyped).
//
// It imports only API types. Everything else imports it; a name written twice is a
// name that can drift.
package names

import (
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	corev1 "k8s.io/api/core/v1"
	resourceapi "k8s.io/api/resource/v1"

	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
)

// DRA.
const (
	// DriverName is Gantry's DRA driver and DeviceClass (the node agent's).
	DriverName = gpuv1alpha1.GroupName
	// MemoryCapacity is the consumable capacity of a gpu.gantry.dev device.
	MemoryCapacity = "memory"
)

// Pod annotations and resources Gantry reads for a pod's GPU demand (DESIGN.md, "How
// a pod's GPU demand is known").
const (
	// ExtendedGPUResource is the device plugin's whole-GPU resource.
	ExtendedGPUResource corev1.ResourceName = "nvidia.com/gpu"
	// AnnotationGPUMemory asks for a share of that much memory on each GPU: a
	// quantity ("20Gi"), or a plain number of MiB ("20480"), as in KAI Scheduler.
	AnnotationGPUMemory = "gantry.dev/gpu-memory"
	// AnnotationGPUFraction asks for a share of each GPU: above 0, at most 1.
	AnnotationGPUFraction = "gantry.dev/gpu-fraction"
	// AnnotationGPUModel lists the GPU models a pod accepts ("H100,A100").
	AnnotationGPUModel = "gantry.dev/gpu-model"
	// AnnotationGPUs records, on a bound pod, the GPUs the scheduler gave it:
	// "INDEX[:BYTES],…" (no BYTES for a whole GPU). The scheduler sets it through the
	// Binding, so it lands atomically with spec.nodeName and survives restarts.
	AnnotationGPUs = "gantry.dev/gpus"
	// AnnotationPodGroup and AnnotationMinMember make pods a gang (docs/gangs.md).
	AnnotationPodGroup  = schedulingv1alpha1.PodGroupAnnotation
	AnnotationMinMember = schedulingv1alpha1.MinMemberAnnotation
)

// Labels.
const (
	// LabelQueue charges a pod (or its owner) to a leaf queue; LabelQueueKAI is
	// KAI Scheduler's, read as an alias.
	LabelQueue    = "gantry.dev/queue"
	LabelQueueKAI = "kai.scheduler/queue"
	// LabelPreemptible ("true"/"false") overrides a priority class's
	// preemptibility, on a PriorityClass or on a gang's owner.
	LabelPreemptible = "gantry.dev/preemptible"
	// LabelSubGroup puts a pod in a PodGroup sub-group.
	LabelSubGroup = schedulingv1alpha1.SubGroupLabel
	// LabelGFDProduct and LabelGFDMemory (MiB) are GPU Feature Discovery's, read on
	// nodes without the node agent.
	LabelGFDProduct = "nvidia.com/gpu.product"
	LabelGFDMemory  = "nvidia.com/gpu.memory"
)

// Conditions and reasons Gantry writes.
const (
	// ReasonPreemptionByScheduler is the reason of the DisruptionTarget condition on
	// a victim.
	ReasonPreemptionByScheduler = "PreemptionByScheduler"
	// ConditionPodGroupScheduled and ConditionPodGroupPreempted are PodGroup
	// condition types; ConditionQueueValid a Queue's.
	ConditionPodGroupScheduled = schedulingv1alpha1.PodGroupConditionScheduled
	ConditionPodGroupPreempted = schedulingv1alpha1.PodGroupConditionPreempted
	ConditionQueueValid        = schedulingv1alpha1.QueueConditionValid
	// ConditionGangIncomplete is set (PodGroup condition and pod Event reason) on a
	// gang that has waited too long for members that do not exist.
	ConditionGangIncomplete = "GangIncomplete"
)

// Event reasons.
const (
	EventFailedScheduling = "FailedScheduling"
	EventPreempted        = "Preempted"
	EventBindFailed       = "BindFailed"
	// EventGangBelowMinimum: a running gang lost members below its minimum and the
	// rest is evicted, so that it restarts whole (docs/gangs.md).
	EventGangBelowMinimum = "GangBelowMinimum"
	// EventGangIncomplete: a gang waited longer than allowed for missing members.
	EventGangIncomplete = "GangIncomplete"
	// EventGPUShareConflict (Warning, once per pod): the pod's GPU share and its
	// engine's gpu_memory_utilization contradict; it is booked for the larger.
	EventGPUShareConflict = "GPUShareConflict"
)

// Finalizers: Gantry sets none. A scheduler that dies must not leave objects that
// cannot be deleted; what it must remember is on the objects themselves
// (AnnotationGPUs, claim allocations).

// API resources the scheduler watches, derived from the API packages.
var (
	QueueGVR      = schedulingv1alpha1.SchemeGroupVersion.WithResource("queues")
	PodGroupGVR   = schedulingv1alpha1.SchemeGroupVersion.WithResource("podgroups")
	GPUNodeGVR    = gpuv1alpha1.SchemeGroupVersion.WithResource("gpunodes")
	RayClusterGVR = rayv1.GroupVersion.WithResource("rayclusters")
	RayJobGVR     = rayv1.GroupVersion.WithResource("rayjobs")
	RayServiceGVR = rayv1.GroupVersion.WithResource("rayservices")
	// ResourceGroupVersion is the DRA API the scheduler reads (resource.k8s.io/v1).
	ResourceGroupVersion = resourceapi.SchemeGroupVersion
)
