//go:build tools

// Package tools pins kwok, which plays the kubelets of fake nodes in tests and the sandbox.
package tools

import _ "sigs.k8s.io/kwok/cmd/kwok"
