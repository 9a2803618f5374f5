#!/usr/bin/env bash
# gpu-smoke: build gantry-node-agent and run its discovery and metrics once
# against the real NVIDIA driver of this machine, printing what it found.
# Needs a GPU machine; elsewhere it fails with one clear line.
set -euo pipefail

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo_root"
bin_dir="${BIN:-$repo_root/bin}"
mkdir -p "$bin_dir"

# go-nvml is cgo; its header marks some calls deprecated, which is noise here.
export CGO_ENABLED=1
export CGO_CFLAGS="${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}"
go build -o "$bin_dir/gantry-node-agent" ./cmd/node-agent

if ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1' && [ ! -e /dev/nvidiactl ]; then
  echo "gpu-smoke: no NVIDIA driver on this machine (libnvidia-ml.so.1 not found, no /dev/nvidiactl): run it on a GPU node" >&2
  exit 1
fi
if command -v nvidia-smi >/dev/null 2>&1; then
  echo "== nvidia-smi, for comparison"
  nvidia-smi --query-gpu=index,uuid,name,memory.used,memory.total,pci.bus_id --format=csv || true
  echo
fi
echo "== gantry-node-agent --smoke"
exec "$bin_dir/gantry-node-agent" --smoke --node-name "${NODE_NAME:-$(hostname)}" "$@"
