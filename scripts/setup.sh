#!/usr/bin/env bash
# Creates .venv and installs the project. torch==2.13.0 (the CPU build on disk) goes in first,
# so that no dependency can pull an unpinned, CUDA-sized torch.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
stamp=.venv/.radscreen-installed
if [ ! -f "$stamp" ] || [ pyproject.toml -nt "$stamp" ]; then
    .venv/bin/python -m pip install --quiet --upgrade pip
    .venv/bin/python -m pip install --quiet "torch==2.13.0"
    .venv/bin/python -m pip install --quiet -e ".[dev]"
    touch "$stamp"
fi
