#!/usr/bin/env bash
# A Debian bookworm base image made offline from Debian's packages (no container registry is
# reachable here): debootstrap --variant=minbase, then `docker import`. Idempotent: an image of
# the same tag is reused.
#
#   e2e/images/debian-base.sh            # prints the image name
set -euo pipefail
IMAGE="${FERRYMQ_DEBIAN_BASE:-ferrymq.local/debian:bookworm}"
MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
if docker image inspect "$IMAGE" >/dev/null 2>&1; then echo "$IMAGE"; exit 0; fi
command -v debootstrap >/dev/null || { apt-get update -qq >/dev/null; DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null; }
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
echo "debian-base: debootstrap bookworm (minbase) from $MIRROR" >&2
debootstrap --variant=minbase --include=ca-certificates bookworm "$root" "$MIRROR" >"$root.log" 2>&1 \
  || { tail -20 "$root.log" >&2; echo "debian-base: debootstrap FAILED" >&2; exit 1; }
rm -f "$root.log"
# Like Debian's official images: no package caches, apt keeps none either.
rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
cat > "$root/etc/apt/apt.conf.d/docker-clean" <<'CONF'
DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };
APT::Install-Recommends "false";
CONF
echo "deb $MIRROR bookworm main" > "$root/etc/apt/sources.list"
echo "deb $MIRROR bookworm-updates main" >> "$root/etc/apt/sources.list"
echo "deb ${MIRROR%/debian}/debian-security bookworm-security main" >> "$root/etc/apt/sources.list"
tar -C "$root" -c . | docker import --change 'CMD ["/bin/bash"]' - "$IMAGE" >/dev/null
echo "debian-base: imported $IMAGE" >&2
echo "$IMAGE"
