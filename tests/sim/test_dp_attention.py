"""Attention data parallelism as the engines run it: each rank schedules its own requests (a prompt runs on the one
rank it was given), the ranks meet at every MoE layer, TensorRT-LLM's batch limits are per rank, and its MoE moves
tokens by all-gather and reduce-scatter."""

from __future__ import annotations


import pytest

from kneecap.deployment import Deployment
from kneecap.hardware import get_gpu
from kneecap.model import load_model
from kneecap.sim.steptime import StepTimeModel


def dp_model(preset="qwen3-235b-a22b", gpu="h100-sxm", tp=8, **kw):
    return StepTimeModel(Deployment(model=load_model(preset), gpu=get_gpu(gpu), tp=tp, weight_dtype="fp8"), **kw)


def test_a_prompt_runs_on_one_rank_and_the_others_wait_for_it():
    dp = dp_model(dp_attention=True)
    decodes, prompt = 800, 1000
    ctx = 1500
    # one prompt of 1000 tokens plus 800 decodes: the prompt's rank does its attention side alone
    one = dp.seconds(
        decodes + prompt,
        decodes * ctx + prompt * (prompt + 1) / 2,
        0,
        decodes * ctx + prompt,
        0,
        decodes + 1,
        num_decodes=decodes,
        decode_kv_full=decodes * ctx,
        decode_kv_window=0,
    )
    # the same tokens as eight prompts of 125: one on each rank, the even share
    eight = dp.seconds(
        decodes + prompt,
        decodes * ctx + 8 * 125 * 126 / 2,
        0,
        decodes * ctx + prompt,
        0,
        decodes + 8,
        num_decodes=decodes,
        decode_kv_full=decodes * ctx,
        decode_kv_window=0,
    )
    assert one > eight + 0.005  # the attention projections of 875 more tokens on one H100 (13 GFLOP a token)
    assert dp._dp_busiest(decodes + prompt, decodes + 1, decodes) == (decodes / 8 + prompt, 1.0)
    assert dp._dp_busiest(decodes + prompt, decodes + 8, decodes) == (decodes / 8 + prompt / 8, 1.0 / 8)


def test_decode_steps_and_tensor_parallel_attention_keep_the_even_share():
    dp = dp_model(dp_attention=True)
    assert dp._dp_busiest(512, 512, 512) == (None, None)
    tp = dp_model()
    assert tp._dp_busiest(1512, 513, 512) == (None, None)


def test_tensorrt_llm_gathers_every_ranks_tokens_for_the_moe_off_gb200():
    from kneecap.sim.config import SGLANG_PROFILE, TRTLLM_PROFILE
    from kneecap.sim.steptime import moe_dp_gathers

    dp = dp_model(dp_attention=True)
    trt = dp.for_engine(TRTLLM_PROFILE)
    h, layers, busbw = 4096, 94, 370e9  # Qwen3-235B-A22B; H100 SXM's all-reduce bus bandwidth (efficiency.json)
    # all-gather of FP8 activations with 8 expert ids and weights (8 B each), reduce-scatter of bf16 outputs, 7/8 of
    # every token through each rank's ring
    per_token = layers * (h * 1.0 + 8 * 8 + 2 * h) * 7 / 8 / busbw
    assert trt.moe_gathers and trt.a2a_s_per_token == pytest.approx(per_token, rel=1e-9)
    # the all-to-all sends each rank's own tokens' 8 copies there and back: more bytes than the gather at top-k = ep
    assert dp.a2a_s_per_token > 1.2 * trt.a2a_s_per_token
    assert trt.comm_seconds(2000) < dp.comm_seconds(2000)
    assert not dp.for_engine(SGLANG_PROFILE).moe_gathers  # SGLang's DP attention keeps the all-to-all
    # the NVLink all-to-all only on a multi-node NVLink system and an EP group larger than top-k
    assert moe_dp_gathers("allgather", "b200", 8, 8) and moe_dp_gathers("allgather", "gb200", 8, 8)
    assert not moe_dp_gathers("allgather", "gb200", 16, 8) and not moe_dp_gathers("", "h100-sxm", 8, 8)


def test_trtllm_bench_limits_are_each_attention_dp_ranks():
    from dataclasses import replace

    from kneecap.sim.config import trtllm_bench_limits

    d = Deployment(model=load_model("qwen3-235b-a22b"), gpu=get_gpu("h100-sxm"), tp=8, weight_dtype="fp8")
    seqs, tokens = trtllm_bench_limits(d, 1000, 1000)
    assert trtllm_bench_limits(replace(d, dp_attention=True), 1000, 1000) == (8 * seqs, 8 * tokens)
