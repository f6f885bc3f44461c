"""benchmarks/table1_real.py on a tiny two-source manifest: per-source rows, skip on rerun, re-scoring from the
run directories, and a run of another budget never counted as done.

The script runs as a subprocess (tests do not import benchmarks). One run (radial-s0) makes one finished row;
the other rows must be listed as unfinished, never estimated.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from training.data import read_synthetic
from training.evaluation import evaluate_predictions
from training.evaluation.ensemble import load_draws

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / "benchmarks" / "table1_real.py"


@pytest.fixture(scope="module")
def manifest(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """96 synthetic photographs at 32 px as two sources: even patients 'odir' (normal, other-disease and DR
    categories), odd ones 'eyepacs' (natural copy, and a train-only stretched copy of some)."""
    from training.synthetic.dataset import generate_dataset

    root = tmp_path_factory.mktemp("table1-real")
    generate_dataset(root / "synth", n_images=96, seed=3, size=32, ungradable_fraction=0.0,
                     grade_probs=(0.5, 0.0, 0.5, 0.0, 0.0))
    path = root / "two-sources.csv"
    with path.open("w", newline="") as f:
        out = csv.writer(f)
        out.writerow(["path", "grade", "patient_id", "eye", "source", "copy", "category"])
        for i, row in enumerate(read_synthetic(root / "synth")):
            odd = int(row.patient_id) % 2
            category = "" if odd else "dr_keyword" if row.grade >= 1 else ("normal_fundus" if i % 3 else "other_non_dr")
            base = [row.path, row.grade, row.patient_id, row.eye or ""]
            out.writerow([*base, ("odir", "eyepacs")[odd], "natural-1024" if odd else "", category])
            if odd and i % 4 == 1:
                out.writerow([*base, "eyepacs", "stretched-256", ""])
    return path


def table(manifest: Path, runs: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [sys.executable, str(SCRIPT), "--manifest", str(manifest), "--runs-dir", str(runs), "--budget", "smoke",
           "--split", "0.4", "0.3", "0.3", *extra]
    return subprocess.run(cmd, cwd=ROOT, text=True, capture_output=True, timeout=300, check=False,
                          env={"OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"})


@pytest.mark.training
def test_one_run_makes_its_row_per_source_skips_on_rerun_and_is_rescored_from_its_directory(
        manifest: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    done = table(manifest, runs, "--runs", "radial-s0")
    assert done.returncode == 0, done.stderr[-3000:]
    assert "radial-s0: fitting (new)" in done.stdout and "not every run is fitted yet" in done.stdout
    record = json.loads((runs / "radial-s0" / "table1_run.json").read_text())
    assert record["budget"]["steps_per_epoch"] == 1 and record["cpu_seconds"] > 0

    again = table(manifest, runs, "--runs", "radial-s0")  # rerun: the finished run is skipped, not refitted
    assert again.returncode == 0, again.stderr[-3000:]
    assert "radial-s0: done, skipped" in again.stdout and "fitting" not in again.stdout

    scored = table(manifest, runs, "--table-only")
    assert scored.returncode == 0, scored.stderr[-3000:]
    results = json.loads((runs / "results.json").read_text())
    assert list(results["rows"]) == ["Radial BNN", "Radial BNN, by entropy"]  # the rows whose runs are all done
    assert "Deep ensemble ×3" in results["unfinished"] and results["unfinished"]["MFVI, no tweaks"] == ["mfvi"]
    groups = results["rows"]["Radial BNN"]["groups"]
    assert set(groups) == {"pooled", "odir", "eyepacs"}  # the stretched copy never reaches the test eyes
    assert groups["pooled"]["n"] == groups["odir"]["n"] + groups["eyepacs"]["n"]
    assert (runs / "table1_real.md").read_text().count("Unfinished rows") == 1

    # the pooled row is evaluate_predictions of the run's saved test draws, referring by MI
    draws = load_draws(runs / "radial-s0" / "eval_test" / "draws.npz")
    report = evaluate_predictions(draws.probs, draws.labels, fractions=(0.0, 0.1, 0.2, 0.3, 0.5), n_bootstrap=20,
                                  seed=0)
    np.testing.assert_allclose(groups["pooled"]["auc"], report.curves["mutual_information"].auc)
    assert groups["pooled"]["ece"] == pytest.approx(report.ece)
    # and each source's row is the same evaluation of that source's eyes only (ids: <source>[/<copy>]/<file>)
    assert {i.split("/")[0] for i in draws.ids} == {"odir", "eyepacs"}
    eyepacs = np.array([i.startswith("eyepacs/natural-1024/") and int(i.split("/")[-1].split("_")[0]) % 2 == 1
                        for i in draws.ids])
    for name, sel in (("eyepacs", eyepacs), ("odir", ~eyepacs)):
        part = evaluate_predictions(draws.probs[:, sel], draws.labels[sel], fractions=(0.0, 0.1, 0.2, 0.3, 0.5),
                                    n_bootstrap=20, seed=0)
        assert groups[name]["n"] == int(sel.sum())
        np.testing.assert_allclose(groups[name]["auc"], part.curves["mutual_information"].auc)
        assert groups[name]["ece"] == pytest.approx(part.ece)
    entropy = results["rows"]["Radial BNN, by entropy"]["groups"]["pooled"]
    np.testing.assert_allclose(entropy["auc"], report.curves["predictive_entropy"].auc)
    # with no referral the own ranking and random keep the same eyes: a difference of exactly 0
    assert groups["pooled"]["vs_random"]["auc"]["difference"][0] == pytest.approx(0.0, abs=1e-12)

    (runs / "results.json").unlink()  # the row again, from the run directory alone
    rescored = table(manifest, runs, "--table-only")
    assert rescored.returncode == 0, rescored.stderr[-3000:]
    assert json.loads((runs / "results.json").read_text())["rows"] == results["rows"]

    # a run trained with another budget is not taken as done: no row from it
    other = table(manifest, runs, "--table-only", "--steps-per-epoch", "2")
    assert other.returncode == 0, other.stderr[-3000:]
    results = json.loads((runs / "results.json").read_text())
    assert results["rows"] == {} and results["unfinished"]["Radial BNN"] == ["radial-s0"]

