"""Step-time model: worked examples, the MoE expert-coverage term against Monte Carlo routing, link types, regimes."""

from __future__ import annotations

import numpy as np
import pytest

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.steptime import StepTimeModel, StepTimeParams


def model_for(preset, gpu="h100-sxm", **kw):
    return StepTimeModel(Deployment(model=load_model(preset), gpu=get_gpu(gpu), **kw))


# Worked examples (hand arithmetic in the comment; defaults mfu 0.5, bw 0.8, overhead 2 ms):
#   llama-3.1-8b bf16, H100 SXM, TP1, one decode at context 1: weights 8,030,261,248 params x 2 B = 16.06 GB;
#   / (3.35e12 x 0.8) = 5.993 ms; + KV 131,072 B (negligible) ; + 2 ms = 7.993 ms.
#   llama-3.1-70b bf16, H100 SXM, TP8, one decode: 70,553,706,496 x 2 / 8 = 17.64 GB / 2.68e12 = 6.582 ms;
#   all-reduce: 160 x (3.6 us + 14 x 0.47 us) = 1.629 ms + 160 x 2 x 7/8 x 16,384 B / 360e9 = 0.013 ms; + 2 ms = 10.224 ms.
@pytest.mark.parametrize("preset,tp,expected_ms", [
    ("llama-3.1-8b", 1, 7.993),
    ("llama-3.1-70b", 8, 10.224),
])
def test_single_decode_step_worked_examples(preset, tp, expected_ms):
    st = model_for(preset, tp=tp)
    assert st.seconds(1, 1, 0, 1, 0, 1) * 1000 == pytest.approx(expected_ms, rel=2e-3)


def test_moe_expected_distinct_experts_matches_random_routing():
    st = model_for("qwen3-30b-a3b")
    e, k = st.num_experts, st.top_k
    rng = np.random.default_rng(0)
    dense_only = st.weight_bytes_touched(1) - st.expert_bytes * k * st.num_moe_layers
    for n in (1, 4, 16, 64, 256):
        trials = []
        for _ in range(300):
            hit = np.zeros(e, dtype=bool)
            for _ in range(n):
                hit[rng.choice(e, size=k, replace=False)] = True
            trials.append(hit.sum())
        mc = float(np.mean(trials))
        modelled = (st.weight_bytes_touched(n) - dense_only) / (st.expert_bytes * st.num_moe_layers)
        assert modelled == pytest.approx(mc, rel=0.03), n
    assert st.weight_bytes_touched(10_000) == pytest.approx(dense_only + st.expert_bytes * e * st.num_moe_layers, rel=1e-6)


def test_decode_is_memory_bound_and_prefill_compute_bound():
    st = model_for("llama-3.1-70b", tp=8)
    one = st.seconds(1, 1000, 0, 1000, 0, 1)
    eight = st.seconds(8, 8000, 0, 8000, 0, 8)
    assert eight < 1.2 * one  # small decode batches ride on the same weight read
    p4k = st.seconds(4096, 4096 * 4097 / 2, 0, 4096, 0, 1)
    p8k = st.seconds(8192, 8192 * 8193 / 2, 0, 8192, 0, 1)
    assert 1.9 < p8k / p4k < 2.3  # large prefills scale with tokens (plus a growing attention term)


def test_pcie_all_reduce_costs_more_than_nvlink():
    nvl = model_for("llama-3.1-70b", "h100-sxm", tp=8)
    pcie = model_for("llama-3.1-70b", "h100-pcie", tp=8)
    assert pcie.comm_seconds(4096) > 5 * nvl.comm_seconds(4096)  # 64 vs 450 GB/s per direction
    assert model_for("llama-3.1-8b", tp=1).comm_seconds(4096) == 0.0


def test_pipeline_parallel_adds_sends_not_speed():
    tp8 = model_for("llama-3.1-70b", tp=8)
    pp2 = model_for("llama-3.1-70b", tp=4, pp=2)
    assert pp2.pp_latency_s > 0 and tp8.pp_latency_s == 0
    # a batch runs through both stages one after another: no faster than TP4 alone on the whole model
    tp4 = model_for("llama-3.1-70b", tp=4)
    assert pp2.seconds(64, 64e3, 0, 64e3, 0, 64) >= tp4.seconds(64, 64e3, 0, 64e3, 0, 64)


def test_fp4_weights_use_fp4_peak_where_the_gpu_has_one():
    bf16 = model_for("llama-3.1-70b", "b200", tp=8)
    fp4 = model_for("llama-3.1-70b", "b200", tp=8, weight_dtype="nvfp4")
    assert fp4.flop_rate == pytest.approx(4 * bf16.flop_rate)
    assert fp4.dense_weight_bytes < 0.3 * bf16.dense_weight_bytes


def test_decode_run_matches_single_steps():
    st = model_for("gemma-3-27b", tp=2)  # sliding-window layers exercise the windowed sums
    ctx = np.array([5, 700, 1023, 1024, 1500, 3000])
    run = st.decode_run_seconds(len(ctx), ctx, 40)
    for j in range(40):
        c = ctx + j
        w = np.minimum(c, st.window)
        single = st.seconds(len(ctx), c.sum(), w.sum(), c.sum(), w.sum(), len(ctx))
        assert run[j] == pytest.approx(single, rel=1e-12)


@pytest.mark.parametrize("field,value", [("mfu", 0.0), ("mfu", 1.5), ("bw_efficiency", -1), ("overhead_s", -0.1)])
def test_bad_constants_are_errors(field, value):
    with pytest.raises(KneecapError) as exc:
        StepTimeParams(**{field: value})
    assert field in exc.value.one_line()


def test_params_round_trip_and_unknown_keys():
    p = StepTimeParams.from_dict({"mfu": 0.4, "overhead_s": 0.003})
    assert StepTimeParams.from_dict(p.to_dict()) == p
    with pytest.raises(KneecapError):
        StepTimeParams.from_dict({"speed": 2})
