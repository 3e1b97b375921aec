"""`kneecap plan --engine sglang|vllm --dp-attention`: each engine's own pool rule, per DP rank.

SGLang 0.5.7 with --tp N --dp N --enable-dp-attention: every GPU is a DP rank whose attention TP group is itself, so
profile_max_num_token (model_runner_kv_cache_mixin.py:113-141) sizes each rank's pool from the memory free on it
after its own weights, in cells of whole KV heads (get_cell_size_per_token: get_num_kv_heads(get_attention_tp_size()),
lines 84-89), and each rank logs "KV Cache is allocated. #tokens" for its own pool. vLLM 0.11.0 with
--data-parallel-size N --enable-expert-parallel: each DP rank is an engine of its own (v1/engine/core.py
_initialize_kv_caches, lines 169-203) running determine_available_memory (v1/worker/gpu_worker.py:222-280) with no
term for the other ranks, and logs its own "GPU KV cache size" and "Maximum concurrency".

No published SGLang or vLLM start-up log under DP attention with its GPU, sizes and token count was found, so the
figures below are worked by hand from the sources' arithmetic.
"""

from __future__ import annotations

import json

import pytest

from kneecap.errors import KneecapError
from kneecap.hardware import get_gpu
from kneecap.plan.build import DeploymentRequest, plan_deployment
from kneecap.plan.engines import sglang_default_mem_fraction

GiB = 2**30
H200 = get_gpu("h200").memory_bytes("framework")


def plan(preset: str, engine: str, **kw):
    base = dict(preset=preset, gpu="h200", tp=8, context=4096, dp_attention=True, engine=engine)
    return plan_deployment(DeploymentRequest(**{**base, **kw}))


def test_sglang_deepseek_v3_each_rank_sizes_its_own_pool_from_its_own_weights():
    p, e = plan("deepseek-v3", "sglang", mem_fraction=0.8, non_torch_gib=1.5)
    tp = plan_deployment(
        DeploymentRequest(preset="deepseek-v3", gpu="h200", tp=8, context=4096, engine="sglang", mem_fraction=0.8)
    )[1]
    assert e.weights_bytes == p.ledger.weights_bytes > tp.weights_bytes  # the whole attention and embedding on each
    assert p.deployment.dp_attention_engine == "sglang"  # --engine names the layout of the weights
    cell = (512 + 64) * 61 * 2  # MLA: (kv_lora_rank + qk_rope_head_dim) x layers x 2 B, whatever the attention TP
    budget = int((H200 - int(1.5 * GiB)) * 0.8)  # mem_fraction_static x the memory free before the weights
    tokens = (budget - e.weights_bytes) // cell  # DeepSeek's YaRN RoPE cache is not counted (not a kind modelled)
    assert e.log_lines == (f"KV Cache is allocated. #tokens: {tokens}, KV size: {(tokens + 1) * cell / GiB:.2f} GB",)
    assert e.dp_attention_ranks == 8 and e.log_kv_cache_tokens_all_ranks == 8 * tokens
    assert p.kv_capacity_tokens == 8 * tokens  # the ledger's pools, one per rank, agree with the engine's
    assert "each of the 8 DP ranks' schedulers" in e.notes[-1]


def test_sglang_cell_holds_every_kv_head_under_dp_attention():
    # Qwen3-235B-A22B: 4 KV heads of 128, 94 layers; a plain TP-8 rank keeps one head, a DP rank all four
    p, e = plan("qwen3-235b-a22b", "sglang", weight_dtype="fp8", mem_fraction=0.8)
    cell = 4 * (128 + 128) * 94 * 2
    rope = 40960 * 128 * 4  # SGLang's float32 cos/sin cache
    tokens = (int(H200 * 0.8) - e.weights_bytes - rope) // cell
    assert e.log_kv_cache_tokens == tokens
    assert e.log_lines[0].startswith(f"KV Cache is allocated. #tokens: {tokens}, K size: ")
    assert p.kv_capacity_tokens == 8 * tokens


def test_sglang_logged_pool_is_one_ranks():
    p, e = plan("qwen3-235b-a22b", "sglang", weight_dtype="fp8", mem_fraction=0.8, kv_pool_gib=20.0)
    tokens = 20 * GiB // (4 * 256 * 94 * 2)
    assert (e.log_kv_cache_tokens, e.log_kv_cache_tokens_all_ranks) == (tokens, 8 * tokens)
    assert p.kv_capacity_tokens == 8 * tokens


def test_vllm_each_dp_rank_is_its_own_engine():
    p, e = plan("qwen3-235b-a22b", "vllm", weight_dtype="fp8", engine_version="0.11")
    rope = 40960 * 128 * 2  # vLLM's cos/sin cache in the model's 16-bit dtype
    available = int(H200 * 0.9) - e.weights_bytes - rope - 4 * GiB  # the activation peak: --overhead-gib's 4
    blocks = available // (16 * 4 * 256 * 94 * 2)
    assert e.non_torch_bytes == 0 and "no published measurement under --data-parallel-size" in e.non_torch_source
    assert e.log_lines == (
        f"Available KV cache memory: {available / GiB:.2f} GiB",
        f"GPU KV cache size: {blocks * 16:,} tokens",
        f"Maximum concurrency for 4,096 tokens per request: {blocks / 256:.2f}x",
    )
    assert p.num_kv_blocks == 8 * blocks and e.log_kv_cache_tokens_all_ranks == 8 * 16 * blocks


