package v1alpha1

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The pod metadata that ties a pod to a gang (annotations gantry.dev/pod-group and
// gantry.dev/min-member, label gantry.dev/sub-group) is named in pkg/names.

// PodGroup declares a gang explicitly: pods annotated gantry.dev/pod-group=<name> in
// the same namespace start together, at least spec.minMember of them, or none does.
//
// Ray clusters need no PodGroup: Gantry reads the gang from the RayCluster itself.
//
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:scope=Namespaced,shortName=gpg,categories={gantry}
// +kubebuilder:printcolumn:name="Phase",type=string,JSONPath=`.status.phase`
// +kubebuilder:printcolumn:name="Min",type=integer,JSONPath=`.spec.minMember`
// +kubebuilder:printcolumn:name="Running",type=integer,JSONPath=`.status.running`
// +kubebuilder:printcolumn:name="Pending",type=integer,JSONPath=`.status.pending`
// +kubebuilder:printcolumn:name="Succeeded",type=integer,JSONPath=`.status.succeeded`
// +kubebuilder:printcolumn:name="Queue",type=string,JSONPath=`.spec.queue`
// +kubebuilder:printcolumn:name="Priority Class",type=string,JSONPath=`.spec.priorityClassName`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type PodGroup struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec   PodGroupSpec   `json:"spec,omitempty"`
	Status PodGroupStatus `json:"status,omitempty"`
}

// PodGroupSpec says how many pods must start together and where they are charged.
//
// +kubebuilder:validation:XValidation:rule="!has(self.subGroups) || self.subGroups.map(g, g.minMember).sum() <= self.minMember",message="the sub-groups' minMember values add up to more than minMember: raise minMember to at least their sum, or lower a sub-group's minMember"
type PodGroupSpec struct {
	// MinMember is how many of the group's pods must be placed together before any of
	// them is bound. Pods beyond it are elastic: placed when capacity allows, given up
	// first.
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	MinMember int32 `json:"minMember"`

	// SubGroups are parts of the gang with a minimum of their own, for example the
	// leaders and the workers of a distributed job. A pod joins a sub-group with the
	// label gantry.dev/sub-group=<name>.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	SubGroups []SubGroup `json:"subGroups,omitempty"`

	// Queue is the leaf queue the gang is charged to. A pod's own gantry.dev/queue (or
	// kai.scheduler/queue) label wins over it.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	Queue string `json:"queue,omitempty"`

	// PriorityClassName is used for pods that set no spec.priorityClassName.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	PriorityClassName string `json:"priorityClassName,omitempty"`

	// Preemptible overrides whether the gang may be preempted; unset follows the
	// priority class (its gantry.dev/preemptible label).
	// +optional
	Preemptible *bool `json:"preemptible,omitempty"`
}

// SubGroup is a part of a gang with its own minimum.
type SubGroup struct {
	// Name matches the pods' gantry.dev/sub-group label.
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// MinMember is how many pods of this sub-group must be among the gang's minimum.
	// +kubebuilder:validation:Minimum=0
	MinMember int32 `json:"minMember"`
}

// PodGroupPhase summarises a PodGroup's state.
// +kubebuilder:validation:Enum=Pending;Running;Succeeded;Failed;Unknown
type PodGroupPhase string

const (
	// PodGroupPending: fewer than minMember pods are running or done.
	PodGroupPending PodGroupPhase = "Pending"
	// PodGroupRunning: at least minMember pods are running or done.
	PodGroupRunning PodGroupPhase = "Running"
	// PodGroupSucceeded: every pod has succeeded.
	PodGroupSucceeded PodGroupPhase = "Succeeded"
	// PodGroupFailed: so many pods failed that minMember can no longer run.
	PodGroupFailed PodGroupPhase = "Failed"
	// PodGroupUnknown: the scheduler cannot tell.
	PodGroupUnknown PodGroupPhase = "Unknown"
)

// PodGroupStatus is what the scheduler last saw of the gang.
type PodGroupStatus struct {
	// +optional
	Phase PodGroupPhase `json:"phase,omitempty"`

	// Pending counts pods not yet bound to a node.
	// +optional
	Pending int32 `json:"pending"`
	// Running counts bound pods that have not finished.
	// +optional
	Running int32 `json:"running"`
	// Succeeded counts pods that finished successfully. They count towards minMember:
	// a gang whose members are completing is not below its minimum.
	// +optional
	Succeeded int32 `json:"succeeded"`
	// Failed counts pods that failed.
	// +optional
	Failed int32 `json:"failed"`

	// Conditions: Scheduled (with the reasons below) and Preempted.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// ObservedGeneration is the spec generation the status was computed from.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// PodGroup condition types and reasons are named in pkg/names
// (ConditionPodGroup*, ReasonPodGroup*).

// +kubebuilder:object:root=true

// PodGroupList is a list of PodGroups.
type PodGroupList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []PodGroup `json:"items"`
}
