"""benchmarks/draws_referral.py: referral by MI against random from saved draws, for each model and the ensemble."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np

from training.evaluation.ensemble import save_draws

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "draws_referral.py"


def _run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], cwd=SCRIPT.parents[1], text=True,
                          capture_output=True, timeout=600, check=False)


def _draws(path: Path, seed: int) -> Path:
    """400 images, 1 in 5 referable: 4 in 5 ranked right with draws that agree (0.8 / 0.2), 1 in 5 ranked
    wrong with draws that disagree (a referable eye's between 0.01 and 0.2, mean 0.105; a non-referable one's
    between 0.8 and 0.99): MI is high exactly on the errors, so referring by MI removes them first."""
    rng = np.random.default_rng(seed)
    labels = (np.arange(400) % 5 == 0).astype(np.int64)
    confused = rng.random(400) < 0.2
    right = np.where(labels == 1, 0.8, 0.2)
    probs = np.tile(right, (16, 1)) + rng.normal(0, 0.005, (16, 400))
    even = np.arange(16)[:, None] % 2 == 0
    wrong = np.where(labels == 1, np.where(even, 0.01, 0.2), np.where(even, 0.8, 0.99))  # [16, 400]
    probs[:, confused] = wrong[:, confused]
    return save_draws(path, np.clip(probs, 0.001, 0.999), labels, [f"eye{i}" for i in range(400)])


def test_mi_referral_beats_random_where_the_draws_disagree_on_the_errors(tmp_path: Path) -> None:
    a, b = _draws(tmp_path / "a.npz", 0), _draws(tmp_path / "b.npz", 0)
    done = _run("--draws", f"a={a}", f"b={b}", "--bootstrap", "200")
    assert done.returncode == 0, done.stderr[-2000:]
    referral, screening = done.stdout.split("\n\n")
    rows = [line for line in referral.splitlines() if line.startswith("| a")]
    assert [r.split("|")[1].strip() for r in rows] == ["a", "a + b"]  # each model, then the ensemble
    cells = [c.strip() for c in rows[0].split("|")[1:-1]]
    gain, low = map(float, re.match(r"([+-][\d.]+) \(([+-][\d.]+),", cells[4]).groups())  # type: ignore[union-attr]
    assert gain > 0.05 and low > 0  # MI − random at 10 % referred: the confused eyes leave first
    # at <= 3 % of referable eyes missed, deferring the confused eyes frees the confident non-referable ones
    none, by_mi = (float(c.strip().split("%")[0]) for c in
                   next(r for r in screening.splitlines() if r.startswith("| a |")).split("|")[2:4])
    assert none < 5 and by_mi > 50
    wrong = _run("--draws", "no-equals-sign")
    assert wrong.returncode == 2 and "NAME=PATH" in wrong.stderr