def test_sglang_default_mem_fraction_under_dp_attention():
    # H200 (nvidia-smi 143,771 MiB), TP 8: chunked prefill 8192, CUDA graphs up to 512; DP attention over 8 ranks
    # adds 512 x 8 x 3 + 512 x 8 x 1.5 = 18,432 MiB to 512 + 12,288 + 1,024 + 1,024
    own = sglang_default_mem_fraction(143771, 8, dp=8, dp_attention=True, version="0.5.7")
    assert (own.fraction, own.reserved_mib, own.dp_extra_mib) == (0.769, 33280.0, 18432.0)
    own = sglang_default_mem_fraction(143771, 8, version="0.5.7")
    assert (own.fraction, own.reserved_mib, own.dp_extra_mib) == (round((143771 - 14848) / 143771, 3), 14848.0, 0.0)
    # without --mem-fraction engine mode takes SGLang's own 0.769 and says so
    p, e = plan("deepseek-v3", "sglang")
    assert (e.fraction, e.fraction_source) == (0.769, "sglang default")
    assert "33,280 MiB kept back of 143,771 MiB" in e.fraction_note
    assert "18,432 for DP attention's padding" in e.fraction_note


@pytest.mark.parametrize(
    "preset, kw, match",
    [
        ("qwen3-235b-a22b", dict(dp_attention_engine="tensorrt-llm"), "--dp-attention-engine tensorrt-llm with"),
        ("qwen3-next-80b-a3b", {}, "linear-attention state is laid out per DP rank is not modelled"),
    ],
)
def test_refusals(preset, kw, match):
    with pytest.raises(KneecapError, match=match):
        plan(preset, "sglang", **kw)


def test_cli_says_the_lines_are_per_rank(cli):
    args = ("plan", "--preset", "deepseek-v3", "--gpu", "h200", "--tp", "8", "--context", "4096", "--dp-attention")
    text = " ".join(cli(*args, "--engine", "sglang", "--mem-fraction", "0.8").stdout.split())
    assert "each of the 8 DP ranks would log (its own pool; 8 ×" in text
    doc = json.loads(cli(*args, "--engine", "sglang", "--mem-fraction", "0.8", "--json").stdout)
    assert doc["dp_attention_engine"] == "sglang"
    assert doc["engine"]["dp_attention_ranks"] == 8
    assert doc["engine"]["log_kv_cache_tokens_all_ranks"] == 8 * doc["engine"]["log_kv_cache_tokens"]


def test_vllm_moe_profile_run_under_data_parallelism_is_not_predicted():
    # every DP rank's tokens reach each rank's experts (vLLM's default all-gather dispatch): no rule reads that,
    # for gpt-oss's MXFP4 experts as for the Triton ones, so the peak is --overhead-gib's, said
    _, e = plan("gpt-oss-120b", "vllm", gpu="h100-sxm", tp=2, engine_version="0.11", context=8192)
    assert e.activation_bytes == 4 * GiB
    assert "data-parallel attention's MoE dispatch" in e.activation_source


@pytest.mark.parametrize(
    "preset, engine, kw",
    [
        ("deepseek-v3", "sglang", dict(mem_fraction=0.8)),
        ("deepseek-v3", "sglang", dict(mem_fraction=0.769)),
        ("qwen3-235b-a22b", "sglang", dict(weight_dtype="fp8", mem_fraction=0.8)),
        ("qwen3-235b-a22b", "vllm", dict(weight_dtype="fp8", engine_version="0.11")),
    ],
)
def test_docs_table_is_what_plan_prints(preset, engine, kw):
    from pathlib import Path

    doc = " ".join((Path(__file__).parents[2] / "docs" / "engine-model.md").read_text().split())
    _, e = plan(preset, engine, **kw)
    line = next(x for x in e.log_lines if "#tokens" in x or "GPU KV cache size" in x)
    row = f"| {e.weights_bytes / GiB:.2f} GiB | `{line.split('KV Cache is allocated. ')[-1]}` |"
    assert f"{row} {e.log_kv_cache_tokens_all_ranks:,} tokens |" in doc


def test_simulate_pool_follows_engine_not_the_scheduler_defaults():
    from kneecap.sim.setup import engine_pool_request

    request = DeploymentRequest(preset="deepseek-v3", gpu="h200", tp=8, context=4096, dp_attention=True)
    sized = engine_pool_request(DeploymentRequest(**{**request.__dict__, "engine": "sglang"}), "vllm")
    assert plan_deployment(sized).plan.deployment.dp_attention_engine == "sglang"
    assert engine_pool_request(request, "vllm").dp_attention_engine == "vllm"
