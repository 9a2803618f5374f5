// Package gvr holds the API resources Gantry reads and writes, derived from the API
// packages (pkg/apis, KubeRay's, k8s.io/api), never retyped.
//
// It imports API types only. The Kubernetes-agnostic core must not import it; plain
// names are in pkg/names.
package gvr

import (
	rayv1 "github.com/ray-project/kuberay/ray-operator/apis/ray/v1"
	resourceapi "k8s.io/api/resource/v1"

	gpuv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/gpu/v1alpha1"
	schedulingv1alpha1 "github.com/gantry-dev/gantry/pkg/apis/scheduling/v1alpha1"
)

var (
	Queue      = schedulingv1alpha1.SchemeGroupVersion.WithResource("queues")
	PodGroup   = schedulingv1alpha1.SchemeGroupVersion.WithResource("podgroups")
	GPUNode    = gpuv1alpha1.SchemeGroupVersion.WithResource("gpunodes")
	RayCluster = rayv1.GroupVersion.WithResource("rayclusters")
	RayJob     = rayv1.GroupVersion.WithResource("rayjobs")
	RayService = rayv1.GroupVersion.WithResource("rayservices")
	// Resource is the DRA API the scheduler reads (resource.k8s.io/v1).
	Resource = resourceapi.SchemeGroupVersion
)
