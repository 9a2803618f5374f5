#!/usr/bin/env bash
# build.sh: `make images`. Builds gantry-scheduler and gantry-node-agent images with
# whichever of podman, buildah or docker is present (CONTAINER_TOOL overrides), from
# binaries built here and a base unpacked from Debian's packages: nothing is pulled
# from a container registry, so it works offline.
#
#   VERSION   image tag; default the chart's appVersion (the chart's default tag)
#   REGISTRY  default ghcr.io/gantry-dev (the chart's image.registry)
#   ARCHS     default the host's (go env GOARCH); "amd64 arm64" builds both (arm64's
#             cgo agent needs gcc-aarch64-linux-gnu and dpkg --add-architecture arm64)
#   OUT       where binaries and base trees go; default _output/images
set -euo pipefail
cd "$(dirname "$0")/../.."
VERSION=${VERSION:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\} *$/\1/p' deploy/helm/gantry/Chart.yaml)}
REGISTRY=${REGISTRY:-ghcr.io/gantry-dev}
ARCHS=${ARCHS:-$(go env GOARCH)}
OUT=${OUT:-_output/images}
tool=$(hack/images/tool.sh)

mkdir -p "$OUT"
cp hack/images/*.Containerfile "$OUT/"
for arch in $ARCHS; do
  echo ">> building the binaries for linux/$arch (hack/images/gobuild.sh: after make build, only linking)"
  hack/images/gobuild.sh gantry-scheduler "$OUT/linux-$arch" "$arch"
  hack/images/gobuild.sh gantry-node-agent "$OUT/linux-$arch" "$arch"
  echo ">> assembling the node agent's base from Debian's libc6 and libc-bin ($arch)"
  hack/images/rootfs.sh "$OUT/rootfs-$arch" "$arch"
  for name in scheduler node-agent; do
    image=$REGISTRY/gantry-$name:$VERSION
    [ "$(echo $ARCHS | wc -w)" -gt 1 ] && image=$image-$arch
    echo ">> $tool: $image"
    args=(-f "$OUT/$name.Containerfile" --platform "linux/$arch" --build-arg "TARGETARCH=$arch" --build-arg "VERSION=$VERSION" -t "$image")
    case $tool in
      buildah) buildah build --isolation chroot --timestamp 0 "${args[@]}" "$OUT" ;;
      podman) podman build --timestamp 0 "${args[@]}" "$OUT" ;;
      docker) docker build "${args[@]}" "$OUT" ;;
    esac
  done
done
# Several architectures: one manifest list per image (podman and buildah; docker
# users build multi-arch with buildx, as the release workflow does).
if [ "$(echo $ARCHS | wc -w)" -gt 1 ] && [ "$tool" != docker ]; then
  for name in scheduler node-agent; do
    list=$REGISTRY/gantry-$name:$VERSION
    $tool manifest rm "$list" >/dev/null 2>&1 || true
    $tool manifest create "$list"
    for arch in $ARCHS; do $tool manifest add "$list" "containers-storage:$list-$arch"; done
  done
fi
echo ">> built $REGISTRY/gantry-scheduler:$VERSION and $REGISTRY/gantry-node-agent:$VERSION ($ARCHS) with $tool"
