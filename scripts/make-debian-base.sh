#!/usr/bin/env bash
# Creates debian:trixie-slim in the local Docker engine from Debian's packages, for hosts
# that cannot pull from a container registry. Does nothing when the image is present.
set -euo pipefail
image="${1:-debian:trixie-slim}"
if docker image inspect "$image" >/dev/null 2>&1; then
  exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
mirror="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
root="$(mktemp -d)"
trap 'rm -rf "$root"' EXIT
echo "Creating $image with debootstrap (about a minute)..."
debootstrap --variant=minbase trixie "$root" "$mirror" >"$root.log" 2>&1 || { tail -n 30 "$root.log" >&2; exit 1; }
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin
tar -C "$root" -c . | docker import --change 'CMD ["bash"]' - "$image" >/dev/null
rm -f "$root.log"
echo "Created $image"
