"""Qualitative checks of the simulated engine (issue 4, item 6): the shapes a serving engineer expects.

Small request counts keep these fast; each level is a fresh engine.
"""

from __future__ import annotations

import dataclasses

import pytest
from simkit import sim_of

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.metrics.knee import gain_per_doubling
from kneecap.metrics.summarize import summarize_level
from kneecap.model import load_model
from kneecap.plan.ledger import build_plan
from kneecap.sim.config import EngineConfig, sglang_defaults, vllm_defaults
from kneecap.sim.sweep import LevelSpec, simulate_level
from kneecap.workload import Workload


def sweep(deployment, config, num_blocks, isl, osl, levels, requests=lambda c: 3 * c):
    out = []
    for c in levels:
        res = simulate_level(
            sim_of(deployment, config, num_blocks),
            Workload.fixed(isl, osl),
            LevelSpec(concurrency=c, num_requests=requests(c)),
        )
        level = summarize_level(res.records, concurrency=c)
        level["server_metrics"] = res.server_metrics
        out.append(level)
    return out


@pytest.fixture(scope="module")
def llama8b():
    return Deployment(model=load_model("llama-3.1-8b"), gpu=get_gpu("h100-sxm"), tp=1)


def test_saturates_at_the_kv_capacity_in_sequences(llama8b):
    # a pool that holds exactly 300 sequences of 200 + 200 tokens; the sequence cap is far above it
    num_blocks = 300 * 400 // 16
    levels = sweep(
        llama8b,
        EngineConfig(max_num_seqs=2048, max_num_batched_tokens=8192),
        num_blocks,
        200,
        200,
        [64, 128, 256, 300, 512, 1024],
    )
    tput = {lv["concurrency"]: lv["output_tok_s"] for lv in levels}
    peak = max(tput, key=tput.get)
    assert peak == 300  # min(max_num_seqs, KV capacity / tokens per request) = min(2048, 300)
    assert gain_per_doubling(256, tput[256], 1024, tput[1024]) < 0.10  # past it, climbing stops paying


def test_saturates_at_max_num_seqs_when_it_binds(llama8b):
    levels = sweep(
        llama8b, EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192), 200_000, 200, 200, [16, 32, 64, 128, 256]
    )
    tput = {lv["concurrency"]: lv["output_tok_s"] for lv in levels}
    assert tput[32] > 1.3 * tput[16] and tput[64] > 1.3 * tput[32]  # still climbing below the cap
    assert tput[128] == pytest.approx(tput[64], rel=0.05) and tput[256] == pytest.approx(tput[64], rel=0.05)
    assert all(lv["server_metrics"]["running_max"] <= 64 for lv in levels)
    assert all(lv["server_metrics"]["preemptions"] == 0 for lv in levels)


def test_preemption_appears_when_kv_runs_out_and_throughput_falls(llama8b):
    # compute-bound decode (batches of ~300 x 8B on one H100): recomputing preempted sequences is pure loss
    num_blocks = 300 * 400 // 16
    levels = sweep(
        llama8b,
        EngineConfig(max_num_seqs=2048, max_num_batched_tokens=8192),
        num_blocks,
        200,
        200,
        [256, 300, 384, 512, 1024],
    )
    by_c = {lv["concurrency"]: lv for lv in levels}
    assert by_c[256]["server_metrics"]["preemptions"] == 0 and by_c[300]["server_metrics"]["preemptions"] == 0
    for c in (384, 512, 1024):
        assert by_c[c]["server_metrics"]["preemptions"] > 0
        assert by_c[c]["server_metrics"]["kv_usage_max"] == 1.0
        assert by_c[c]["output_tok_s"] < 0.95 * by_c[300]["output_tok_s"]  # falls, not just flattens (5%+)


