"""CUDA math settings (models.platform.cuda): fp32 is IEEE fp32 on CUDA, bf16 counts only when native, cuDNN is
deterministic for training. The flags are plain torch settings, so all of this runs without a GPU."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import torch

from models.platform.cuda import (
    MathFlags,
    apply_math_flags,
    cuda_native_bf16,
    current_math_flags,
    ieee_fp32_in_force,
    use_deterministic_cudnn,
    use_ieee_fp32,
)

TF32_AUTOTUNED = MathFlags(conv_fp32="tf32", matmul_fp32="tf32", cudnn_benchmark=True, cudnn_deterministic=False)


@pytest.fixture
def torch_defaults() -> Iterator[None]:
    """Start from torch's defaults (TF32 allowed, autotuned cuDNN) and restore whatever was set."""
    saved = current_math_flags()
    apply_math_flags(TF32_AUTOTUNED)
    yield
    apply_math_flags(saved)


@pytest.mark.usefixtures("torch_defaults")
def test_fp32_on_cuda_switches_tf32_off_and_cpu_leaves_the_flags_alone() -> None:
    assert not ieee_fp32_in_force()
    use_ieee_fp32("cpu")
    assert not ieee_fp32_in_force()
    use_ieee_fp32(torch.device("cuda", 0))
    assert ieee_fp32_in_force()


@pytest.mark.usefixtures("torch_defaults")
def test_the_torch_backend_pins_ieee_fp32_before_it_moves_the_network_to_cuda() -> None:
    from models.nn.draws import materialise_draws
    from models.nn.vgg import VGGConfig, build_vgg16_star
    from service.inference.backends import TorchBackend

    net = materialise_draws(build_vgg16_star(VGGConfig(width=2, input_size=32)), mc_samples=2, seed=0)
    if torch.cuda.is_available():
        TorchBackend(net, device="cuda", precision="fp32")
    else:  # no GPU: moving the network fails, after the flags were set
        with pytest.raises((AssertionError, RuntimeError)):
            TorchBackend(net, device="cuda", precision="fp32")
    assert ieee_fp32_in_force()


@pytest.mark.usefixtures("torch_defaults")
def test_training_on_cuda_uses_deterministic_cudnn() -> None:
    use_deterministic_cudnn("cpu")
    assert torch.backends.cudnn.benchmark and not torch.backends.cudnn.deterministic
    use_deterministic_cudnn("cuda")
    assert torch.backends.cudnn.deterministic and not torch.backends.cudnn.benchmark


def test_bf16_counts_only_when_native() -> None:
    def emulating(including_emulation: bool = True) -> bool:  # torch's answer on a T4 / V100
        return including_emulation

    assert not cuda_native_bf16(lambda: True, emulating)
    assert cuda_native_bf16(lambda: True, lambda including_emulation=True: True)  # an A100 / H100
    assert not cuda_native_bf16(lambda: False, lambda including_emulation=True: True)  # no GPU visible
