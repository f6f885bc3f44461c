#!/usr/bin/env bash
# The 2.0.0 recipe at 256 px on a GPU lease, with the arms that decide its data, side by side in one command:
#
#   scripts/gpu_lease_arms.sh OUT [MINUTES]
#
#   full     every training patient of both sources, the EyePACS stretched-256 copy left out (fp32 weights)
#   copy     the same with the stretched-256 copy in training only, for as many steps as `full` (fp32 weights)
#   half     `full` on 50 % of the training patients, as many epochs (the learning curve; fp16 weights)
#   quarter  `full` on 25 % of them
#
# The arms train at once on the one GPU (a 256 px step of batch 128 leaves it mostly idle), each within MINUTES
# (default 8): `fit --time-budget-min` stops at an epoch end and writes the artifact from the best epoch. full
# and copy are served as validation chooses (`--views auto`), and each is put to the ship rule on the
# node (training.ship_check: above the warm start on validation from every source, and no_referable_dr for none
# of the lesion photographs carried in .lease/idrid). Of the two, the arm that passes it with the higher pooled
# validation AUC comes back with its fp32 weights (choice.json says which, why, and whether it ships); the others
# come back without weights. A lease returns about 64 MiB in all, and one fp32 artifact is 58 MiB.
#
# On the node (its own python3, this tree on PYTHONPATH). Reads the crop shards carried in .lease/s256-*/
# (`radscreen-train pack --codec webp-crop --input-size 256 --sides train,val` of the multi-source manifest,
# every copy; their index in .lease/s256-index/) and the warm start .lease/init-fp16
# (scripts/artifact_fp16.py of models/default), and the lesion photographs in .lease/idrid (a copy of
# ../shared/data/idrid-lesion-54, 7 MiB; without them the ship rule is not checked). OUT receives lease.log,
# choice.json and results.tar.gz.NN parts (at most 15 MiB each) with SHA256SUMS; each arm's log is in OUT while it runs and in the parts (logs/)
# at the end, since at most 8 files come back. docs/deploy.md, "GPU lease".
# Environment: PY, WORK (default /tmp/lease-arms), LEASE (default .lease), EPOCHS (default 48: with four arms
# on one H100 the full arm makes about 8 epochs a minute, so 48 end their cosine schedule inside 7 minutes),
# ARMS (default "full copy half quarter"), FIT_EXTRA (more fit options, last: the CPU dry run's tiny model).
set -uo pipefail
out=${1:?usage: $0 OUT [MINUTES]}; minutes=${2:-8}
root=$(cd "$(dirname "$0")/.." && pwd); cd "$root"
# shellcheck source=scripts/lease_lib.sh
. scripts/lease_lib.sh
export PYTHONPATH="$root${PYTHONPATH:+:$PYTHONPATH}" PYTHONUNBUFFERED=1
py=${PY:-python3}; work=${WORK:-/tmp/lease-arms}; lease=${LEASE:-.lease}; epochs=${EPOCHS:-48}
arms=${ARMS:-full copy half quarter}; extra=${FIT_EXTRA:-}
mkdir -p "$out" "$work"
exec > >(tee -a "$out/lease.log") 2>&1
echo "== $(date -u +%FT%TZ) arms [$arms], $epochs epochs, $minutes min each, on $(hostname), $(nproc) cores"
lease_node_check "$py" "$lease"
shards=$work/shards; lease_link_shards "$lease" s256 "$shards"
# the shards that arrived, and how many training images each arm sees an epoch (copy trains for full's steps)
copy_epochs=$("$py" - "$shards" "$lease/s256-index/index.json" "$epochs" <<'PY'
import json, sys
from pathlib import Path
import numpy as np
folder, index, epochs = Path(sys.argv[1]), json.loads(Path(sys.argv[2]).read_text()), int(sys.argv[3])
here = [s for s in index["shards"] if (folder / s["file"]).is_file()]
print(f"shards here: {len(here)} of {len(index['shards'])}, {sum(s['images'] for s in here)} of "
      f"{index['images']} images", file=sys.stderr)
index["shards"] = here
index["images"] = sum(s["images"] for s in here)
(folder / "index.json").write_text(json.dumps(index))
train = {"all": 0, "natural": 0}
for s in here:
    with np.load(folder / s["file"], allow_pickle=False) as shard:
        in_train = shard["side"] == 0
        train["all"] += int(in_train.sum())
        train["natural"] += int((in_train & (shard["copy"] != "stretched-256")).sum())
print(f"training images an epoch: {train['natural']} without the stretched copy, {train['all']} with it",
      file=sys.stderr)
print(max(1, round(epochs * train["natural"] / max(train["all"], 1))))
PY
) || exit 2
echo "copy arm: $copy_epochs epochs (as many steps as full's $epochs)"
common=(--data "$shards" --layout shards --init-from "$lease/init-fp16" --nll-epochs 0 --batch-size 128
        --input-size 256 --lr 5.7e-5 --rho-lr 5.7e-3 --lr-warmup-steps 100 --lr-schedule cosine --kl-weight 1e-4
        --seed 0 --split 0.7 0.15 0.15 --eval-samples 4 --precision auto --max-missed-share 0.03
        --val-every "${VAL_EVERY:-5}" --checkpoint-minutes 3 --workers 4 --no-progress --version 2.0.0
        --time-budget-min "$minutes")
