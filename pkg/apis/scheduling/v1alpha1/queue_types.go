package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Unlimited is the value of a quota or limit that sets no bound, as in KAI Scheduler.
const Unlimited = -1

// DefaultQueuePriority is a queue's priority when spec.priority is not set (KAI's default).
const DefaultQueuePriority int32 = 100

// Queue is a node of the hierarchical queue tree through which teams share the cluster.
// Pods are charged to leaf queues (label gantry.dev/queue, or kai.scheduler/queue);
// a parent queue's share is what its children divide.
//
// The spec is KAI Scheduler's scheduling.run.ai/v2 Queue spec with the same field names,
// meanings and units, so a KAI Queue applies with only its apiVersion changed; Gantry
// adds spec.resources.gpuModels.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Cluster,shortName=gq,categories={gantry}
// +kubebuilder:printcolumn:name="Parent",type=string,JSONPath=`.spec.parentQueue`
// +kubebuilder:printcolumn:name="Priority",type=integer,JSONPath=`.spec.priority`
// +kubebuilder:printcolumn:name="GPU Quota",type=number,JSONPath=`.spec.resources.gpu.quota`
// +kubebuilder:printcolumn:name="GPU Limit",type=number,JSONPath=`.spec.resources.gpu.limit`
// +kubebuilder:printcolumn:name="GPU Allocated",type=number,JSONPath=`.status.allocated.gpu`
// +kubebuilder:printcolumn:name="GPU Fair Share",type=number,JSONPath=`.status.fairShare.gpu`
// +kubebuilder:printcolumn:name="Children",type=string,JSONPath=`.status.childQueues`,priority=1
// +kubebuilder:printcolumn:name="CPU Allocated",type=number,JSONPath=`.status.allocated.cpu`,priority=1,description="millicores"
// +kubebuilder:printcolumn:name="Memory Allocated",type=number,JSONPath=`.status.allocated.memory`,priority=1,description="megabytes (10^6 bytes)"
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
// +kubebuilder:validation:XValidation:rule="!has(self.spec) || !has(self.spec.parentQueue) || self.spec.parentQueue != self.metadata.name",messageExpression="'queue ' + self.metadata.name + ' names itself in spec.parentQueue: remove spec.parentQueue or set it to another queue'"
type Queue struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   QueueSpec   `json:"spec,omitempty"`
	Status QueueStatus `json:"status,omitempty"`
}

// QueueSpec is what a queue is entitled to and may use.
type QueueSpec struct {
	// DisplayName is a name for people; Gantry shows it but keys everything by
	// metadata.name.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	DisplayName string `json:"displayName,omitempty"`

	// ParentQueue names the queue this one divides the share of. Empty for a top-level
	// queue. The parent must exist, and following parentQueue must never come back to
	// this queue (the validating webhook rejects both).
	// +optional
	// +kubebuilder:validation:MaxLength=253
	ParentQueue string `json:"parentQueue,omitempty"`

	// Priority orders siblings for capacity beyond their quota: higher-priority queues
	// get spare capacity first, and among equal priority it is divided by
	// overQuotaWeight. Default 100.
	// +optional
	// +kubebuilder:default=100
	Priority *int32 `json:"priority,omitempty"`

	// Resources bounds each resource. A resource left out has quota 0, limit -1 and
	// overQuotaWeight 1.
	// +optional
	Resources *QueueResources `json:"resources,omitempty"`
}

// QueueResources bounds the resources a queue divides. Units are KAI Scheduler's:
// gpu in GPUs (fractions allowed: 0.5 is half a GPU's memory), cpu in millicores
// (1000 = one core), memory in megabytes (1 = 10^6 bytes).
type QueueResources struct {
	// GPU bounds GPUs of any model, in GPUs.
	// +optional
	GPU *QueueResource `json:"gpu,omitempty"`

	// CPU bounds CPU, in millicores.
	// +optional
	CPU *QueueResource `json:"cpu,omitempty"`

	// Memory bounds memory, in megabytes (10^6 bytes).
	// +optional
	Memory *QueueResource `json:"memory,omitempty"`

	// GPUModels bounds GPUs of one model each, in GPUs, on top of the gpu bound: a pod
	// on an H100 counts against both gpu and the H100 entry. A model with no entry is
	// bounded by gpu alone (no guarantee of that model, no cap beyond gpu's).
	// +optional
	// +listType=map
	// +listMapKey=model
	// +kubebuilder:validation:MaxItems=64
	GPUModels []GPUModelResource `json:"gpuModels,omitempty"`
}

