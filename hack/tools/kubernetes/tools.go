//go:build tools

// Package tools pins kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
// v1.37.2. k8s.io/kubernetes replaces its staging modules with ./staging/..., which
// cannot be resolved outside its own tree, so go.mod maps each to its v0.37.2 release.
package tools

import (
	_ "k8s.io/kubernetes/cmd/kube-apiserver"
	_ "k8s.io/kubernetes/cmd/kube-controller-manager"
	_ "k8s.io/kubernetes/cmd/kube-scheduler"
	_ "k8s.io/kubernetes/cmd/kubectl"
)
