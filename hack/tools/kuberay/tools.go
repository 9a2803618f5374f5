//go:build tools

// Package tools pins the KubeRay operator v1.6.2 that creates Ray pods in tests and the sandbox.
package tools

import _ "github.com/ray-project/kuberay/ray-operator"
