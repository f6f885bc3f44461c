#!/usr/bin/env bash
# Creates .venv and installs the project with one set of extras:
#   bash scripts/setup.sh core   # serving only: the core dependencies (make serve, the CPU image)
#   bash scripts/setup.sh dev    # default: core + train, batch, ray and the test tools (make test)
#
# torch==$TORCH_VERSION goes in first, so that no dependency can pull an unpinned torch. Which build:
#   - a torch $TORCH_VERSION already in .venv (a CUDA build put there on a GPU machine, say) is kept;
#   - RADSCREEN_TORCH=cpu, or `auto` (the default) on a machine where `nvidia-smi -L` finds no GPU: the CPU
#     build, the way PyTorch documents CPU-only installs (pip's --index-url $RADSCREEN_TORCH_CPU_INDEX,
#     default https://download.pytorch.org/whl/cpu). When that index does not answer within
#     ${RADSCREEN_TORCH_INDEX_TIMEOUT_S:-5} s, pip's own configuration is used instead (a local wheel
#     directory or mirror; on a plain PyPI set-up that is the CUDA build, and the script says so);
#   - RADSCREEN_TORCH=cuda, or `auto` where nvidia-smi lists a GPU: pip's default index (PyPI's Linux torch
#     wheel is the CUDA build).
# The script prints which torch it got (torch.__version__, torch.version.cuda) and from where.
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
TORCH_VERSION=2.13.0
TORCH_MODE=${RADSCREEN_TORCH:-auto}
CPU_INDEX=${RADSCREEN_TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}
case "$TORCH_MODE" in
    auto | cpu | cuda) ;;
    *) echo "setup: RADSCREEN_TORCH must be auto, cpu or cuda (got '$TORCH_MODE')" >&2; exit 2 ;;
esac

fresh() {  # the stamp for this extra set exists and is newer than pyproject.toml
    [ -f ".venv/.radscreen-installed-$1" ] && [ ! pyproject.toml -nt ".venv/.radscreen-installed-$1" ]
}

# "version cuda" of the torch in .venv ("2.13.0+cpu None"), or nothing when torch is not importable.
torch_build() {
    .venv/bin/python -c "import torch; print(torch.__version__, torch.version.cuda)" 2>/dev/null || true
}

# Does the CPU wheel index answer (its torch page, within the timeout)?
cpu_index_reachable() {
    .venv/bin/python -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=float(sys.argv[2]))" \
        "${CPU_INDEX%/}/torch/" "${RADSCREEN_TORCH_INDEX_TIMEOUT_S:-5}" 2>/dev/null
}

install_torch() {
    local installed mode
    installed=$(torch_build)
    if [ "${installed%% *}" = "$TORCH_VERSION" ] || [[ "$installed" == "$TORCH_VERSION+"* ]]; then
        echo "setup: torch already in .venv, kept"
        return 0
    fi
    mode=$TORCH_MODE
    if [ "$mode" = auto ]; then
        mode=cpu
        if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; then
            mode=cuda
        fi
    fi
    if [ "$mode" = cuda ]; then
        echo "setup: GPU machine (RADSCREEN_TORCH=$TORCH_MODE): torch $TORCH_VERSION from pip's default index (CUDA build)"
        .venv/bin/python -m pip install --quiet "torch==$TORCH_VERSION"
    elif cpu_index_reachable; then
        echo "setup: CPU build of torch $TORCH_VERSION from $CPU_INDEX"
        .venv/bin/python -m pip install --quiet --index-url "$CPU_INDEX" "torch==$TORCH_VERSION"
    else
        echo "setup: $CPU_INDEX did not answer; torch $TORCH_VERSION from pip's own configuration" \
            "(pip config list; on plain PyPI this is the CUDA build)" >&2
        .venv/bin/python -m pip install --quiet "torch==$TORCH_VERSION"
    fi
}

if fresh "$extras" || { [ "$extras" = core ] && fresh dev; }; then
    exit 0
fi
if [ ! -x .venv/bin/python ]; then
    "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
install_torch
read -r version cuda <<<"$(torch_build) "
echo "setup: torch ${version:-(not importable)} (torch.version.cuda: ${cuda:-?})"
if [ -n "${cuda:-}" ] && [ "$cuda" != None ] && [ "$TORCH_MODE" != cuda ] \
    && ! { command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L >/dev/null 2>&1; }; then
    echo "setup: warning: a CUDA build of torch on a machine without a GPU (several GB); for the CPU build:" \
        "rm -rf .venv and rerun where $CPU_INDEX is reachable" >&2
fi
if [ "$extras" = core ]; then
    .venv/bin/python -m pip install --quiet -e .
else
    .venv/bin/python -m pip install --quiet -e ".[$extras]"
fi
touch ".venv/.radscreen-installed-$extras"
