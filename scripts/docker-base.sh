#!/usr/bin/env bash
# Makes a local Debian bookworm + Python 3.11 base image for deploy/Dockerfile.cpu where base images
# cannot be pulled (only package registries reachable): debootstrap a minimal root file system and
# `docker import` it. Usage:
#
#   scripts/docker-base.sh [TAG]          # default TAG: radscreen-base:bookworm-py311
#   docker build --network host --build-arg BASE_IMAGE=radscreen-base:bookworm-py311 ...
#
# Cached twice so repeated runs take seconds: the image tag itself (nothing to do when it exists) and
# the debootstrap tarball under ${RADSCREEN_CACHE:-~/.cache/radscreen} (re-imported in ~10 s after the
# image was removed). Delete the tarball to bootstrap afresh.
#
# The host's CA bundle is copied into the base (and PIP_CERT / SSL_CERT_FILE point at it) because
# on machines behind a TLS-inspecting egress proxy pip inside the build must trust that proxy's CA,
# exactly as pip on the host does. With python:3.11-slim (the Dockerfile's default) none of this applies.
# Needs root (debootstrap, dockerd's socket) and a running Docker daemon (scripts/docker-daemon.sh).
set -euo pipefail

TAG=${1:-radscreen-base:bookworm-py311}
MIRROR=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
CACHE=${RADSCREEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/radscreen}
TARBALL="$CACHE/debootstrap-bookworm-minbase-py311.tar"
HOST_CA=${HOST_CA_BUNDLE:-/etc/ssl/certs/ca-certificates.crt}

log() { echo "docker-base: $*" >&2; }

if docker image inspect "$TAG" >/dev/null 2>&1; then
    log "image $TAG present"
    exit 0
fi

if [ ! -s "$TARBALL" ]; then
    command -v debootstrap >/dev/null || { log "debootstrap not installed (scripts/install-system-deps.sh)"; exit 1; }
    mkdir -p "$CACHE"
    rootfs=$(mktemp -d "${TMPDIR:-/tmp}/radscreen-rootfs.XXXXXX")
    trap 'rm -rf "$rootfs"' EXIT
    log "debootstrap bookworm (minbase + python3, python3-venv) from $MIRROR into $rootfs"
    start=$SECONDS
    debootstrap --variant=minbase --include=python3,python3-venv bookworm "$rootfs" "$MIRROR" >&2
    # Slim the root file system: package lists, caches, documentation and locales are not needed to serve.
    rm -rf "$rootfs"/var/lib/apt/lists/* "$rootfs"/var/cache/apt/*.bin "$rootfs"/var/cache/apt/archives/*.deb \
           "$rootfs"/usr/share/doc/* "$rootfs"/usr/share/man/* "$rootfs"/usr/share/info/* "$rootfs"/var/log/*.log
    if [ -s "$HOST_CA" ]; then
        mkdir -p "$rootfs/etc/ssl/certs"
        cp "$HOST_CA" "$rootfs/etc/ssl/certs/ca-certificates.crt"
    fi
    # Written to a temporary name and renamed, so an interrupted run never leaves a truncated cache.
    tar -C "$rootfs" --numeric-owner -cf "$TARBALL.partial" .
    mv "$TARBALL.partial" "$TARBALL"
    log "bootstrapped in $((SECONDS - start)) s -> $TARBALL ($(du -h "$TARBALL" | cut -f1))"
fi

log "importing $TARBALL as $TAG"
docker import \
    --change 'ENV LANG=C.UTF-8' \
    --change 'ENV SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt' \
    --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
    --change 'CMD ["python3"]' \
    "$TARBALL" "$TAG" >/dev/null
docker run --rm --network none "$TAG" python3 -c "import sys, venv; print('docker-base: python', sys.version.split()[0])" >&2
