"""The decode pool's size: RADSCREEN_DECODE_WORKERS when set; else one thread per core (up to 16) when the
model scores on a GPU, which the CPU's decoding must feed, and 2 on the CPU, where the model needs the cores."""

from __future__ import annotations

import pytest
import torch

from service.model_host import CPU_DECODE_WORKERS, GPU_DECODE_WORKERS_MAX, decode_threads
from service.settings import Settings


def test_a_set_size_is_kept_and_the_cpu_default_is_two() -> None:
    assert decode_threads(5, "cpu") == 5 and decode_threads(5, "cuda") == 5
    assert decode_threads(None, "cpu") == CPU_DECODE_WORKERS == 2


@pytest.mark.parametrize(("cores", "expected"), [(4, 4), (16, 16), (64, GPU_DECODE_WORKERS_MAX)])
def test_on_a_gpu_the_default_follows_the_cores(cores: int, expected: int, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    assert decode_threads(None, "auto") == decode_threads(None, "cuda") == expected


def test_cuda_asked_for_without_a_gpu_sizes_as_for_the_cpu(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    assert decode_threads(None, "cuda") == CPU_DECODE_WORKERS  # the model load reports the missing GPU


def test_the_setting_is_unset_by_default_and_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    assert Settings().decode_workers is None
    monkeypatch.setenv("RADSCREEN_DECODE_WORKERS", "7")
    assert Settings().decode_workers == 7
