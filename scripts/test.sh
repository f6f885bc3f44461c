#!/usr/bin/env bash
# The test command: set-up (venv + project + the Debian tools some tests drive: promtool, Prometheus,
# Chromium, Docker), lint, type-check, architecture contracts (import-linter), then the test suite. Extra
# arguments go to pytest. RADSCREEN_SKIP_DOCKER=1 skips the container test (no Docker engine is started).
# On exit, whatever the result: the dockerd that the container test started is stopped (an engine found
# running is left alone), and what stays on disk is listed with how to remove it.
set -euo pipefail
cd "$(dirname "$0")/.."

finish() {
    local rc=$?
    echo "test.sh: cleaning up"
    echo "test.sh: left on disk by the container test:"
    bash scripts/docker-leftovers.sh || true
    bash scripts/docker-daemon.sh stop || true
    exit "$rc"
}
trap finish EXIT

bash scripts/setup.sh dev
bash scripts/install-system-deps.sh
.venv/bin/python -m ruff check .
.venv/bin/python -m mypy
.venv/bin/lint-imports --no-cache
.venv/bin/python -m pytest -m "not slow" "$@"
