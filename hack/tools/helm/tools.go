//go:build tools

// Package tools pins helm, which lints and renders deploy/helm/gantry in tests
// (test/deploy) and installs it on real clusters (docs/install.md).
package tools

import _ "helm.sh/helm/v3/cmd/helm"
