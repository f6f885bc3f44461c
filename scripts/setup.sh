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
#
# Before anything is downloaded it checks the prerequisites and stops with one clear line when one is
# missing: Linux x86-64; Python >= 3.11 with its venv module ($PYTHON, default python3; only when .venv is
# still to be made); free disk in the checkout: core 3 GB, dev 6 GB (the venv and pip's download cache;
# RADSCREEN_SETUP_MIN_FREE_MB overrides).
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

need() {  # a missing prerequisite: say which and how to get it, before any download
    echo "setup: $*" >&2
    exit 3
}

check_prerequisites() {
    local os arch version free_mb min_mb
    os=$(uname -s) arch=$(uname -m)
    if [ "$os" != Linux ] || [ "$arch" != x86_64 ]; then
        need "Linux x86-64 is needed (torch $TORCH_VERSION and onnxruntime-gpu wheels); this is $os $arch"
    fi
    if [ ! -x .venv/bin/python ]; then
        command -v "$PYTHON" >/dev/null 2>&1 \
            || need "$PYTHON not found: install Python >= 3.11 (Debian/Ubuntu: apt-get install python3 python3-venv)"
        version=$("$PYTHON" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || echo unknown)
        "$PYTHON" -c 'import sys; sys.exit(sys.version_info < (3, 11))' 2>/dev/null \
            || need "Python >= 3.11 is needed; $PYTHON is Python $version. Install a newer one and rerun with" \
                    "PYTHON=python3.11 (or 3.12, 3.13)"
        "$PYTHON" -c 'import ensurepip, venv' 2>/dev/null \
            || need "$PYTHON (Python $version) has no venv module: install it (Debian/Ubuntu: apt-get install" \
                    "python3-venv, or python$version-venv) and rerun"
    fi
    min_mb=${RADSCREEN_SETUP_MIN_FREE_MB:-$([ "$extras" = core ] && echo 3000 || echo 6000)}
    free_mb=$(df -Pm . | awk 'NR == 2 {print $4}')
    if [ -n "$free_mb" ] && [ "$free_mb" -lt "$min_mb" ]; then
        need "$free_mb MB free in $(pwd); the '$extras' set needs about $min_mb MB (docs/install.md)"
    fi
}

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
check_prerequisites
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
    # the peer of benchmarks/bench_peer.py (and its test), without its requirements: they would replace torch
    .venv/bin/python -m pip install --quiet --no-deps "bayesian-torch==0.5.0"
fi
touch ".venv/.radscreen-installed-$extras"
