#!/usr/bin/env bash
# The 2.0.0 recipe: the radial VGG-16* trained on ODIR-5K and EyePACS (docs/training-real-data.md, "Several
# sources"). Rerun the same line to resume: the run checkpoints every 60 steps and at every epoch end, and
# continues exactly where it stopped (training.loop).
#
#   scripts/train-2.0.0.sh RUN_DIR [extra radscreen-train fit flags]
#
# RUN_DIR (outside the repository) receives: init-1.0.0/ (model 1.0.0, the artifact the run starts from, taken
# on the first call from the commit that embedded it: models/default is 2.0.0 now), train/ (checkpoint, history,
# reports) and artifact-2.0.0/. Environment: RADSCREEN_SHARED_DATA (default ../shared/data beside the checkout:
# odir-5k/ and eyepacs-5k/), RADSCREEN_CACHE (the manifest and the preprocessed images; default RUN_DIR/cache),
# PYTHON (default .venv/bin/python), DRY_RUN=1 prints the fit command instead of running it, STRETCHED (the
# EyePACS stretched-256 copy: train = in training only, the recipe's choice; exclude = left out; all = in every
# split) for the with/without comparison, each arm in its own RUN_DIR: the same validation and test patients.
set -euo pipefail
[ $# -ge 1 ] || { echo "usage: $0 RUN_DIR [extra fit flags]" >&2; exit 2; }
run=$(realpath -ms "$1"); shift
cache=$(realpath -ms "${RADSCREEN_CACHE:-$run/cache}")
python=$(realpath -ms "${PYTHON:-$(dirname "$0")/../.venv/bin/python}")
cd "$(dirname "$0")/.."   # python -m runs this checkout's training package
data=$(realpath -ms "${RADSCREEN_SHARED_DATA:-../shared/data}")
manifest=$cache/manifests/odir-eyepacs.csv
case "${STRETCHED:-train}" in
    train) copies=(--train-only-copy stretched-256) ;;
    exclude) copies=(--exclude-copy stretched-256) ;;
    all) copies=() ;;
    *) echo "STRETCHED must be train, exclude or all (got '$STRETCHED')" >&2; exit 2 ;;
esac

fit=(-v fit --layout manifest --data "$manifest" --out "$run/train" --artifact "$run/artifact-2.0.0"
     --name radscreen-radial-vgg16-odir-eyepacs --version 2.0.0
     "${copies[@]}" --source-weight odir=0.5 --source-weight eyepacs=0.5
     --init-from "$run/init-1.0.0" --nll-epochs 0 --epochs 30 --lr 1e-4 --rho-lr 2e-3 --lr-warmup-steps 200
     --lr-schedule cosine --seed 0 --split 0.7 0.15 0.15 --eval-samples 4 --precision auto
     --checkpoint-every 60 --max-missed-share 0.03 --cache-dir "$cache/images-256" "$@")
if [ "${DRY_RUN:-0}" = 1 ]; then
    printf '%q ' "$python" -m training.cli "${fit[@]}"; echo
    exit 0
fi
mkdir -p "$run"
# model 1.0.0 as embedded (models/default from then on holds 2.0.0); needs this checkout's history, not a shallow clone
model_1_0_0=e759bb769258e04954df16afae780b12a662887b
if [ ! -d "$run/init-1.0.0" ]; then
    git cat-file -e "$model_1_0_0^{commit}" 2>/dev/null || {
        echo "commit $model_1_0_0 (model 1.0.0) is not in this checkout: git fetch --unshallow" >&2; exit 2; }
    mkdir -p "$run/init-1.0.0.part"
    git archive "$model_1_0_0" models/default | tar -x -C "$run/init-1.0.0.part" --strip-components=2
    mv "$run/init-1.0.0.part" "$run/init-1.0.0"
fi
grep -q '"version": "1.0.0"' "$run/init-1.0.0/config.json" || {
    echo "$run/init-1.0.0 is not model 1.0.0: the recipe starts from 1.0.0 (copy it there)" >&2; exit 2; }
[ -f "$manifest" ] || "$python" -m training.cli manifest --odir "$data/odir-5k" --eyepacs "$data/eyepacs-5k" \
    --out "$manifest"
exec "$python" -m training.cli "${fit[@]}"
