"""``--runner ray`` on a local Ray instance gives the local runner's rows, and resumes the same way."""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from service.batch.inputs import discover
from service.batch.job import BatchJobConfig, parts_dir_for, run_job, scoring_settings
from service.batch.output import read_output
from service.batch.parts import PartStore
from service.batch.rows import FLOAT_COLUMNS
from service.inference.scoring import Scorer
from service.inference.spec import ScorerSpec

ray: Any = pytest.importorskip("ray", reason="Ray is not installed (pip install 'radial-screen[ray]')")
pytest.importorskip("ray.data", reason="Ray Data is not installed (pip install 'radial-screen[ray]')")

pytestmark = pytest.mark.ray  # starts a local Ray instance; deselect locally with -m "not ray"; CI runs it

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    """A 2-CPU local Ray instance whose workers import this source tree. Its session folder (logs, sockets,
    the object-store spill) goes to a temporary folder of its own, removed with it, not to /tmp/ray where
    every run would leave one behind (Unix socket paths must stay short: a /tmp name, not pytest's)."""
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    temp = tempfile.mkdtemp(prefix="radscreen-ray-")
    try:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False, _temp_dir=temp,
                 runtime_env={"env_vars": {"PYTHONPATH": path, "OMP_NUM_THREADS": "1"}})
        yield
    finally:
        ray.shutdown()
        shutil.rmtree(temp, ignore_errors=True)


def test_ray_runner_matches_local_runner_and_skips_done_rows(
    local_ray: None, make_folder: Callable[..., Path], batch_artifact: Path, batch_scorer: Scorer,
    tmp_path: Path,
) -> None:
    folder = make_folder(7)
    kw: dict[str, Any] = {"spec": ScorerSpec(model_dir=batch_artifact, device="cpu"), "progress": False,
                          "batch_size": 4}
    run_job(BatchJobConfig(input=folder, output=tmp_path / "local.csv", **kw), scorer=batch_scorer)
    local = list(read_output(tmp_path / "local.csv"))

    # a previous (interrupted) run of the same job committed the first three rows
    out = tmp_path / "ray.csv"
    source = discover(folder)
    with PartStore.open(parts_dir_for(out), model_sha256=batch_scorer.model_identity.sha256,
                        input_description=source.description, scoring=scoring_settings(batch_scorer)) as store:
        store.write_part(local[:3])
    result = run_job(BatchJobConfig(input=folder, output=out, runner="ray", **kw), scorer=batch_scorer)
    rows = list(read_output(out))
    assert result.scored_now == 5 and len(rows) == 9  # 7 images, corrupt.jpg, notes.txt (not an image)
    assert rows[:3] == local[:3]  # committed rows are reused, not rescored
    assert [r["id"] for r in rows] == [r["id"] for r in local]
    for got, want in zip(rows, local, strict=True):
        for col, value in want.items():
            if col in FLOAT_COLUMNS and value is not None:
                assert got[col] == pytest.approx(value, abs=1e-6), col  # batch composition may differ
            else:
                assert got[col] == value, col

    # rerun: everything is committed, nothing is sent to Ray again, same file
    before = out.read_bytes()
    again = run_job(BatchJobConfig(input=folder, output=out, runner="ray", **kw), scorer=batch_scorer)
    assert again.scored_now == 0 and out.read_bytes() == before


def test_actors_reserve_a_gpu_and_load_the_device_the_driver_resolved() -> None:
    """Ray hides GPUs from actors that reserve none: with device auto they would score on the CPU while the
    summary says cuda, with device cuda they would fail. Resolved here without Ray or a GPU."""
    from service.batch.ray_runner import RayOptions, actor_placement

    spec = ScorerSpec(device="auto")
    pinned, resources = actor_placement(spec, RayOptions(), gpu_visible=True)
    assert pinned.device == "cuda" and resources == {"num_gpus": 1.0}
    assert actor_placement(ScorerSpec(device="cuda"), RayOptions(gpus_per_actor=0.5))[1] == {"num_gpus": 0.5}
    pinned, resources = actor_placement(spec, RayOptions(), gpu_visible=False)
    assert pinned.device == "cpu" and resources == {}
    assert actor_placement(ScorerSpec(device="cpu"), RayOptions(), gpu_visible=True) == (ScorerSpec(device="cpu"), {})
    for bad in (0.0, 1.5, -1.0):
        with pytest.raises(ValueError, match="gpus_per_actor must be a fraction"):
            RayOptions(gpus_per_actor=bad)
