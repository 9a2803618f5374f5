package names

// API groups and the DRA driver.
const (
	// GroupScheduling is the API group of Queues and PodGroups.
	GroupScheduling = "scheduling.gantry.dev"
	// GroupGPU is the API group of GPUNodes; the DRA driver and DeviceClass share it.
	GroupGPU = "gpu.gantry.dev"
	// DriverName is Gantry's DRA driver and DeviceClass (the node agent's).
	DriverName = GroupGPU
	// MemoryCapacity is the consumable capacity of a gpu.gantry.dev device.
	MemoryCapacity = "memory"
	// TaintUnhealthy and TaintStale are the device taints the node agent sets on a
	// GPU that failed its health check, and on every GPU of a node whose inventory
	// could not be refreshed.
	TaintUnhealthy = DriverName + "/unhealthy"
	TaintStale     = DriverName + "/stale"
)

// Pod annotations and resources Gantry reads for a pod's GPU demand (DESIGN.md, "How
// a pod's GPU demand is known"), and what it writes on a bound pod.
const (
	// ExtendedGPUResource is the device plugin's whole-GPU resource (a
	// corev1.ResourceName; untyped so that this package imports nothing).
	ExtendedGPUResource = "nvidia.com/gpu"
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
	// LabelGPUShareClaim ("true") marks a pod whose share annotation the pod webhook
	// turned into a claim from a Gantry ResourceClaimTemplate: the scheduler records
	// such pods as the template's owners, so that the garbage collector deletes the
	// template once no pod uses it.
	LabelGPUShareClaim = "gantry.dev/gpu-share-claim"
)

// Gangs (docs/gangs.md).
const (
	// AnnotationPodGroup on a pod names its gang: the PodGroup of that name in the
	// pod's namespace, or, when no such PodGroup exists, an ad-hoc gang of all pods
	// that carry the same value.
	AnnotationPodGroup = "gantry.dev/pod-group"
	// AnnotationMinMember on a pod of an ad-hoc gang says how many pods must start
	// together. A PodGroup's spec.minMember wins over it.
	AnnotationMinMember = "gantry.dev/min-member"
	// LabelSubGroup on a pod names its sub-group of the PodGroup.
	LabelSubGroup = "gantry.dev/sub-group"
)

// Queues, priority and preemptibility, on a pod or on its owner.
const (
	// LabelQueue charges a pod (or its owner) to a leaf queue.
	LabelQueue = "gantry.dev/queue"
	// LabelQueueKAI is KAI Scheduler's queue label, read as an alias of LabelQueue.
	// KubeRay copies it from the Ray object to every pod when installed with
	// batchScheduler.name=kai-scheduler.
	LabelQueueKAI = "kai.scheduler/queue"
	// LabelPriorityClass and LabelRayPriorityClass name a priority class on a pod
	// or its owner, as KubeRay manifests do.
	LabelPriorityClass    = "priorityClassName"
	LabelRayPriorityClass = "ray.io/priority-class-name"
	// LabelPreemptible, as a label or annotation set to "true" or "false",
	// overrides whether the priority class is preemptible (on a PriorityClass, a
	// pod or a gang's owner).
	LabelPreemptible = "gantry.dev/preemptible"
)

// Other projects' labels Gantry reads.
const (
	// LabelGFDProduct and LabelGFDMemory (MiB) are GPU Feature Discovery's, read on
	// nodes without the node agent.
	LabelGFDProduct = "nvidia.com/gpu.product"
	LabelGFDMemory  = "nvidia.com/gpu.memory"
	// KubeRay's pod labels (ray-operator/controllers/ray/utils/constant.go), spelled
	// out because that package pulls in the whole operator.
	LabelRayCluster        = "ray.io/cluster"
	LabelRayNodeType       = "ray.io/node-type"
	LabelRayGroup          = "ray.io/group"
	LabelRayReplicaName    = "ray.io/worker-group-replica-name"
	LabelRayOriginatedCRD  = "ray.io/originated-from-crd"
	LabelRayOriginatedName = "ray.io/originated-from-cr-name"
	RayNodeTypeHead        = "head"
	RayNodeTypeWorker      = "worker"
	LabelJobName           = "batch.kubernetes.io/job-name"
)

// Conditions and reasons Gantry writes.
const (
	// ReasonPreemptionByScheduler is the reason of the DisruptionTarget condition on
	// a victim.
	ReasonPreemptionByScheduler = "PreemptionByScheduler"
	// ConditionGangIncomplete is the reason of a pod's PodScheduled=False condition,
	// and of its Event, once its gang has waited longer than allowed for members
	// that do not exist; its PodGroup says the same (ReasonPodGroupIncomplete).
	ConditionGangIncomplete = "GangIncomplete"
)

// PodGroup condition types and reasons.
const (
	// ConditionPodGroupScheduled is True once minMember pods are placed together.
	ConditionPodGroupScheduled = "Scheduled"
	// ConditionPodGroupPreempted is True after the gang was evicted to make room for
	// higher-priority work; its message says by whom.
	ConditionPodGroupPreempted = "Preempted"

	// ReasonPodGroupScheduled: the minimum is placed.
	ReasonPodGroupScheduled = "Scheduled"
	// ReasonPodGroupWaitingForPods: fewer than minMember pods exist yet; the message
	// says "waiting for N of M pods to be created".
	ReasonPodGroupWaitingForPods = "WaitingForPods"
	// ReasonPodGroupUnschedulable: the pods exist but do not fit together.
	ReasonPodGroupUnschedulable = "Unschedulable"
	// ReasonPodGroupQueueNotFound: the queue the gang is charged to does not exist.
	ReasonPodGroupQueueNotFound = "QueueNotFound"
	// ReasonPodGroupQueueNotLeaf: the queue has child queues; gangs go to leaf
	// queues.
	ReasonPodGroupQueueNotLeaf = "QueueNotLeaf"
	// ReasonPodGroupOverQueueLimit: starting the gang would take its queue (or a
	// parent) past a limit.
	ReasonPodGroupOverQueueLimit = "OverQueueLimit"
	// ReasonPodGroupPreempted: the gang was evicted for higher-priority work.
	ReasonPodGroupPreempted = "Preempted"
	// ReasonPodGroupIncomplete: the gang waited longer than allowed for members
	// that do not exist (the scheduler's incompleteGangTimeout).
	ReasonPodGroupIncomplete = ConditionGangIncomplete
)

// Queue condition types and reasons.
const (
	// ConditionQueueValid is False while the queue cannot be placed in the tree.
	ConditionQueueValid = "Valid"
	// ConditionQueueOverQuota is True while the queue uses more than its quota of
	// some resource (it borrows spare capacity, which may be reclaimed).
	ConditionQueueOverQuota = "OverQuota"

	ReasonQueueValid          = "Valid"
	ReasonQueueParentNotFound = "ParentNotFound"
	ReasonQueueParentCycle    = "ParentCycle"
	ReasonQueueWithinQuota    = "WithinQuota"
	ReasonQueueBorrowing      = "Borrowing"
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
