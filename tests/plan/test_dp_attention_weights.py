"""Which weights each attention-DP rank holds whole, per engine: SGLang keeps the LM head split over the tp GPUs,
TensorRT-LLM and vLLM (a TP-1 engine per DP rank) hold it whole, and TensorRT-LLM and vLLM hold DeepSeek's dense and
shared-expert MLPs whole too; every engine holds the attention, the embedding, the norms and the router whole."""

from __future__ import annotations

import pytest

from kneecap.errors import KneecapError
from kneecap.model.params import part_dtypes_at
from kneecap.model.weights import weight_bytes
from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.plan.ledger import rank_weight_fraction
from kneecap.sim.setup import engine_pool_request


def plan(engine=None, preset="qwen3-235b-a22b", gpu="h100-sxm", **kw):
    request = DeploymentRequest(preset=preset, gpu=gpu, tp=8, context=4096, weight_dtype="fp8", dp_attention=True, **kw)
    return plan_deployment(DeploymentRequest(**{**request.__dict__, "dp_attention_engine": engine})).plan


def part_bytes(p, *parts):
    """Whole-model bytes of these parts at the plan's dtypes."""
    m = p.deployment.model
    dtypes = part_dtypes_at(m, p.deployment.weight_dtype)
    return sum(weight_bytes(n, dtypes[part]) for part, n in m.param_parts if part in parts)


def split_over_tp(p):
    return -(-p.weights_total_bytes // 8)


@pytest.mark.parametrize(
    "engine, whole",
    [
        ("sglang", ("attention", "norms", "router", "embed")),
        ("tensorrt-llm", ("attention", "norms", "router", "embed", "lm_head")),
        ("vllm", ("attention", "norms", "router", "embed", "lm_head")),
        (None, ("attention", "norms", "router", "embed")),
    ],
)
def test_qwen3_235b_tp8_weights_per_gpu_under_each_engines_dp_attention(engine, whole):
    p = plan(engine)
    expected = split_over_tp(p) + part_bytes(p, *whole) * 7 / 8
    assert p.ledger.weights_bytes == pytest.approx(expected, abs=8)


def test_tensorrt_llm_holds_the_lm_head_whole_sglang_splits_it():
    trt, sgl = plan("tensorrt-llm"), plan("sglang")
    lm_head = part_bytes(trt, "lm_head")  # 151,936 x 4,096 at bf16: 1.24 GB
    assert lm_head == 151_936 * 4_096 * 2
    assert trt.ledger.weights_bytes - sgl.ledger.weights_bytes == pytest.approx(lm_head * 7 / 8, abs=8)
    assert trt.ledger.kv_pool_bytes < sgl.ledger.kv_pool_bytes - 1_000_000_000  # a GB less KV room per rank


def test_every_engine_holds_the_embedding_whole():
    p = plan("sglang")
    attention_only = split_over_tp(p) + int(part_bytes(p, "attention") * 7 / 8)
    assert p.ledger.weights_bytes - attention_only >= part_bytes(p, "embed") * 7 / 8 - 8


def test_deepseek_dense_and_shared_expert_mlps_whole_under_tensorrt_llm_and_vllm():
    trt, sgl, vllm = (plan(e, preset="deepseek-v3", gpu="h200") for e in ("tensorrt-llm", "sglang", "vllm"))
    extra = part_bytes(trt, "lm_head", "dense_mlp", "shared_experts")
    assert part_bytes(trt, "dense_mlp") > 0 and part_bytes(trt, "shared_experts") > 0
    assert trt.ledger.weights_bytes - sgl.ledger.weights_bytes == pytest.approx(extra * 7 / 8, abs=8)
    assert vllm.ledger.weights_bytes == trt.ledger.weights_bytes


def test_the_simulated_engine_names_its_layout():
    request = DeploymentRequest(preset="qwen3-235b-a22b", gpu="h100-sxm", tp=8, dp_attention=True)
    assert engine_pool_request(request, "trtllm").dp_attention_engine == "tensorrt-llm"
    assert engine_pool_request(request, "nim").dp_attention_engine == "tensorrt-llm"
    assert engine_pool_request(request, "sglang").dp_attention_engine == "sglang"
    assert engine_pool_request(request, "llamacpp").dp_attention_engine is None
    mine = DeploymentRequest(**{**request.__dict__, "dp_attention_engine": "vllm"})
    assert engine_pool_request(mine, "trtllm").dp_attention_engine == "vllm"
    no_dp = DeploymentRequest(preset="qwen3-235b-a22b", gpu="h100-sxm", tp=8)
    assert engine_pool_request(no_dp, "trtllm").dp_attention_engine is None


def test_without_dp_attention_the_engine_layout_changes_nothing():
    base = dict(preset="qwen3-235b-a22b", gpu="h100-sxm", tp=8, context=4096, weight_dtype="fp8")
    tp = plan_deployment(DeploymentRequest(**base)).plan
    # the TP layout alone: split over 8 but the router, the norms and the KV-head copies (test_tp_replicated_weights)
    assert tp.ledger.weights_bytes == -(-tp.weights_total_bytes * rank_weight_fraction(tp.deployment) // 1)
    assert split_over_tp(tp) < tp.ledger.weights_bytes < plan(None).ledger.weights_bytes


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(dp_attention=True, dp_attention_engine="trt"), "no attention-DP weight layout for engine 'trt'"),
        (dict(dp_attention_engine="sglang"), "without DP attention"),
    ],
)
def test_refusals(kw, match):
    base = dict(preset="qwen3-235b-a22b", gpu="h100-sxm", tp=8, context=4096)
    with pytest.raises(KneecapError, match=match):
        plan_deployment(DeploymentRequest(**base, **kw))


def test_the_json_names_the_engine_whose_layout_it_counts(cli):
    import json

    args = ("plan", "--preset", "qwen3-235b-a22b", "--gpu", "h100-sxm", "--tp", "8", "--context", "4096")
    dp = ("--weight-dtype", "fp8", "--dp-attention")
    assert json.loads(cli(*args, *dp, "--dp-attention-engine", "sglang", "--json").stdout)["dp_attention_engine"] == (
        "sglang"
    )
    assert json.loads(cli(*args, *dp, "--json").stdout)["dp_attention_engine"] is None


def test_the_worksheet_names_the_weights_each_gpu_holds_whole(cli):
    from kneecap.plan.ledger import whole_on_every_rank

    assert whole_on_every_rank(plan("tensorrt-llm").deployment) == [
        "attention",
        "norms",
        "router",
        "embedding",
        "LM head",
    ]
    tp = plan_deployment(
        DeploymentRequest(preset="qwen3-235b-a22b", gpu="h100-sxm", tp=8, context=4096, weight_dtype="fp8")
    ).plan
    assert whole_on_every_rank(tp.deployment) == ["norms", "router", "K/V heads (one a GPU, copied)"]
    args = ("plan", "--preset", "qwen3-235b-a22b", "--gpu", "h100-sxm", "--tp", "8", "--context", "4096")
    text = cli(*args, "--weight-dtype", "fp8", "--dp-attention", "--dp-attention-engine", "tensorrt-llm").stdout
    assert "/ 8, but attention, norms," in " ".join(text.split())
