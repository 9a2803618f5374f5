#!/usr/bin/env bash
# smoke.sh: `make images-smoke`, which CI runs after `make images`. Starts each binary
# from its image with no container engine and no privileges beyond what the build
# needed: the tool that built the image exports it (an oci-archive, or docker save's
# archive), hack/images/imagerun unpacks its layers into a folder and runs the image's
# entrypoint there: chrooted as the image's USER when it may (root), otherwise straight
# from the unpacked folder, a dynamic binary through the image's own loader and libraries
# (it says which). Checks:
#   gantry-scheduler --help   exits 0 and prints its flags;
#   gantry-node-agent --smoke with no NVIDIA driver in the image fails with its one-line
#                             "libnvidia-ml.so.1 not found" error.
# Any other outcome, an image that is missing or cannot be exported, fails loudly.
#
#   IMAGERUN_MODE  auto (default), chroot or direct: how imagerun starts the binaries
#   SMOKE_DIR      where the archives go; default _output/images-smoke
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=${VERSION:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' deploy/helm/gantry/Chart.yaml)}
REGISTRY=${REGISTRY:-ghcr.io/gantry-dev}
SMOKE_DIR=${SMOKE_DIR:-_output/images-smoke}
MODE=${IMAGERUN_MODE:-auto}
tool=$(hack/images/tool.sh)

rm -rf "$SMOKE_DIR"
mkdir -p "$SMOKE_DIR"
go build -o "$SMOKE_DIR/imagerun" ./hack/images/imagerun

# export IMAGE FILE: the image as one archive, as the tool that built it stores it.
export_image() {
  local image=$1 file=$2
  case $tool in
    buildah) buildah push --quiet --disable-compression "$image" "oci-archive:$file" >/dev/null ;;
    podman) podman save --quiet --format oci-archive -o "$file" "$image" ;;
    docker) docker save -o "$file" "$image" ;;
    *) echo "smoke.sh: unknown container tool $tool" >&2; return 1 ;;
  esac
}

# run NAME ARGS...: exports REGISTRY/NAME:VERSION and starts its entrypoint with ARGS;
# sets out (stdout and stderr together) and rc.
run() {
  local name=$1; shift
  local image=$REGISTRY/$name:$VERSION archive=$SMOKE_DIR/$name.tar
  if ! export_image "$image" "$archive"; then
    echo "FAIL: cannot export $image with $tool: was it built (make images)?" >&2
    exit 1
  fi
  rc=0
  out=$("$SMOKE_DIR/imagerun" -mode "$MODE" -timeout 2m "$archive" "$@" 2>&1) || rc=$?
  if [ "$rc" -eq 125 ]; then
    echo "FAIL: imagerun could not start $image:"; echo "$out"; exit 1
  fi
}

run gantry-scheduler --help
if [ "$rc" -ne 0 ] || ! grep -q -- "-scheduler-name" <<<"$out"; then
  echo "FAIL: gantry-scheduler --help from its image: exit $rc, want 0 and its flags:"; echo "$out"; exit 1
fi
echo "ok: gantry-scheduler starts from $REGISTRY/gantry-scheduler:$VERSION ($(grep -m1 -o 'imagerun: .*exited 0' <<<"$out" | sed 's/^imagerun: //'))"

# --smoke reads the GPUs once and exits; without --smoke the agent would first look for
# its cluster (and, by design, start without NVML and wait for it).
run gantry-node-agent --smoke --node-name smoke
if [ "$rc" -eq 0 ] || ! grep -q "libnvidia-ml.so.1 not found" <<<"$out"; then
  echo "FAIL: gantry-node-agent --smoke from its image with no driver: exit $rc, want a failure saying libnvidia-ml.so.1 not found:"; echo "$out"; exit 1
fi
echo "ok: gantry-node-agent starts from $REGISTRY/gantry-node-agent:$VERSION and, with no driver, says: $(grep -m1 'libnvidia-ml.so.1 not found' <<<"$out")"
echo "$out" | grep '^imagerun:' | sed 's/^/   /'
