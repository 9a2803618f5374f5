// Package v1alpha1 holds Gantry's scheduling API, group scheduling.gantry.dev: the
// cluster-scoped Queue (a node of the hierarchical queue tree, with KAI Scheduler's
// quota / limit / overQuotaWeight fields, names and units) and the namespaced PodGroup
// (an explicit gang).
//
// These are wire types only: they must not depend on the scheduler's packages
// (pkg/model, pkg/fairshare, …) nor on a client. Defaults and the checks that need no
// other object live in kubebuilder markers (OpenAPI defaults and CEL rules, compiled by
// controller-gen into deploy/crds); checks that need the other Queues (an unknown
// parent, a cycle) live in pkg/webhook. pkg/apis/scheduling/convert turns these types
// into the scheduler's model.
//
// +kubebuilder:object:generate=true
// +groupName=scheduling.gantry.dev
package v1alpha1
