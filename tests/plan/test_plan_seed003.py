"""Seed 003, one row per number it prints: every one must come out of the planner exactly.

The expected values are the seed's literals; the test never recomputes a formula.
"""

from __future__ import annotations

import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.plan.ledger import build_plan
from kneecap.plan.levers import compute_levers
from kneecap.plan.sweeps import context_sweep, tp_sweep
from kneecap.units import GiB, MiB


@pytest.fixture(scope="module")
def seed(gqa_70b):
    """Printed figures of the seed's command, as strings formatted the way the seed prints them."""
    dep = Deployment(gqa_70b, get_gpu("mi300x"), weight_dtype="fp16", kv_dtype="fp16")
    plan = build_plan(dep, context=8192, mean_context=2050, compute_batch_cap=128)
    levers = {lv.name: lv for lv in compute_levers(plan)}
    tps = {p.tp: p for p in tp_sweep(plan)}
    ctx = {c.context: c for c in context_sweep(plan)}
    L = plan.ledger
    g = lambda b: f"{b / GiB:.2f}"  # noqa: E731
    pct = lambda b: f"{100 * b / L.hbm_bytes:.1f}"  # noqa: E731
    return {
        "kv_bytes_per_token": plan.kv_bytes_per_token,
        "kv_KiB_per_token": plan.kv_bytes_per_token // 1024,
        "seq_8192_GiB": g(plan.kv_bytes_per_token * 8192),
        "hbm_bytes": L.hbm_bytes,
        "hbm_GiB": g(L.hbm_bytes),
        "weights_bytes": L.weights_bytes,
        "weights_GiB": g(L.weights_bytes),
        "weights_pct": pct(L.weights_bytes),
        "overhead_GiB": g(L.overhead_bytes),
        "overhead_pct": pct(L.overhead_bytes),
        "frag_GiB": g(L.fragmentation_bytes),
        "frag_pct": pct(L.fragmentation_bytes),
        "pool_GiB": g(L.kv_pool_bytes),
        "pool_pct": pct(L.kv_pool_bytes),
        "pool_e9": f"{L.kv_pool_bytes / 1e9:.2f}",
        "contiguous_seq_GiB": g(plan.seq_bytes_contiguous),
        "max_seqs_contiguous": plan.max_seqs_contiguous,
        "paged_seq_slots": plan.seq_bytes_paged // plan.kv_bytes_per_token_per_gpu,
        "paged_seq_GiB": g(plan.seq_bytes_paged),
        "max_seqs_paged": plan.max_seqs_paged,
        "contiguous_waste_GiB": g(plan.contiguous_waste_bytes),
        "contiguous_waste_pct": f"{100 * plan.contiguous_waste_fraction:.1f}",
        "paged_waste_pct": f"{100 * plan.paged_waste_bytes / plan.seq_bytes_paged:.2f}",
        "paged_waste_bound_tokens": plan.paged_waste_bound_tokens,
        "paged_waste_bound_MiB": f"{plan.paged_waste_bound_bytes / MiB:.2f}",
        "binding": plan.binding,
        "max_concurrency": plan.max_concurrency,
        "fp8_weights_seqs": levers["fp8-weights"].max_seqs,
        "fp8_weights_pool_GiB": g(levers["fp8-weights"].kv_pool_bytes),
        "fp8_kv_seqs": levers["fp8-kv"].max_seqs,
        "fp8_kv_pool_GiB": g(levers["fp8-kv"].kv_pool_bytes),
        "both_seqs": levers["fp8-weights+fp8-kv"].max_seqs,
        "more_gpus_seqs": levers["more-gpus"].max_seqs,
        "tp1_seqs": tps[1].max_seqs,
        "tp1_heads": tps[1].kv_heads_per_gpu,
        "tp8_seqs": tps[8].max_seqs,
        "tp8_pool_GiB": g(tps[8].kv_pool_bytes),
        "tp8_heads": tps[8].kv_heads_per_gpu,
        "tp8_replicated": tps[8].replicated,
        "tp8_kv_KiB_per_token": tps[8].kv_bytes_per_token_per_gpu // 1024,
        "tp16_seqs": tps[16].max_seqs,
        "tp16_pool_GiB": g(tps[16].kv_pool_bytes),
        "tp16_heads": tps[16].kv_heads_per_gpu,
        "tp16_replicated": tps[16].replicated,
        "ctx128k_contiguous": ctx[131072].contiguous,
        "ctx128k_paged": ctx[131072].paged,
        "ctx128k_seq_GiB": g(ctx[131072].seq_bytes_contiguous),
    }


SEED_003 = [
    ("kv_bytes_per_token", 327_680),
    ("kv_KiB_per_token", 320),
    ("seq_8192_GiB", "2.50"),
    ("hbm_bytes", 192_000_000_000),
    ("hbm_GiB", "178.81"),
    ("weights_bytes", 140_000_000_000),
    ("weights_GiB", "130.39"),
    ("weights_pct", "72.9"),
    ("overhead_GiB", "4.00"),
    ("overhead_pct", "2.2"),
    ("frag_GiB", "2.22"),
    ("frag_pct", "1.2"),
    ("pool_GiB", "42.21"),
    ("pool_pct", "23.6"),
    ("pool_e9", "45.32"),
    ("contiguous_seq_GiB", "2.50"),
    ("max_seqs_contiguous", 16),
    ("paged_seq_slots", 2064),
    ("paged_seq_GiB", "0.63"),
    ("max_seqs_paged", 67),
    ("contiguous_waste_GiB", "1.87"),
    ("contiguous_waste_pct", "75.0"),
    ("paged_waste_pct", "0.68"),
    ("paged_waste_bound_tokens", 15),
    ("paged_waste_bound_MiB", "4.69"),
    ("binding", "hbm"),
    ("max_concurrency", 67),
    ("fp8_weights_seqs", 165),
    ("fp8_weights_pool_GiB", "104.14"),
    ("fp8_kv_seqs", 134),
    ("fp8_kv_pool_GiB", "42.21"),
    ("both_seqs", 330),
    ("more_gpus_seqs", 1912),
    ("tp1_seqs", 67),
    ("tp1_heads", 8),
    ("tp8_seqs", 1912),
    ("tp8_pool_GiB", "150.59"),
    ("tp8_heads", 1),
    ("tp8_replicated", False),
    ("tp8_kv_KiB_per_token", 40),
    ("tp16_seqs", 2010),
    ("tp16_pool_GiB", "158.33"),
    ("tp16_heads", 1),
    ("tp16_replicated", True),
    ("ctx128k_contiguous", 1),
    ("ctx128k_paged", 67),
    ("ctx128k_seq_GiB", "40.00"),
]


@pytest.mark.parametrize("name,expected", SEED_003, ids=[row[0] for row in SEED_003])
def test_seed_003_number(seed, name, expected):
    assert seed[name] == expected


def test_prefix_sharing_lever_by_hand(gqa_70b):
    # 1000 shared tokens -> 62 whole blocks stored once = 62 x 16 x 327,680 = 325,058,560 B
    # per sequence: 676,331,520 - 325,058,560 = 351,272,960 B
    # (45,319,781,069 - 325,058,560) // 351,272,960 = 128
    dep = Deployment(gqa_70b, get_gpu("mi300x"), weight_dtype="fp16", kv_dtype="fp16")
    plan = build_plan(dep, context=8192, mean_context=2050, compute_batch_cap=128)
    lever = {lv.name: lv for lv in compute_levers(plan, prefix_tokens=1000)}["prefix-sharing"]
    assert lever.max_seqs == 128
