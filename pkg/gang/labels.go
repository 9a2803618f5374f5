package gang

// Labels and annotations read from pods and their owners. The Ray ones are KubeRay's
// (ray-operator/controllers/ray/utils/constant.go), spelled out here rather than
// imported because that package pulls in the whole operator.
const (
	// QueueLabel names the leaf queue a pod is charged to.
	QueueLabel = "gantry.dev/queue"
	// KAIQueueLabel is KAI Scheduler's queue label, read as an alias of QueueLabel.
	// KubeRay copies it from the Ray object to every pod when installed with
	// batchScheduler.name=kai-scheduler.
	KAIQueueLabel = "kai.scheduler/queue"
	// PriorityClassLabel and RayPriorityClassLabel name a priority class on a pod or
	// its owner, as KubeRay manifests do.
	PriorityClassLabel    = "priorityClassName"
	RayPriorityClassLabel = "ray.io/priority-class-name"
	// PreemptibleKey, as a label or annotation set to "true" or "false", overrides
	// whether the priority class is preemptible.
	PreemptibleKey = "gantry.dev/preemptible"

	rayClusterLabel     = "ray.io/cluster"
	rayNodeTypeLabel    = "ray.io/node-type"
	rayGroupLabel       = "ray.io/group"
	rayReplicaNameLabel = "ray.io/worker-group-replica-name"
	rayOriginCRDLabel   = "ray.io/originated-from-crd"
	rayOriginNameLabel  = "ray.io/originated-from-cr-name"

	rayHeadNodeType   = "head"
	rayWorkerNodeType = "worker"

	// jobNameLabel is set by the Job controller on the Job's pods.
	jobNameLabel = "batch.kubernetes.io/job-name"
)