// QueueResource bounds one resource of a queue, in the resource's unit. -1 means
// unlimited.
//
// The messages are static: CEL cannot estimate the cost of printing a number, and the
// apiserver rejects a CRD whose rule cost it cannot bound. The error names the field
// (spec.resources.gpu, …), and the webhook's message carries the values.
//
// +kubebuilder:validation:XValidation:rule="self.quota == -1.0 || self.quota >= 0.0",message="quota must be -1 (unlimited), 0 (nothing guaranteed) or a positive amount: change quota"
// +kubebuilder:validation:XValidation:rule="self.limit == -1.0 || self.limit >= 0.0",message="limit must be -1 (no limit), 0 or a positive amount: change limit"
// +kubebuilder:validation:XValidation:rule="self.overQuotaWeight >= 0.0",message="overQuotaWeight must be 0 (no share of spare capacity) or more: change overQuotaWeight"
// +kubebuilder:validation:XValidation:rule="self.limit < 0.0 || self.quota < 0.0 || self.limit >= self.quota",message="limit is below quota: raise limit to at least quota, lower quota, or set limit to -1 (no limit)"
type QueueResource struct {
	// Quota is guaranteed to the queue whenever it has work that needs it: 0 guarantees
	// nothing, -1 entitles the queue to everything its parent has.
	// +optional
	// +kubebuilder:default=0
	Quota float64 `json:"quota"`

	// Limit caps what the queue may use, borrowed capacity included: -1 sets no cap,
	// 0 allows nothing. Must not be below quota.
	// +optional
	// +kubebuilder:default=-1
	Limit float64 `json:"limit"`

	// OverQuotaWeight is the queue's share of spare capacity (beyond the quotas) among
	// siblings of equal priority: a queue of weight 2 gets twice what a queue of weight
	// 1 gets. 0 means no share of spare capacity.
	// +optional
	// +kubebuilder:default=1
	OverQuotaWeight float64 `json:"overQuotaWeight"`
}

// GPUModelResource bounds GPUs of one model, in GPUs.
type GPUModelResource struct {
	// Model is the GPU product name as Gantry's inventory reports it: the productName
	// attribute of the gpu.gantry.dev ResourceSlice device (NVML's name, for example
	// "NVIDIA H100 80GB HBM3" or "NVIDIA A10G").
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	Model string `json:"model"`

	QueueResource `json:",inline"`
}

// QueueStatus is what the scheduler last computed for the queue.
type QueueStatus struct {
	// ChildQueues lists the queues whose parentQueue is this queue. A queue with
	// children is not a leaf: pods sent to it are not scheduled.
	// +optional
	// +listType=set
	ChildQueues []string `json:"childQueues,omitempty"`

	// Allocated is what bound pods of this queue and its descendants hold.
	// +optional
	Allocated *ResourceAmounts `json:"allocated,omitempty"`

	// Requested is what pods of this queue and its descendants ask for, bound or
	// pending.
	// +optional
	Requested *ResourceAmounts `json:"requested,omitempty"`

	// FairShare is the queue's share of the cluster right now: its quota (as far as it
	// has demand) plus its part of spare capacity, never above its limit.
	// +optional
	FairShare *ResourceAmounts `json:"fairShare,omitempty"`

	// Conditions: Valid (False with reason ParentNotFound or ParentCycle while the tree
	// is broken) and OverQuota (True while the queue borrows beyond its quota).
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// ResourceAmounts are amounts in the units of QueueResources.
type ResourceAmounts struct {
	// GPU in GPUs.
	GPU float64 `json:"gpu"`
	// CPU in millicores.
	CPU float64 `json:"cpu"`
	// Memory in megabytes (10^6 bytes).
	Memory float64 `json:"memory"`
	// GPUModels per GPU model, in GPUs.
	// +optional
	GPUModels map[string]float64 `json:"gpuModels,omitempty"`
}

// Queue condition types and reasons are named in pkg/names (ConditionQueue*,
// ReasonQueue*).

// +kubebuilder:object:root=true

// QueueList is a list of Queues.
type QueueList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Queue `json:"items"`
}