arm_options() {  # the options that make each arm
    case $1 in
    full) echo "--exclude-copy stretched-256 --epochs $epochs --weights-dtype fp32 --views auto" ;;
    copy) echo "--train-only-copy stretched-256 --epochs $copy_epochs --weights-dtype fp32 --views auto" ;;
    half) echo "--exclude-copy stretched-256 --epochs $epochs --train-fraction 0.5 --weights-dtype fp16 --grad-sd-samples 0" ;;
    quarter) echo "--exclude-copy stretched-256 --epochs $epochs --train-fraction 0.25 --weights-dtype fp16 --grad-sd-samples 0" ;;
    *) echo "unknown arm $1" >&2; return 2 ;;
    esac
}
pids=()
for arm in $arms; do
    options=$(arm_options "$arm") || exit 2
    echo "== $(date -u +%T) start $arm: $options"
    # shellcheck disable=SC2086  # the options are words
    "$py" -m training.cli -v fit "${common[@]}" $options --out "$work/run-$arm" --artifact "$work/artifact-$arm" \
        --name "radscreen-radial-vgg16-odir-eyepacs-256px-gpu-$arm" $extra 2>&1 \
        | tr '\r' '\n' | grep --line-buffered -Ev "it/s(, [^]]*)?\]$" > "$out/$arm.log" &
    pids+=($!)
done
failed=0
for pid in "${pids[@]}"; do wait "$pid" || failed=1; done
echo "== $(date -u +%T) arms done (failed: $failed)"
for arm in $arms; do echo "-- $arm"; grep -E "epoch|budget|artifact|Error|error" "$out/$arm.log" | tail -4; done
# the ship rule on each served arm, here where the weights are: above the warm start on validation from every
# source, and no_referable_dr for none of the lesion photographs carried in $lease/idrid (training.ship_check)
for arm in full copy; do
    case " $arms " in *" $arm "*) ;; *) continue ;; esac
    [ -f "$work/artifact-$arm/weights.safetensors" ] || continue
    if [ -d "$lease/idrid" ]; then
        "$py" -m training.ship_check --artifact "$work/artifact-$arm" --run "$work/run-$arm" --photos "$lease/idrid" \
            --out "$work/run-$arm/ship_check.json" --workers 4 > /dev/null \
            || echo "ship check of $arm failed (see above)"
        "$py" - "$work/run-$arm/ship_check.json" "$arm" <<'PY' || true
import json, sys
c = json.load(open(sys.argv[1]))
print(f"{sys.argv[2]}: ships {c['ships']} (above the warm start on every source: {c['beats_start']}; "
      f"no_referable_dr for {len(c['no_referable_dr'])} of {c['photos']} lesion photographs "
      f"{' '.join(c['no_referable_dr'])})")
PY
    else
        echo "no lesion photographs at $lease/idrid: the ship rule's photograph half is not checked on the node"
    fi
done
# which data recipe comes back whole: of the served arms that pass the ship rule (all of them when it was not
# checked), the one with the higher pooled validation AUC; none passing, the higher AUC, marked as not shippable
"$py" - "$work" "$out/choice.json" $arms <<'PY'
import json, sys
from pathlib import Path
work, target, arms = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3:]
rows = {}
for arm in arms:
    run, artifact = work / f"run-{arm}", work / f"artifact-{arm}"
    history = json.loads((run / "history.json").read_text()) if (run / "history.json").is_file() else []
    scored = [h for h in history if h.get("val_auc") is not None]
    best = min(scored, key=lambda h: h["val_nll"]) if scored else None
    rows[arm] = {"artifact": (artifact / "weights.safetensors").is_file(), "epochs_done": len(history) - 1,
                 "kept_epoch": best and best["epoch"], "val_auc": best and best["val_auc"],
                 "val_nll": best and best["val_nll"],
                 **{k: best[k] for k in (best or {}) if k.startswith(("val_auc/", "val_n/"))}}
served = [a for a in ("full", "copy") if rows.get(a, {}).get("artifact")]
for arm in served:
    check = work / f"run-{arm}" / "ship_check.json"
    rows[arm]["ship_check"] = json.loads(check.read_text()) if check.is_file() else None
checked = [a for a in served if rows[a]["ship_check"] is not None]
passing = [a for a in checked if rows[a]["ship_check"]["ships"]]
pool = passing or served
chosen = max(pool, key=lambda a: rows[a]["val_auc"]) if pool else None
ships = None if not checked else bool(chosen in passing)
choice = {"chosen": chosen, "ships": ships,
          "rule": "of full and copy, those that pass the ship rule (training.ship_check; every served arm when no "
                  "lesion photographs were carried), the higher pooled validation AUC at the kept epoch",
          "arms": rows}
target.write_text(json.dumps(choice, indent=2) + "\n")
print(json.dumps(choice, indent=2))
PY
chosen=$("$py" -c 'import json,sys; print(json.load(open(sys.argv[1]))["chosen"] or "")' "$out/choice.json")
items=(); for arm in $arms; do for d in run artifact; do [ -d "$work/$d-$arm" ] && items+=("$d-$arm"); done; done
excludes=(--exclude='checkpoint*' --exclude=best.safetensors --exclude=draws.npz)
for arm in $arms; do [ "$arm" = "$chosen" ] || excludes+=(--exclude="artifact-$arm/weights.safetensors"); done
mkdir -p "$work/logs" && mv "$out"/{full,copy,half,quarter}.log "$work/logs/" 2>/dev/null  # 8 files come back
tar -C "$work" "${excludes[@]}" -czf "$work/results.tar.gz" logs "${items[@]}"
split -b 15M -d "$work/results.tar.gz" "$out/results.tar.gz."
(cd "$out" && sha256sum results.tar.gz.* > SHA256SUMS && cat SHA256SUMS)
echo "== $(date -u +%T) done"
exit $failed
