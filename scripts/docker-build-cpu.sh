#!/usr/bin/env bash
# Builds deploy/Dockerfile.cpu on a machine that cannot pull base images and cannot reach
# download.pytorch.org (only package registries), as the container test does:
#
#   scripts/docker-build-cpu.sh [TAG]        # default TAG: radscreen:cpu-local
#
#   1. a Docker engine (scripts/docker-daemon.sh starts dockerd when none answers);
#   2. the base: $BASE_IMAGE when set, else the local Debian bookworm base (scripts/docker-base.sh, cached);
#   3. the build context is streamed as a tar of exactly what the Dockerfile copies (the working tree is not
#      touched); the local CPU torch wheel ($RADSCREEN_WHEEL_DIR, $PIP_FIND_LINKS or /opt/wheels) is served on
#      127.0.0.1 during the build and passed as TORCH_FIND_LINKS, torch's dependencies come from PyPI;
#   4. `docker build --network host` (pip inside reaches the package registry like pip on the host) with
#      the classic builder (BuildKit would try to pull the docker/dockerfile frontend): first the "deps"
#      stage, tagged $DEPS_TAG as a cache that outlives the image, then the image itself.
# Clear every cache: make clean-docker (scripts/docker-clean.sh), or by hand: docker image rm
# radscreen-build-cache:cpu-deps radscreen-base:bookworm-py311;
# rm ~/.cache/radscreen/debootstrap-*.tar.
# Prints the build time and the image size on the last line. Needs root or membership of the docker group.
set -euo pipefail
cd "$(dirname "$0")/.."

TAG=${1:-radscreen:cpu-local}
DEPS_TAG=${RADSCREEN_DEPS_TAG:-radscreen-build-cache:cpu-deps}
TORCH_VERSION=$(sed -n 's/^ARG TORCH_VERSION=//p' deploy/Dockerfile.cpu)

bash scripts/docker-daemon.sh
if [ -z "${BASE_IMAGE:-}" ]; then
    BASE_IMAGE=radscreen-base:bookworm-py311
    bash scripts/docker-base.sh "$BASE_IMAGE"
fi

# The local CPU torch wheel, served on 127.0.0.1 for the duration of the build (the build runs with
# --network host, so pip inside reaches it as a find-links URL; nothing is copied into the context).
wheel=""
for dir in ${RADSCREEN_WHEEL_DIR:-} ${PIP_FIND_LINKS:-} /opt/wheels; do
    wheel=$(find "$dir" -maxdepth 1 -name "torch-${TORCH_VERSION}+cpu-cp311-*.whl" 2>/dev/null | head -n 1)
    [ -n "$wheel" ] && break
done
torch_args=()
if [ -n "$wheel" ]; then
    served=$(mktemp -d "${TMPDIR:-/tmp}/radscreen-wheels.XXXXXX")
    ln -s "$wheel" "$served/"
    python3 - "$served" "$served/port" 2>/dev/null <<'PY' &
import functools, http.server, sys
handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])
with http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler) as httpd:
    with open(sys.argv[2] + ".partial", "w") as f:
        f.write(str(httpd.server_address[1]))
    import os
    os.replace(sys.argv[2] + ".partial", sys.argv[2])
    httpd.serve_forever()
PY
    server=$!
    trap 'kill "$server" 2>/dev/null; rm -rf "$served"' EXIT
    for _ in $(seq 1 100); do [ -s "$served/port" ] && break; sleep 0.1; done
    url="http://127.0.0.1:$(cat "$served/port")/"
    echo "docker-build-cpu: torch from $wheel (served at $url)" >&2
    torch_args=(--build-arg "TORCH_FIND_LINKS=$url" --build-arg "TORCH_INDEX=${PYPI_INDEX:-https://pypi.org/simple}")
else
    echo "docker-build-cpu: no local torch-${TORCH_VERSION}+cpu wheel; the build downloads it from the CPU index" >&2
fi

# The context: exactly what the Dockerfile copies, streamed as a tar (the working tree is not touched).
context() {
    tar -c --exclude=__pycache__ --exclude='*.pyc' pyproject.toml README.md .dockerignore models service \
        deploy/Dockerfile.cpu
}
build() {
    context | DOCKER_BUILDKIT=0 docker build --network host --build-arg "BASE_IMAGE=$BASE_IMAGE" \
        "${torch_args[@]}" -f deploy/Dockerfile.cpu "$@" -
}

start=$SECONDS
# First the "deps" stage, kept under a tag: the test removes its image afterwards, and without this tag
# the next run would reinstall torch and every dependency (minutes) although only pyproject.toml decides them.
previous=$(docker image inspect --format '{{.Id}}' "$DEPS_TAG" 2>/dev/null || true)
build --target deps -t "$DEPS_TAG"
current=$(docker image inspect --format '{{.Id}}' "$DEPS_TAG")
if [ -n "$previous" ] && [ "$previous" != "$current" ]; then
    docker image rm "$previous" >/dev/null 2>&1 || true   # an outdated cache (pyproject.toml changed)
fi
build -t "$TAG"
seconds=$((SECONDS - start))
size=$(docker image inspect --format '{{.Size}}' "$TAG")
echo "docker-build-cpu: built $TAG on $BASE_IMAGE in ${seconds} s; image size $((size / 1000000)) MB"
