#!/usr/bin/env bash
# `make clean-docker`: removes what the container test and scripts/docker-build-cpu.sh cached (the image tags
# listed in scripts/docker-leftovers.sh and the debootstrap tarball). Starts the engine for this if needed
# and stops it again afterwards when it started it; an engine found running stays running. Other images
# and Docker's own state directory are not touched (`docker system df` shows what else is there).
set -uo pipefail
cd "$(dirname "$0")/.."

CACHE=${RADSCREEN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/radscreen}
REFERENCES=(radscreen-build-cache radscreen-base radscreen-test radscreen:cpu-local)

was_running=0
docker info >/dev/null 2>&1 && was_running=1
if bash scripts/docker-daemon.sh start; then
    for ref in "${REFERENCES[@]}"; do
        docker image ls --format '{{.Repository}}:{{.Tag}}' "$ref" 2>/dev/null | while read -r name; do
            [ -n "$name" ] && docker image rm --force "$name" >/dev/null && echo "clean-docker: removed image $name"
        done
    done
    [ "$was_running" -eq 1 ] || bash scripts/docker-daemon.sh stop
else
    echo "clean-docker: no Docker engine; no images to remove" >&2
fi
for tarball in "$CACHE"/debootstrap-*.tar; do
    [ -f "$tarball" ] && rm -f "$tarball" && echo "clean-docker: removed $tarball"
done
echo "clean-docker: left on disk:"
bash scripts/docker-leftovers.sh