def test_memory_bound_preemption_flattens_instead(llama8b):
    # the honest other half: when decode is memory-bound (24 sequences of 1000 + 1000), a bigger batch pays
    # for the recomputation, so throughput flattens past the pool instead of falling
    num_blocks = 24 * 2000 // 16
    levels = sweep(
        llama8b,
        EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192),
        num_blocks,
        1000,
        1000,
        [24, 48, 96],
        requests=lambda c: max(2 * c, 48),
    )
    by_c = {lv["concurrency"]: lv for lv in levels}
    assert by_c[24]["server_metrics"]["preemptions"] == 0 and by_c[96]["server_metrics"]["preemptions"] > 0
    assert by_c[96]["output_tok_s"] == pytest.approx(by_c[24]["output_tok_s"], rel=0.15)


def test_ttft_grows_with_queue_depth_past_the_knee(llama8b):
    levels = sweep(
        llama8b, EngineConfig(max_num_seqs=64, max_num_batched_tokens=8192), 200_000, 500, 200, [64, 128, 256, 512]
    )
    waits = [lv["server_metrics"]["waiting_max"] for lv in levels]
    ttft = [lv["ttft_ms"]["p50"] for lv in levels]
    assert waits == sorted(waits) and waits[-1] > waits[0]
    for a, b in zip(ttft, ttft[1:]):
        assert b > 1.5 * a  # every doubling past the knee at least adds half again to the median TTFT


def test_tp_beyond_kv_heads_buys_little_kv():
    model, gpu = load_model("llama-3.1-70b"), get_gpu("h100-sxm")  # 8 KV heads
    plans = {tp: build_plan(Deployment(model=model, gpu=gpu, tp=tp), context=4096) for tp in (4, 8, 16)}
    cap = {tp: p.kv_capacity_tokens for tp, p in plans.items()}
    assert cap[8] / cap[4] > 2.0  # below the KV-head count, TP shards the cache and frees weight memory
    assert cap[16] / cap[8] < 1.25  # beyond it every rank keeps a whole head: twice the GPUs, little more KV
    # the simulator sees the same: all requests at once, concurrency limited only by the pool
    config = EngineConfig(max_num_seqs=4096, max_num_batched_tokens=8192)
    running = {}
    for tp in (8, 16):
        p = plans[tp]
        res = simulate_level(
            sim_of(p.deployment, config, p.num_kv_blocks),
            Workload.fixed(2000, 2000),
            LevelSpec(all_at_once=True, num_requests=900),
        )
        running[tp] = res.server_metrics["running_max"]
    assert running[8] < 900  # the pool, not the request count, binds
    assert running[16] < 1.3 * running[8]


SEEDS = [
    # (preset, extra deployment args): seed 000/002 (Qwen3.5-397B NVFP4, bf16 KV) and seed 001 (Kimi-K2.5 NVFP4)
    ("qwen3.5-397b-a17b", {"kv_dtype": "bf16"}),
    ("kimi-k2.5", {}),
]


