// Package testenv starts a real Kubernetes control plane for tests. It is a thin
// wrapper over pkg/controlplane (which the sandbox ships) that adds RunMain, one
// control plane shared by all tests of a package. Nothing in the product imports it.
package testenv

import (
	"context"

	"k8s.io/client-go/rest"

	"github.com/gantry-dev/gantry/pkg/controlplane"
)

// Options chooses which parts of the control plane to start (controlplane.Options).
type Options = controlplane.Options

// Env is a running control plane (controlplane.Env).
type Env = controlplane.Env

// KwokNodeLabel and KwokNodeLabelValue (type=kwok) mark the Nodes kwok plays the
// kubelet of.
const (
	KwokNodeLabel      = controlplane.KwokNodeLabel
	KwokNodeLabelValue = controlplane.KwokNodeLabelValue
)

// Start starts a control plane; see controlplane.Start.
func Start(ctx context.Context, opts Options) (*Env, error) { return controlplane.Start(ctx, opts) }

// BinDir is the directory of the pinned binaries; see controlplane.BinDir.
func BinDir() (string, error) { return controlplane.BinDir() }

// RepoRoot is the repository's root directory; see controlplane.RepoRoot.
func RepoRoot() (string, error) { return controlplane.RepoRoot() }

// FreePort returns a free loopback port; see controlplane.FreePort.
func FreePort() (int, error) { return controlplane.FreePort() }

// Apply creates or updates the objects of a YAML manifest; see controlplane.Apply.
var Apply = controlplane.Apply

// ApplyFile applies a manifest file; see controlplane.ApplyFile.
var ApplyFile = controlplane.ApplyFile

// InstallCRDs installs CRDs and waits for them; see controlplane.InstallCRDs.
func InstallCRDs(ctx context.Context, cfg *rest.Config, paths ...string) error {
	return controlplane.InstallCRDs(ctx, cfg, paths...)
}

// WriteKubeconfig writes a kubeconfig for cfg; see controlplane.WriteKubeconfig.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	return controlplane.WriteKubeconfig(cfg, path)
}
