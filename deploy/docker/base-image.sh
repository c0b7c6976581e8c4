#!/usr/bin/env bash
# Build the local base image the serving Dockerfiles start FROM, where no image registry is reachable:
# a Debian bookworm rootfs from Debian's own packages (debootstrap --variant=minbase) plus python3 (3.11,
# what the image's wheels are downloaded for), trimmed like Debian's -slim images and `docker import`ed.
# Cached: does nothing when the image already exists (FORCE=1 rebuilds). Needs root, debootstrap and a
# running dockerd (`apt-get install -y debootstrap docker.io`, then `dockerd &`).
# Where a registry is reachable, any image with python3 >= 3.11 does instead (BASE_IMAGE=python:3.11-slim-bookworm,
# with PY_VERSION matching its Python).
set -euo pipefail

IMAGE=${BASE_IMAGE:-r3edge-base:bookworm}
SUITE=${SUITE:-bookworm}
MIRROR=${MIRROR:-http://deb.debian.org/debian}

if [[ -z "${FORCE:-}" ]] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
    echo "base image $IMAGE exists (FORCE=1 rebuilds it)"
    exit 0
fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install -y debootstrap" >&2; exit 1; }
docker info >/dev/null 2>&1 || { echo "no docker daemon: apt-get install -y docker.io, then start dockerd &" >&2; exit 1; }
[[ $(id -u) == 0 ]] || { echo "debootstrap needs root" >&2; exit 1; }

ROOTFS=$(mktemp -d /tmp/r3edge-rootfs.XXXXXX)
trap 'rm -rf "$ROOTFS"' EXIT
debootstrap --variant=minbase --include=python3 "$SUITE" "$ROOTFS" "$MIRROR"
# what Debian's -slim images leave out: documentation, manuals, locales but C, apt's lists and caches
chroot "$ROOTFS" apt-get clean
rm -rf "$ROOTFS"/var/lib/apt/lists/* "$ROOTFS"/var/cache/apt/*.bin "$ROOTFS"/usr/share/doc/* "$ROOTFS"/usr/share/man/* \
    "$ROOTFS"/usr/share/info/* "$ROOTFS"/var/log/*.log "$ROOTFS"/var/cache/debconf/*-old
find "$ROOTFS"/usr/share/locale -mindepth 1 -maxdepth 1 ! -name 'C.*' ! -name locale.alias -exec rm -rf {} +
find "$ROOTFS"/usr/lib/python3* -name __pycache__ -prune -exec rm -rf {} +
tar -C "$ROOTFS" --numeric-owner -c . | docker import \
    -c 'ENV LANG=C.UTF-8 PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' -c 'CMD ["/bin/bash"]' \
    -m "debootstrap --variant=minbase --include=python3 $SUITE" - "$IMAGE"
docker image ls "$IMAGE"
