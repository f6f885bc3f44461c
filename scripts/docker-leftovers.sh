#!/usr/bin/env bash
# What the container test leaves on this machine, and how to remove it (printed at the end of scripts/test.sh;
# run it any time). The image tags are the caches of scripts/docker-build-cpu.sh and scripts/docker-base.sh:
#   radscreen-build-cache:*   the Dockerfile's "deps" stage (torch + dependencies, ~1.5 GB)
#   radscreen-base:*          the debootstrapped Debian base (~150 MB)
#   radscreen-test:*          a test image left by an interrupted run
#   radscreen:cpu-local       scripts/docker-build-cpu.sh's default tag
# plus the debootstrap tarball under ${RADSCREEN_CACHE:-~/.cache/radscreen} and Docker's own state
# (/var/lib/docker). Reads only; needs a running engine to list images (it lists disk use without one).
set -uo pipefail

CACHE=${RADSCREEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/radscreen}
DOCKER_ROOT=${DOCKER_DATA_ROOT:-/var/lib/docker}
REFERENCES=(radscreen-build-cache radscreen-base radscreen-test radscreen:cpu-local)

left=0
if command -v docker >/dev/null 2>&1 && docker info >/dev/null 2>&1; then
    for ref in "${REFERENCES[@]}"; do
        while read -r name size; do
            [ -n "$name" ] || continue
            echo "  image $name ($size)"
            left=1
        done < <(docker image ls --format '{{.Repository}}:{{.Tag}} {{.Size}}' "$ref" 2>/dev/null)
    done
fi
for tarball in "$CACHE"/debootstrap-*.tar; do
    [ -f "$tarball" ] || continue
    echo "  file $tarball ($(du -sh "$tarball" | cut -f1))"
    left=1
done
if [ "$left" -eq 1 ]; then
    echo "  remove them: make clean-docker"
else
    echo "  no container-test images or caches"
fi
if [ -d "$DOCKER_ROOT" ]; then
    echo "  Docker's state directory $DOCKER_ROOT: $(du -sh "$DOCKER_ROOT" 2>/dev/null | cut -f1) in all (the images" \
        "above included; Docker's own, removed only by hand: rm -rf $DOCKER_ROOT with no engine running)"
fi
