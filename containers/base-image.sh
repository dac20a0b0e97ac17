#!/usr/bin/env bash
# Build the offline Debian base image that every posttrain container starts FROM (no registry pull needed).
#
# Idempotent: does nothing when the image exists and holds the packages below (its label posttrain.packages);
# an image of another package list is rebuilt. It imports a root filesystem: an existing one from $BASE_ROOTFS, or a
# fresh `debootstrap --variant=minbase` of bookworm with python3, nodejs, make (the terminal suite has a
# make-the-build-pass env) and git (the regression_hunt suite's workspaces are git repositories).
#
# Example:
#   containers/base-image.sh                                   # -> posttrain-base:bookworm
#   BASE_ROOTFS=/tmp/pt-base containers/base-image.sh           # reuse a rootfs made earlier, skip debootstrap
#   BASE_IMAGE=my-base:1 DEBIAN_MIRROR=http://mirror.local/debian containers/base-image.sh
set -euo pipefail

BASE_IMAGE="${BASE_IMAGE:-posttrain-base:bookworm}"
DEBIAN_MIRROR="${DEBIAN_MIRROR:-http://deb.debian.org/debian}"
SUITE="${SUITE:-bookworm}"
PACKAGES="python3,nodejs,make,git"

built="$(docker image inspect --format '{{ index .Config.Labels "posttrain.packages" }}' "$BASE_IMAGE" 2>/dev/null \
         || true)"
if [[ "$built" == "$PACKAGES" ]]; then
    echo "base-image: $BASE_IMAGE already exists"
    exit 0
fi

if [[ -n "${BASE_ROOTFS:-}" ]]; then
    for binary in python3 node make git; do
        [[ -x "$BASE_ROOTFS/usr/bin/$binary" ]] \
            || { echo "base-image: $BASE_ROOTFS has no usr/bin/$binary" >&2; exit 1; }
    done
    rootfs="$BASE_ROOTFS"
else
    command -v debootstrap >/dev/null || { echo "base-image: debootstrap is not installed" >&2; exit 1; }
    rootfs="$(mktemp -d /tmp/posttrain-rootfs.XXXXXX)"
    trap 'rm -rf "$rootfs"' EXIT
    debootstrap --variant=minbase --include="$PACKAGES" "$SUITE" "$rootfs" "$DEBIAN_MIRROR"
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
fi

echo "base-image: importing $rootfs as $BASE_IMAGE"
tar -C "$rootfs" -c . | docker import --change "LABEL posttrain.packages=$PACKAGES" - "$BASE_IMAGE" >/dev/null
echo "base-image: built $BASE_IMAGE"
