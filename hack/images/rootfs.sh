#!/usr/bin/env bash
# rootfs.sh DIR ARCH: the node agent's base, unpacked from Debian's packages: glibc
# (libc6) for the cgo binary and the dlopen of libnvidia-ml.so.1, ldconfig (libc-bin)
# for the NVIDIA container runtime's ldcache hook, and an ld.so.conf that lists the
# directories the runtime mounts the driver's libraries into. Uses apt-get download, so
# it needs Debian's package mirror (or apt's cache), not a container registry.
set -euo pipefail
dir=$1
arch=${2:-$(dpkg --print-architecture)}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
rm -rf "$dir"
mkdir -p "$dir"
# A foreign architecture needs it added first (dpkg --add-architecture arm64).
download() { (cd "$work" && apt-get download -qq -o APT::Sandbox::User=root "libc6:$arch" "libc-bin:$arch" >/dev/null); }
# Package lists missing (a fresh machine) or stale (a mirror that moved on): refresh
# them as root, as make test-deps does, and try once more.
if ! download; then
  if [ "$(id -u)" != 0 ]; then
    echo "rootfs.sh: apt-get download libc6:$arch libc-bin:$arch failed; run apt-get update as root and retry" >&2
    exit 1
  fi
  echo ">> apt-get update, then downloading libc6 and libc-bin again" >&2
  apt-get update -qq
  download
fi
for deb in "$work"/*.deb; do dpkg-deb -x "$deb" "$work/x"; done
mkdir -p "$dir/usr/lib" "$dir/usr/sbin" "$dir/etc/ld.so.conf.d" "$dir/tmp"
# libc6 ships lib* under usr/lib/<triplet> (merged /usr) or lib/<triplet>.
for d in lib usr/lib lib64 usr/lib64; do
  [ -d "$work/x/$d" ] && mkdir -p "$dir/$d" && cp -a "$work/x/$d/." "$dir/$d/"
done
cp -a "$work/x/sbin/ldconfig" "$dir/usr/sbin/ldconfig" 2>/dev/null || cp -a "$work/x/usr/sbin/ldconfig" "$dir/usr/sbin/ldconfig"
# Merged /usr: /lib and /sbin point into /usr as on Debian.
for l in lib sbin bin; do [ -e "$dir/$l" ] || ln -s "usr/$l" "$dir/$l"; done
mkdir -p "$dir/usr/bin"
chmod 1777 "$dir/tmp"
cat > "$dir/etc/ld.so.conf" <<'CONF'
include /etc/ld.so.conf.d/*.conf
CONF
triplet=$(ls "$work/x/usr/lib" 2>/dev/null | grep -- '-linux-gnu' | head -n1 || true)
printf '/usr/lib/%s\n/usr/local/nvidia/lib64\n/usr/local/nvidia/lib\n' "$triplet" > "$dir/etc/ld.so.conf.d/gantry.conf"
# Files the user and group lookups of glibc read; 65532 is the nonroot user.
printf 'root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' > "$dir/etc/passwd"
printf 'root:x:0:\nnonroot:x:65532:\n' > "$dir/etc/group"
# Leave out what the agent never uses (locales, docs, gconv modules).
rm -rf "$dir/usr/share" "$dir/usr/lib/locale" "$dir/usr/lib/$triplet/gconv"
# One timestamp for every file: the same packages give the same layer.
find "$dir" -exec touch -h -d @0 {} +
