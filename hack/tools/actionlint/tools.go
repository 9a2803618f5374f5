//go:build tools

// Package tools pins actionlint, which `make lint` runs on .github/workflows (the
// release workflow cannot run on this project's CI machines, so it is linted there).
package tools

import _ "github.com/rhysd/actionlint/cmd/actionlint"
