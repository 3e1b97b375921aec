"""Weight bytes in the ledger: params x dtype, and per part when the model gives a breakdown."""

from __future__ import annotations

import dataclasses

from plan_helpers import make_gqa_70b

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.plan.ledger import build_plan, weights_bytes_per_gpu, weights_total_bytes

GPU = get_gpu("h100-sxm")
# 13e9 params: embed 1e9 + lm_head 1e9 + norms 1e6 (kept as shipped, bf16) + attention 1e9 + routed experts 10e9 - 1e6
PARTS = (
    ("embed", 1_000_000_000),
    ("lm_head", 1_000_000_000),
    ("norms", 1_000_000),
    ("attention", 1_000_000_000),
    ("routed_experts", 9_999_000_000),
)
MOE = make_gqa_70b(
    name="toy-moe",
    total_params=13_000_000_000,
    active_params=4_000_000_000,
    param_parts=PARTS,
    part_dtypes=tuple((p, "bf16") for p, _ in PARTS),
    weight_dtype="bf16",
)


def test_without_a_breakdown_it_is_params_times_dtype():
    dep = Deployment(make_gqa_70b(), GPU, weight_dtype="fp8")
    assert weights_total_bytes(dep) == 70_000_000_000


def test_params_override_wins():
    dep = Deployment(MOE, GPU, weight_dtype="fp8", params_override=5_000_000_000)
    assert weights_total_bytes(dep) == 5_000_000_000


def test_quantizing_keeps_embeddings_norms_and_lm_head_as_shipped():
    # fp8: (1e9 + 1e9 + 1e6) x 2 B + (1e9 + 9.999e9) x 1 B = 4,002,000,000 + 10,999,000,000
    assert weights_total_bytes(Deployment(MOE, GPU, weight_dtype="fp8")) == 15_001_000_000
    # nvfp4 (4.5 bits): 4,002,000,000 + 10,999,000,000 x 4.5 / 8 = 4,002,000,000 + 6,186,937,500
    assert weights_total_bytes(Deployment(MOE, GPU, weight_dtype="nvfp4")) == 10_188_937_500


def test_weights_split_over_tp_and_pp_rounding_up():
    dep = Deployment(make_gqa_70b(), GPU, weight_dtype="fp16", tp=4, pp=3)
    assert weights_bytes_per_gpu(140_000_000_000, dep) == 11_666_666_667  # 140e9 / 12, rounded up


def test_fp8_weights_lever_reprices_per_part():
    from kneecap.plan.levers import compute_levers

    plan = build_plan(Deployment(MOE, get_gpu("mi300x"), weight_dtype="bf16"), context=8192)
    fp8 = next(lv for lv in compute_levers(plan) if lv.name == "fp8-weights")
    base_fp8 = build_plan(dataclasses.replace(plan.deployment, weight_dtype="fp8"), context=8192)
    assert fp8.kv_pool_bytes == base_fp8.ledger.kv_pool_bytes
    assert base_fp8.ledger.weights_bytes == 15_001_000_000
