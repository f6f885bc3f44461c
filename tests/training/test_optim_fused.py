"""The fused Adam update: it is what a run builds where torch has the kernel, it dispatches a few operations
per parameter instead of about fourteen, it computes what the per-parameter update computes, and a checkpoint
written by the per-parameter update resumes on the fused one with its moments intact."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from torch.profiler import ProfilerActivity, profile

from training.checkpoint import TrainState, load_checkpoint, restore, save_checkpoint
from training.config import TrainConfig
from training.loop import build_model
from training.optim import build_optimizer, parameter_groups


def _cfg(**kw: object) -> TrainConfig:
    base: dict[str, object] = dict(data="", out="", width=2, input_size=32, lr=1e-3, rho_lr=5e-2)
    return TrainConfig(**{**base, **kw})  # type: ignore[arg-type]


def _grads(model: torch.nn.Module, seed: int) -> None:
    g = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = torch.randn(p.shape, generator=g)


def _unfused(model: torch.nn.Module, cfg: TrainConfig) -> torch.optim.Optimizer:
    """The update every run used before the fused one (torch's per-parameter Adam on the CPU)."""
    return torch.optim.Adam(parameter_groups(model, cfg), lr=cfg.lr, amsgrad=cfg.amsgrad)


@pytest.mark.parametrize("optimizer", ["adam", "adamw"])
def test_the_cpu_update_is_fused_and_dispatches_a_few_operations_per_parameter(optimizer: str) -> None:
    cfg = _cfg(optimizer=optimizer, weight_decay=0.01)
    model = build_model(cfg)
    opt = build_optimizer(model, cfg)
    assert all(g["fused"] and g["amsgrad"] for g in opt.param_groups)
    _grads(model, 0)
    opt.step()
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        opt.step()
    ops = sum(1 for e in prof.events() if e.name.startswith("aten::") and not e.cpu_children)
    n_params = len(list(model.parameters()))
    assert 0 < ops <= 3 * n_params, f"{ops} operations for {n_params} parameters"  # per-parameter Adam: 14 each


def test_the_fused_update_computes_the_per_parameter_one() -> None:
    cfg = _cfg()
    torch.manual_seed(0)
    a = build_model(cfg)
    b = build_model(cfg)
    b.load_state_dict(a.state_dict())
    fused, plain = build_optimizer(a, cfg), _unfused(b, cfg)
    for step in range(5):
        _grads(a, step)
        _grads(b, step)
        fused.step()
        plain.step()
    for (name, pa), pb in zip(a.named_parameters(), b.parameters(), strict=True):
        torch.testing.assert_close(pa, pb, rtol=1e-5, atol=1e-6, msg=name)


def test_a_checkpoint_of_the_per_parameter_update_resumes_on_the_fused_one(tmp_path: Path) -> None:
    cfg = _cfg()
    torch.manual_seed(1)
    old_model = build_model(cfg)
    old = _unfused(old_model, cfg)
    for step in range(3):
        _grads(old_model, step)
        old.step()
    save_checkpoint(tmp_path, model=old_model, optimizer=old, state=TrainState(),
                    generators={}, config=cfg.to_dict())

    model = build_model(cfg)
    opt = build_optimizer(model, cfg)
    ckpt = load_checkpoint(tmp_path)
    assert ckpt is not None
    restore(ckpt, model=model, optimizer=opt, generators={})
    assert all(g["fused"] for g in opt.param_groups)  # torch's load_state_dict alone would bring back fused=None
    assert [g["lr"] for g in opt.param_groups] == [g["lr"] for g in old.param_groups]
    for p_old, p in zip(old_model.parameters(), model.parameters(), strict=True):
        s_old, s = old.state[p_old], opt.state[p]
        assert s["step"].dtype == torch.float32 and s["step"].device == p.device and float(s["step"]) == 3.0
        for key in ("exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
            assert torch.equal(s[key], s_old[key]), key
    # and it goes on as the per-parameter update would have
    _grads(model, 3)
    _grads(old_model, 3)
    opt.step()
    old.step()
    for p_old, p in zip(old_model.parameters(), model.parameters(), strict=True):
        torch.testing.assert_close(p, p_old, rtol=1e-5, atol=1e-6)

