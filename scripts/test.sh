#!/usr/bin/env bash
# The test command: set-up (venv + project + the Debian tools some tests drive: promtool, Prometheus,
# Chromium), lint, type-check, architecture contracts (import-linter), then the test suite. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh dev
bash scripts/install-system-deps.sh
.venv/bin/python -m ruff check .
.venv/bin/python -m mypy
.venv/bin/lint-imports --no-cache
.venv/bin/python -m pytest -m "not slow" "$@"
