package kube

import (
	"github.com/gantry-dev/gantry/pkg/kube/dra"
	"github.com/gantry-dev/gantry/pkg/names"
	"github.com/gantry-dev/gantry/pkg/webhook"
)

// Names kept here for callers written before pkg/names existed. They are the same
// constants, not copies; new code imports pkg/names (and pkg/kube/dra, pkg/webhook).
const (
	// Deprecated: use names.DriverName.
	DriverName = names.DriverName
	// Deprecated: use names.AnnotationGPUs.
	AnnotationGPUs = names.AnnotationGPUs
	// Deprecated: use webhook.ValidateQueuePath.
	ValidateQueuePath = webhook.ValidateQueuePath
	// Deprecated: use webhook.DefaultPodPath.
	DefaultPodPath = webhook.DefaultPodPath
)

// Deprecated: use dra.DeviceName.
func DeviceName(index int) string { return dra.DeviceName(index) }

// Deprecated: use dra.ClaimName.
var ClaimName = dra.ClaimName

// Deprecated: use webhook.Serve.
var ServeWebhooks = webhook.Serve
