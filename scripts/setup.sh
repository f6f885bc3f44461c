#!/usr/bin/env bash
# Creates .venv and installs the project with one set of extras:
#   bash scripts/setup.sh core   # serving only: the core dependencies (make serve, the CPU image)
#   bash scripts/setup.sh dev    # default: core + train, batch, ray and the test tools (make test)
# torch==2.13.0 (the CPU build on disk) always goes in first, so that no dependency can pull an
# unpinned, CUDA-sized torch.
#
# One .venv, one stamp per extra set (.venv/.radscreen-installed-<set>): dev includes core, so after
# `make test` a `make serve` installs nothing, and after `make serve` a `make test` only adds the extras
# (torch and the core packages are already satisfied). Nothing is ever installed twice or swapped back
# and forth, and torch is on disk once. A stamp older than pyproject.toml means "install again".
set -euo pipefail
cd "$(dirname "$0")/.."
extras=${1:-dev}
case "$extras" in
    core | dev) ;;
    *) echo "usage: $0 [core|dev]  (got '$extras')" >&2; exit 2 ;;
esac
PYTHON=${PYTHON:-python3}

fresh() {  # the stamp for this extra set exists and is newer than pyproject.toml
    [ -f ".venv/.radscreen-installed-$1" ] && [ ! pyproject.toml -nt ".venv/.radscreen-installed-$1" ]
}

if fresh "$extras" || { [ "$extras" = core ] && fresh dev; }; then
    exit 0
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet "torch==2.13.0"
if [ "$extras" = core ]; then
    .venv/bin/python -m pip install --quiet -e .
else
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
fi
touch ".venv/.radscreen-installed-$extras"