@pytest.mark.slow
@pytest.mark.parametrize("preset,extra", SEEDS)
def test_seed_cases_run_and_show_where_they_break(preset, extra):
    model, gpu = load_model(preset), get_gpu("rtx-pro-6000")
    d = Deployment(model=model, gpu=gpu, tp=8, weight_dtype="nvfp4", **extra)
    # Qwen3.5 without prefix caching (1 state block per DeltaNet group, as the seed's figures assume; see below)
    prefix_caching = preset != "qwen3.5-397b-a17b"
    plan = build_plan(d, context=2000, prefix_caching=prefix_caching)
    config = dataclasses.replace(
        vllm_defaults(gpu.memory_bytes("device"), gpu.name), enable_prefix_caching=prefix_caching
    )
    assert gpu.interconnect == "pcie"  # 8x RTX PRO 6000: no NVLink
    levels = sweep(d, config, plan.num_kv_blocks, 1000, 1000, [1, 16, 64, 256, 1024], requests=lambda c: max(c, 16))
    by_c = {lv["concurrency"]: lv for lv in levels}
    assert all(lv["failed"] == 0 and lv["completed"] == lv["requests"] for lv in levels)
    tput = [lv["output_tok_s"] for lv in levels]
    assert tput[1] > 3 * tput[0]  # batching pays at first (MoE: more experts touched per step, so less than 16x)
    if preset == "kimi-k2.5":
        # seed 001: "a 1T model, so very high concurrency levels like 1024 aren't realistic" — the MLA latent is
        # replicated on every rank, the pool holds ~258k tokens: C=256 already exhausts it
        assert plan.kv_capacity_tokens < 256 * 2000
        assert by_c[64]["server_metrics"]["preemptions"] == 0
        assert by_c[256]["server_metrics"]["preemptions"] > 0 and by_c[256]["server_metrics"]["kv_usage_max"] == 1.0
        assert gain_per_doubling(256, by_c[256]["output_tok_s"], 1024, by_c[1024]["output_tok_s"]) < 0.10
    else:
        # seed 000/002: the ledger's pool holds C=1024 x 2000 tokens (plus the DeltaNet state); the break is
        # latency: TPOT rises several-fold between C=64 and C=1024 while throughput gains flatten. With vLLM 0.32's
        # default prefix caching each of the 3 DeltaNet groups keeps 2 state blocks per request: 4 + 3 x 2 = 10
        # blocks of 528 tokens per 2000-token request instead of 4 + 3 = 7, so then 1,024 x 2,000 no longer fit
        assert plan.kv_capacity_tokens > 1024 * 2000 > build_plan(d, context=2000).kv_capacity_tokens
        assert by_c[1024]["server_metrics"]["preemptions"] == 0
        assert by_c[1024]["tpot_ms"]["p50"] > 3 * by_c[64]["tpot_ms"]["p50"]
        assert gain_per_doubling(256, by_c[256]["output_tok_s"], 1024, by_c[1024]["output_tok_s"]) < gain_per_doubling(
            16, by_c[16]["output_tok_s"], 64, by_c[64]["output_tok_s"]
        )


def test_seed_000_with_the_engine_logged_pool_breaks_at_1024():
    # seed 000: SGLang reported 1,573,854 tokens with bf16 KV; 512 x 2000 fits, 1024 x 2000 does not
    model, gpu = load_model("qwen3.5-397b-a17b"), get_gpu("rtx-pro-6000")
    d = Deployment(model=model, gpu=gpu, tp=8, weight_dtype="nvfp4", kv_dtype="bf16")
    num_blocks = 1_573_854 // 16
    config = sglang_defaults(gpu.memory_bytes("device"), num_blocks * 16, 262144)
    out = {}
    for c in (512, 1024):
        res = simulate_level(
            sim_of(d, config, num_blocks, charge_state=False),
            Workload.fixed(1000, 1000),
            LevelSpec(concurrency=c, num_requests=c),
        )
        out[c] = res.server_metrics
    assert out[512]["preemptions"] == 0 and out[512]["kv_usage_max"] < 0.7
    assert out[1024]["kv_usage_max"] == 1.0 and out[1024]["preemptions"] > 0


def test_pipeline_stages_scale_prefill_heavy_throughput():
    # as vLLM V1 runs PP (pipeline_parallel_size micro-batches in flight), compute-bound work keeps every stage
    # busy: Llama-3.1-70B TP2 with 2 and 4 stages nearly doubles and quadruples 2000-in / 20-out throughput
    model = load_model("llama-3.1-70b")
    tput = {}
    for pp in (1, 2, 4):
        d = Deployment(model=model, gpu=get_gpu("h100-sxm"), tp=2, pp=pp)
        res = simulate_level(
            sim_of(d, EngineConfig(max_num_seqs=256, max_num_batched_tokens=8192), 200_000),
            Workload.fixed(2000, 20),
            LevelSpec(concurrency=64, num_requests=128),
        )
        tput[pp] = summarize_level(res.records, concurrency=64)["output_tok_s"]
    assert tput[2] > 1.8 * tput[1] and tput[4] > 3.3 * tput[1]
