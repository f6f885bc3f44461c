#!/usr/bin/env bash
# The 512 px recipe on a GPU lease, and 256 px beside it at the same GPU time: the input size chosen by measurement.
#
#   scripts/gpu_lease_512.sh smoke OUT                  # 2 short epochs at 512 px: the step rate, to size the run
#   scripts/gpu_lease_512.sh train OUT EPOCHS512 EPOCHS256 MINUTES   # both runs, MINUTES of budget each
#
# On the node (its own python3, this tree on PYTHONPATH). Reads the shards carried in .lease/s512-*/ (crop
# shards packed with `radscreen-train pack --codec webp-crop --sides train,val`; their index in
# .lease/s512-index/) and the warm start .lease/init-fp16 (scripts/artifact_fp16.py of models/default). Shards
# that did not arrive are left out of the index used here, and the report says how many images trained.
# OUT receives lease.log and, after `train`, results.tar.gz.NN parts (at most 15 MiB each) with SHA256SUMS:
# both runs' histories, reports and fp16 artifacts. docs/deploy.md, "GPU lease".
# VAL_EVERY (default 5): epochs between validations; at 512 px a validation of 1,078 eyes x 4 draws costs
# twice an epoch's steps (measured on an H100: 9.5 s an epoch with validation, about 3 s without).
set -uo pipefail
mode=${1:?usage: $0 smoke|train OUT ...}; out=${2:?OUT}; shift 2
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root"
# shellcheck source=scripts/lease_lib.sh
. scripts/lease_lib.sh
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py=${PY:-python3}; work=${WORK:-/tmp/lease512}; lease=${LEASE:-.lease}; mkdir -p "$out" "$work"
extra=${FIT_EXTRA:-}  # more fit options, last (they win): the CPU dry run's tiny model
log="$out/lease.log"; exec > >(tee -a "$log") 2>&1
echo "== $(date -u +%FT%TZ) $mode on $(hostname), $(nproc) cores"
lease_node_check "$py" "$lease"
shards=$work/shards; lease_link_shards "$lease" s512 "$shards"
"$py" - "$shards" "$lease/s512-index/index.json" <<'PY'
import json, sys
from pathlib import Path
folder, index = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text())
here = [s for s in index["shards"] if (folder / s["file"]).is_file()]
print(f"shards here: {len(here)} of {len(index['shards'])}, {sum(s['images'] for s in here)} of {index['images']} images")
index["shards"] = here
index["images"] = sum(s["images"] for s in here)
(folder / "index.json").write_text(json.dumps(index))
PY
common=(--data "$shards" --layout shards --init-from "$lease/init-fp16" --nll-epochs 0 --batch-size 128
        --lr 5.7e-5 --rho-lr 5.7e-3 --lr-warmup-steps 100 --lr-schedule cosine --kl-weight 1e-4 --seed 0
        --split 0.7 0.15 0.15 --eval-samples 4 --precision auto --max-missed-share 0.03 --weights-dtype fp16
        --val-every "${VAL_EVERY:-5}" --checkpoint-minutes 3 --no-progress)
fit() {  # size epochs minutes [extra]
    local size=$1 epochs=$2 minutes=$3; shift 3
    echo "== $(date -u +%T) fit ${size} px, $epochs epochs, budget $minutes min"
    "$py" -m training.cli -v fit "${common[@]}" --input-size "$size" --epochs "$epochs" \
        --out "$work/run-$size" --artifact "$work/artifact-$size" --version 2.0.0 \
        --name "radscreen-radial-vgg16-odir-eyepacs-${size}px-gpu" --time-budget-min "$minutes" "$@" $extra 2>&1 \
        | tr '\r' '\n' | grep --line-buffered -Ev "it/s(, [^]]*)?\]$"
}
case $mode in
smoke)
    # the training step's rate (the progress bar's last readings) and the whole path to the artifact, on CUDA
    smoke=(); for a in "${common[@]}"; do [ "$a" = --no-progress ] || smoke+=("$a"); done
    for size in ${SMOKE_SIZES:-512}; do
        echo "== $(date -u +%T) $size px, 2 epochs of at most 12 steps"
        "$py" -m training.cli fit "${smoke[@]}" --input-size "$size" --epochs 2 --max-steps-per-epoch 12 \
            --out "$work/smoke-$size" --artifact "$work/smoke-artifact-$size" $extra 2>&1 | tr '\r' '\n' > "$work/smoke.txt"
        grep "it/s" "$work/smoke.txt" | grep -v "scoring" | tail -2
        grep -v "it/s\|WARNING\|INFO" "$work/smoke.txt" | tail -25
        echo "== $(date -u +%T) $size px done"
    done ;;
train)
    e512=${1:?EPOCHS512}; e256=${2:?EPOCHS256}; minutes=${3:?MINUTES}
    read -r high low <<< "${SIZES:-512 256}"  # SIZES="64 32": the CPU dry run of this path
    fit "$high" "$e512" "$minutes"
    fit "$low" "$e256" "$minutes"
    tar -C "$work" --exclude='checkpoint*' --exclude=best.safetensors --exclude=draws.npz -czf "$work/results.tar.gz" "run-$high" "run-$low" "artifact-$high" \
        "artifact-$low" 2>&1
    split -b 15M -d "$work/results.tar.gz" "$out/results.tar.gz."
    (cd "$out" && sha256sum results.tar.gz.* > SHA256SUMS && cat SHA256SUMS) ;;
*) echo "mode must be smoke or train" >&2; exit 2 ;;
esac
echo "== $(date -u +%T) done"
