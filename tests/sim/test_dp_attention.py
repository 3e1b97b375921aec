"""Attention data parallelism as the engines run it: each rank schedules its own requests (a prompt runs on the one
rank it was given), the ranks meet at every MoE layer, TensorRT-LLM's batch limits are per rank, and its MoE moves
tokens by all-gather and reduce-scatter."""

from __future__ import annotations


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
