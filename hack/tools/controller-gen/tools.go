//go:build tools

// Package tools pins controller-gen, which generates Gantry's CRDs and deepcopy code.
package tools

import _ "sigs.k8s.io/controller-tools/cmd/controller-gen"
