#!/usr/bin/env bash
# tool.sh: prints the container tool `make images` uses: $CONTAINER_TOOL, else podman,
# buildah, or a docker whose daemon answers; fails with how to get one.
set -euo pipefail
if [ -n "${CONTAINER_TOOL:-}" ]; then echo "$CONTAINER_TOOL"; exit 0; fi
for t in podman buildah; do
  if command -v "$t" >/dev/null; then echo "$t"; exit 0; fi
done
if command -v docker >/dev/null && docker info >/dev/null 2>&1; then echo docker; exit 0; fi
# As root on Debian (CI), install Debian's buildah, as `make test` installs prometheus.
if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo ">> installing Debian's buildah package" >&2
  { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends buildah; } >/dev/null >&2
  command -v buildah >/dev/null && { echo buildah; exit 0; }
fi
echo "make images needs podman, buildah or docker (with its daemon running): apt-get install buildah" >&2
exit 1
