#!/usr/bin/env bash
# smoke.sh: starts each binary from its image, as CI does after `make images`: the
# scheduler must print its usage (--help), and the node agent, with no NVIDIA driver
# in the container, must fail with its one-line error naming libnvidia-ml.so.1 (or, on
# a GPU machine, start).
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=${VERSION:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' deploy/helm/gantry/Chart.yaml)}
REGISTRY=${REGISTRY:-ghcr.io/gantry-dev}
tool=$(hack/images/tool.sh)

# run IMAGE ARGS...: the image's entrypoint with ARGS; prints its output, returns its code.
run() {
  local image=$1; shift
  case $tool in
    buildah)
      local ctr rc=0
      ctr=$(buildah from --pull=never "$image")
      buildah run --isolation chroot "$ctr" -- "$(buildah inspect -f '{{index .OCIv1.Config.Entrypoint 0}}' "$ctr")" "$@" 2>&1 || rc=$?
      buildah rm "$ctr" >/dev/null
      return $rc ;;
    *) $tool run --rm --network none "$image" "$@" 2>&1 ;;
  esac
}

out=$(run "$REGISTRY/gantry-scheduler:$VERSION" --help || true)
if ! grep -q -- "-scheduler-name" <<<"$out"; then
  echo "gantry-scheduler --help from its image did not print its flags:"; echo "$out"; exit 1
fi
echo "ok: gantry-scheduler starts from $REGISTRY/gantry-scheduler:$VERSION"

rc=0
# --smoke reads the GPUs once and exits; without --smoke the agent would first look for
# its cluster (and, by design, start without NVML and wait for it).
out=$(run "$REGISTRY/gantry-node-agent:$VERSION" --smoke --node-name smoke 2>&1) || rc=$?
if [ "$rc" -eq 0 ] || ! grep -qi "nvml\|libnvidia-ml" <<<"$out"; then
  echo "gantry-node-agent without a driver: exit $rc, want a failure naming NVML:"; echo "$out"; exit 1
fi
echo "ok: gantry-node-agent starts from its image and says: $(grep -i -m1 'nvml\|libnvidia-ml' <<<"$out")"
