package agent

import (
	"context"
	"fmt"

	"github.com/gantry-dev/gantry/pkg/names"
	resourceapi "k8s.io/api/resource/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// DeviceClass is the gpu.gantry.dev DeviceClass; deploy/manifests/deviceclass.yaml
// holds the same object (a test keeps them equal).
func DeviceClass() *resourceapi.DeviceClass {
	return &resourceapi.DeviceClass{
		TypeMeta:   metav1.TypeMeta{APIVersion: "resource.k8s.io/v1", Kind: "DeviceClass"},
		ObjectMeta: metav1.ObjectMeta{Name: names.DriverName},
		Spec: resourceapi.DeviceClassSpec{
			Selectors: []resourceapi.DeviceSelector{{
				CEL: &resourceapi.CELDeviceSelector{Expression: fmt.Sprintf("device.driver == %q", names.DriverName)},
			}},
		},
	}
}

// EnsureDeviceClass creates the DeviceClass if it is missing. An existing
// class is left alone: an administrator may have narrowed its selectors.
func EnsureDeviceClass(ctx context.Context, client kubernetes.Interface) error {
	_, err := client.ResourceV1().DeviceClasses().Create(ctx, DeviceClass(), metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("install DeviceClass %s: %w", names.DriverName, err)
	}
	return nil
}
