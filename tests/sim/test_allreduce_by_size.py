"""TP all-reduce by message size: the engine's own kernel up to 8 MiB, NCCL's cost model (its fastest ring protocol,
NVIDIA/nccl src/graph/tuning.cc constants) above; over PCIe beyond two GPUs NCCL for every size."""

from __future__ import annotations

import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.steptime import CUSTOM_ALLREDUCE_MAX_BYTES, StepTimeModel


def model(preset: str, gpu: str, tp: int) -> StepTimeModel:
    return StepTimeModel(Deployment(model=load_model(preset), gpu=get_gpu(gpu), tp=tp))


def test_small_messages_take_the_engine_kernel_and_large_ones_nccls_fastest_protocol():
    m = model("llama-3.1-405b", "h200", 8)  # hidden 16384, 126 layers: 252 all-reduces of tokens x 32 KiB
    n, busbw, ring = 252, 370e9, 2 * 7 / 8
    small = 100 * 16384 * 2
    assert m.comm_seconds(100) == pytest.approx(n * (3.6e-6 + 14 * 0.47e-6 + small * ring / busbw))
    big = 4096 * 16384 * 2
    assert big > CUSTOM_ALLREDUCE_MAX_BYTES
    ll = 6.6e-6 + 14 * 0.6e-6 + big * ring / min(141e9, 0.5 * busbw)  # Hopper's llMaxBw
    ll128 = 14.0e-6 + 14 * 1.9e-6 + big * ring / (0.92 * busbw)
    simple = 8.4e-6 + 14 * 3.4e-6 + big * ring / busbw
    assert simple < ll128 < ll  # at 128 MiB the Simple protocol wins
    assert m.comm_seconds(4096) == pytest.approx(n * simple)
    # NCCL's latency makes the large-message all-reduce dearer than the engine kernel's formula would be
    assert m.comm_seconds(4096) > n * (3.6e-6 + 14 * 0.47e-6 + big * ring / busbw)


def test_pcie_beyond_two_gpus_runs_nccl_at_every_size():
    m = model("llama-3.1-70b", "rtx-pro-6000", 4)  # PCIe: no engine kernel for 4 GPUs
    one = 8192 * 2
    busbw = m.tp_s_per_byte and (m.n_allreduce * 2 * 3 / 4 / m.tp_s_per_byte)
    ll = 6.6e-6 + 6 * 1.0e-6 + one * 1.5 / min(282e9, 0.5 * busbw)
    simple = 8.4e-6 + 6 * 5.7e-6 + one * 1.5 / busbw
    assert m.comm_seconds(1) == pytest.approx(m.n_allreduce * min(ll, simple))
    two = model("llama-3.1-70b", "rtx-pro-6000", 2)  # two GPUs over PCIe: the engine kernel
    assert two.comm_seconds(1) == pytest.approx(two.tp_latency_s + two.tp_s_per_byte * one)
