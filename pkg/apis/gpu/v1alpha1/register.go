package v1alpha1

import (
	"github.com/gantry-dev/gantry/pkg/names"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// GroupName is the API group of the node agent's objects.
const GroupName = names.GroupGPU

var (
	// SchemeGroupVersion is gpu.gantry.dev/v1alpha1.
	SchemeGroupVersion = schema.GroupVersion{Group: GroupName, Version: "v1alpha1"}
	// SchemeBuilder registers this package's types.
	SchemeBuilder = runtime.NewSchemeBuilder(addKnownTypes)
	// AddToScheme adds this package's types to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)

func addKnownTypes(scheme *runtime.Scheme) error {
	scheme.AddKnownTypes(SchemeGroupVersion, &GPUNode{}, &GPUNodeList{})
	metav1.AddToGroupVersion(scheme, SchemeGroupVersion)
	return nil
}
