#!/usr/bin/env bash
# One GPU lease in one command: scripts/gpu_lease.sh OUT [BUDGET_S] [scripts/gpu_check.py options]
#
# Runs with the machine's own python3 (PY=... to choose another) and this tree on PYTHONPATH: no venv, no
# install, no web stack, no embedded weights needed. Writes OUT/lease.md and OUT/lease.jsonl step by step
# (a run cut off at its limit still returns what it measured) and the trained artifact as parts of at most
# 16 MiB with their sha256 (OUT/artifact.parts.json); reassemble here with `radscreen-train reassemble`.
# BUDGET_S (default 540) leaves a minute of a 10-minute command's limit. docs/deploy.md, "GPU lease".
#
#   scripts/gpu_lease.sh "$OUT" 540 --shards .lease/shards     # on the node, the shards carried beside the tree
#   scripts/gpu_lease.sh /tmp/lease-dry 300 --tiny              # the CPU dry run
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
OUT="${1:?usage: scripts/gpu_lease.sh OUT [BUDGET_S] [gpu_check.py options]}"
BUDGET="${2:-540}"
shift $(( $# < 2 ? $# : 2 ))
PY="${PY:-python3}"
export PYTHONPATH="$ROOT${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
cd "$ROOT"
exec "$PY" scripts/gpu_check.py --out "$OUT" --budget-s "$BUDGET" "$@"
