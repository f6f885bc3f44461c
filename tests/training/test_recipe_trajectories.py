"""``python -m training.trajectories``: summary lines from run histories and a PNG with one line per run."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from training.trajectories import main


def _run(tmp: Path, name: str, sigmas: list[float]) -> Path:
    run = tmp / name
    run.mkdir()
    rows = [{"epoch": i + 1, "phase": "nll_means" if i == 0 else "elbo", "sigma/all/mean": s,
             "sigma/all/q05": s * 0.9, "sigma/all/q95": s * 1.1, "train_nll": 0.6 + i, "kl_per_example": 100.0 - i,
             "grad_sd_mu": 1e-3 * (i + 1), "rho_budget_ratio": None if i == 0 else 0.5} for i, s in enumerate(sigmas)]
    (run / "history.json").write_text(json.dumps(rows))
    return run


def test_summarises_from_the_first_elbo_epoch_and_writes_a_png(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]) -> None:
    a, b = _run(tmp_path, "a", [0.02, 0.03, 0.05]), _run(tmp_path, "b", [0.02, 0.04, 0.04])
    out = tmp_path / "fig.png"
    assert main([str(a), str(b), "--labels", "radial", "mfvi", "--out", str(out)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("radial: σ 0.03 -> 0.05, train NLL 1.600 -> 2.600, KL/N 99 -> 98")
    assert lines[1].startswith("mfvi: σ 0.04 -> 0.04")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_the_summary_names_the_per_layer_ratio_range(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    run = _run(tmp_path, "a", [0.02, 0.03, 0.05])
    rows = json.loads((run / "history.json").read_text())
    rows[-1].update({"rho_ratio/features.0": 0.31, "rho_ratio/features.28": 0.97, "rho_ratio/head": 0.6})
    (run / "history.json").write_text(json.dumps(rows))
    assert main([str(run), "--out", str(tmp_path / "fig.png")]) == 0
    assert "Δρ/(lr·steps) 0.500 (per layer 0.310 features.0 to 0.970 features.28)" in capsys.readouterr().out


def test_refuses_a_folder_without_history(tmp_path: Path) -> None:
    with pytest.raises(SystemExit, match=r"no history\.json"):
        main([str(tmp_path), "--out", str(tmp_path / "x.png")])
