"""``--plot`` without matplotlib (the environment ``make serve`` builds) is refused before anything is scored, with
the command that installs it; the same job without ``--plot`` runs."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from support.images import fundus_png

# The CLI run in a child whose `import matplotlib` fails, as in a venv without it (sys.modules[...] = None makes
# every import of the name raise ImportError).
WITHOUT_MATPLOTLIB = ("import sys; sys.modules['matplotlib'] = None; from service.batch.cli import main; "
                      "sys.exit(main(sys.argv[1:]))")


def _run(args: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", WITHOUT_MATPLOTLIB, *args], capture_output=True, text=True,
                          timeout=300, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])})


def test_plot_without_matplotlib_is_refused_before_scoring(tmp_path: Path, batch_artifact: Path) -> None:
    folder = tmp_path / "day"
    folder.mkdir()
    for seed in range(2):
        (folder / f"eye{seed}.png").write_bytes(fundus_png(seed=seed))
    out = tmp_path / "day.csv"
    args = ["score", "--input", str(folder), "--output", str(out), "--model-dir", str(batch_artifact),
            "--no-progress"]
    refused = _run([*args, "--plot", str(tmp_path / "day.png")])
    assert refused.returncode == 2, refused.stderr
    assert "--plot needs matplotlib" in refused.stderr and "pip install 'matplotlib>=3.8'" in refused.stderr
    assert "Traceback" not in refused.stderr and "ModuleNotFoundError" not in refused.stderr
    assert not out.exists() and not (tmp_path / "day.png").exists()  # nothing was scored
    done = _run(args)
    assert done.returncode == 0, done.stderr
    assert out.exists()
