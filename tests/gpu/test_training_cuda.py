"""Training on CUDA (``gpu``: skipped without a CUDA device): exact resume there, and each precision steps.

On CUDA the trainer uses deterministic cuDNN kernels with TF32 off (models.platform.cuda), so a run interrupted and
resumed must end bitwise equal to an uninterrupted one on the same GPU, as on the CPU.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

from tests.helpers.gpu import GPU
from training.config import TrainConfig
from training.data.prepare import prepare_data
from training.loop import Trainer

pytestmark = [*GPU, pytest.mark.training]


def cuda_config(data: Path, out: Path, **kw: object) -> TrainConfig:
    base: dict[str, object] = dict(data=str(data), out=str(out), device="cuda", width=2, input_size=32, epochs=2,
                                   nll_epochs=1, batch_size=8, eval_samples=2, mc_samples=4, checkpoint_every=100,
                                   n_bootstrap=10, rho_init=-3.0, lr=1e-3, workers=0)
    base.update(kw)
    return TrainConfig(**base)  # type: ignore[arg-type]


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return torch.load(out / "checkpoint.pt", weights_only=True, map_location="cpu")["model"]


def test_resume_on_cuda_matches_an_uninterrupted_cuda_run(tiny_data: Path, tmp_path: Path) -> None:
    full = cuda_config(tiny_data, tmp_path / "full")
    data = prepare_data(full)
    Trainer(full, progress=False).fit(data)
    cut = cuda_config(tiny_data, tmp_path / "cut")
    Trainer(cut, progress=False).fit(data, stop_after_steps=5)
    Trainer(cut, progress=False).fit(data)
    a, b = final_weights(tmp_path / "full"), final_weights(tmp_path / "cut")
    assert a.keys() == b.keys()
    for k in a:
        assert torch.equal(a[k], b[k]), f"{k} differs after resume on CUDA"


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_each_precision_trains_on_cuda(precision: str, tiny_data: Path, tmp_path: Path) -> None:
    from models.platform.cuda import cuda_native_bf16

    if precision == "bf16" and not cuda_native_bf16():
        pytest.skip("this GPU has no native bf16")
    cfg = cuda_config(tiny_data, tmp_path / precision, precision=precision, epochs=1, max_steps_per_epoch=2)
    trainer = Trainer(cfg, progress=False)
    assert trainer.config.precision == precision
    state = trainer.fit()
    assert state.epoch == 1 and math.isfinite(state.history[-1]["train_nll"])
