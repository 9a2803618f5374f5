#!/usr/bin/env bash
# gpu-smoke: check gantry-node-agent against a real GPU machine and exit
# non-zero on any mismatch. One GPU machine with a driver, no internet:
#
#   make gpu-smoke-binary            # where Go is: builds bin/gpu-smoke
#   scp bin/gpu-smoke gpu-host:      # plus kube-apiserver and etcd for check 4
#   GANTRY_BIN_DIR=. ./gpu-smoke     # or: hack/gpu-smoke.sh on a checkout
#
# Checks (hack/gpu-smoke/main.go): 1. discovery per GPU against nvidia-smi
# (UUID, name, memory total, MIG mode); 2. /metrics over HTTP; 3. used/free
# memory following a live allocation through libcuda, then its release;
# 4. the ResourceSlice from the real inventory accepted by a real API server
# (skipped without kube-apiserver and etcd in $GANTRY_BIN_DIR); 5. the CDI
# spec a claim on GPU 0 would get, from NVIDIA's CDI library, validated,
# with its device nodes present. Budget: well under 8 minutes (most of it
# starting the API server).
#
# NOT YET RUN ON HARDWARE: written and run only as a dry run (--dry-run: checks
# 2, 4, 5 on a fake fleet). Paste its first real output into the issue.
#
#   hack/gpu-smoke.sh --dry-run      # no GPU: checks 2, 4, 5 on a fake fleet (FAKE_GPUS, default 2xH100)
set -euo pipefail

if [ "${1:-}" = "--dry-run" ]; then
  shift
  FAKE_GPUS="${FAKE_GPUS:-2xH100}"
fi

repo_root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
bin_dir="${BIN:-$repo_root/bin}"
smoke="$bin_dir/gpu-smoke"

if [ ! -x "$smoke" ] || { command -v go >/dev/null 2>&1 && [ -z "${NO_BUILD:-}" ]; }; then
  if ! command -v go >/dev/null 2>&1; then
    echo "gpu-smoke: no $smoke and no Go to build it: build it elsewhere (make gpu-smoke-binary) and copy it here" >&2
    exit 1
  fi
  mkdir -p "$bin_dir"
  # go-nvml is cgo; its header marks some calls deprecated, which is noise here.
  (cd "$repo_root" && CGO_ENABLED=1 CGO_CFLAGS="${CGO_CFLAGS:--O2 -Wno-deprecated-declarations}" \
    go build -o "$smoke" ./hack/gpu-smoke)
fi

if [ -z "${FAKE_GPUS:-}" ] && ! ldconfig -p 2>/dev/null | grep -q 'libnvidia-ml\.so\.1' && [ ! -e /dev/nvidiactl ]; then
  echo "gpu-smoke: no NVIDIA driver on this machine (libnvidia-ml.so.1 not found, no /dev/nvidiactl): run it on a GPU node, or FAKE_GPUS=2xH100 for a dry run" >&2
  exit 1
fi
export GANTRY_BIN_DIR="${GANTRY_BIN_DIR:-$bin_dir}"
exec timeout 480 "$smoke" ${FAKE_GPUS:+--fake-gpus="$FAKE_GPUS"} "$@"
