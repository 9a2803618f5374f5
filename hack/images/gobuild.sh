#!/usr/bin/env bash
# gobuild.sh NAME OUT [GOARCH]: builds gantry-scheduler or gantry-node-agent into OUT
# with the flags its image ships. `make build` and `make images` both call it, so the
# images hold the binaries the sandbox runs, and `make images` after `make build` (or
# `make test`) only links: Go caches compiled packages by their flags, and any other
# flag (-trimpath on the agent, CGO_ENABLED=0 on one build but not the other) would
# compile Kubernetes' client libraries once more (~7 CPU-minutes each on 2 cores).
#
#   gantry-scheduler   static (CGO_ENABLED=0) for its FROM scratch image; -trimpath,
#                      as nothing else compiles with CGO_ENABLED=0 anyway.
#   gantry-node-agent  cgo (go-nvml dlopens libnvidia-ml.so.1) against glibc, with the
#                      flags of `go test` (no -trimpath) so that it reuses the packages
#                      `make test` compiled. Its build paths stay in the binary.
set -euo pipefail
name=$1 out=$2 arch=${3:-$("${GO:-go}" env GOARCH)}
export GOOS=linux GOARCH=$arch
case $name in
  gantry-scheduler)
    CGO_ENABLED=0 exec "${GO:-go}" build -trimpath -ldflags "-s -w" -o "$out/gantry-scheduler" ./cmd/scheduler ;;
  gantry-node-agent)
    if [ "$arch" != "$("${GO:-go}" env GOHOSTARCH)" ] && [ -z "${CC:-}" ]; then
      case $arch in
        arm64) export CC=aarch64-linux-gnu-gcc ;;
        amd64) export CC=x86_64-linux-gnu-gcc ;;
      esac
    fi
    # go-nvml's header marks old NVML calls deprecated; the Makefile exports the same.
    CGO_ENABLED=1 CGO_CFLAGS=${CGO_CFLAGS:--O2 -Wno-deprecated-declarations} \
      exec "${GO:-go}" build -ldflags "-s -w" -o "$out/gantry-node-agent" ./cmd/node-agent ;;
  *) echo "gobuild.sh: unknown binary $name (want gantry-scheduler or gantry-node-agent)" >&2; exit 2 ;;
esac
