"""The vLLM and SGLang pool models against hand-computed values (arithmetic shown in each case)."""

from __future__ import annotations

import dataclasses

import pytest

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.hardware import get_gpu
from kneecap.model.spec import Model, RopeCache
from kneecap.plan.engines import (
    parse_version,
    sglang_pool,
    sglang_rope_cache_bytes,
    vllm_default_mem_util,
    vllm_extensible_available,
    vllm_pool,
)

GiB = 2**30
# An 8B-class dense model: 32 layers x 8 KV heads x 128 dim x 2 B x 2 (K, V) = 131,072 B per token.
M8 = Model(
    name="llama-8b-like",
    source="test",
    architecture="LlamaForCausalLM",
    num_hidden_layers=32,
    hidden_size=4096,
    num_attention_heads=32,
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=128256,
    layer_types=("full_attention",) * 32,
    total_params=8_000_000_000,
    active_params=8_000_000_000,
)
DEP = Deployment(M8, get_gpu("h100-sxm"))


def vllm(version="0.20", **kw):
    args = dict(
        total_bytes=80 * GiB,
        weights_bytes=16_000_000_000,
        mem_util=0.9,
        max_model_len=32768,
        activation_bytes=2 * GiB,
        non_torch_bytes=GiB // 2,
        cudagraph_bytes=GiB,
        version=version,
    )
    args.update(kw)
    return vllm_pool(DEP, **args)


def test_vllm_pool_by_hand():
    # requested = int(80 GiB x 0.9) = 77,309,411,328
    # available = 77,309,411,328 - 16e9 - 2 GiB - 0.5 GiB - 1 GiB (graphs, v0.20) = 57,551,314,944
    # blocks = 57,551,314,944 // (16 x 131,072) = 27,442 -> 439,072 tokens; 439,072 / 32,768 = 13.40x
    p = vllm()
    assert p.budget_bytes == 77_309_411_328
    assert p.kv_pool_bytes == 57_551_314_944
    assert p.num_blocks == 27_442
    assert p.kv_capacity_tokens == 439_072
    assert p.log_lines[1] == "GPU KV cache size: 439,072 tokens"
    assert p.log_lines[2] == "Maximum concurrency for 32,768 tokens per request: 13.40x"


def test_vllm_before_0_20_does_not_subtract_cuda_graphs():
    # 58,625,056,768 available (no graph term) -> 27,954 blocks -> 447,264 tokens
    p = vllm(version="0.19.1")  # VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS defaults to 0 through 0.19
    assert p.cudagraph_bytes == 0
    assert p.kv_capacity_tokens == 447_264


def test_sglang_pool_by_hand():
    # SGLang reserves 1 - 0.88 of what is free before the weights (80 - 0.5 GiB = 85,362,475,008 B), not of the total:
    # budget = int(85,362,475,008 x 0.88) = 75,118,978,007; rest = budget - 16e9 = 59,118,978,007
    # max_total_num_tokens = 59,118,978,007 // 131,072 = 451,042 (reserving 0.12 x 80 GiB and taking the 0.5 GiB
    # whole would give 450,550)
    p = sglang_pool(
        DEP,
        total_bytes=80 * GiB,
        weights_bytes=16_000_000_000,
        mem_fraction=0.88,
        max_model_len=32768,
        non_torch_bytes=GiB // 2,
    )
    assert p.kv_capacity_tokens == 451_042
    assert p.budget_bytes == 75_118_978_007
    # the buffers hold one padding page more: (451,042 + 1) x 131,072 / 2 B = 27.53 GiB each for K and V
    assert p.log_lines == ("KV Cache is allocated. #tokens: 451042, K size: 27.53 GB, V size: 27.53 GB",)
    assert any("max_total_num_tokens=451042, ..." in n for n in p.notes)


LLAMA3_ROPE = RopeCache(kind="llama3", positions=131_072, rotary_dim=128, element_bytes=2, theta=500_000.0)


def test_sglang_loads_a_float32_rope_cache_with_the_weights():
    # SGLang keeps the cos/sin cache in float32 on CUDA from 0.4.3 (rotary_embedding.py: cast to the model dtype only
    # off CUDA): 131,072 rows x 128 x 4 B = 64 MiB, where 0.4.1.post7 casts it to the 16-bit dtype (32 MiB)
    m = dataclasses.replace(M8, rope_caches=(LLAMA3_ROPE,))
    assert sglang_rope_cache_bytes(m, "0.4.4") == 131_072 * 128 * 4 == 64 * 2**20
    assert sglang_rope_cache_bytes(m, "0.5") == 64 * 2**20
    assert sglang_rope_cache_bytes(m, "0.4.1") == 32 * 2**20
    # a RoPE kind whose SGLang class was not read (here YaRN) counts nothing rather than a guess
    yarn = dataclasses.replace(LLAMA3_ROPE, kind="yarn", positions=32_768, factor=4.0)
    assert sglang_rope_cache_bytes(dataclasses.replace(M8, rope_caches=(yarn,))) == 0
    # the pool of test_sglang_pool_by_hand less the cache: (59,118,978,007 - 67,108,864) // 131,072 = 450,530
    p = sglang_pool(
        Deployment(m, get_gpu("h100-sxm")),
        total_bytes=80 * GiB,
        weights_bytes=16_000_000_000,
        mem_fraction=0.88,
        max_model_len=32768,
        non_torch_bytes=GiB // 2,
        version="0.4.4",
    )
    assert (p.kv_capacity_tokens, p.rope_cache_bytes, p.rope_caches) == (450_530, 64 * 2**20, "131,072 x 128, float32")


def test_no_room_is_a_one_line_error():
    with pytest.raises(KneecapError) as err:
        vllm(weights_bytes=80 * GiB)
    assert "no KV cache" in err.value.message


@pytest.mark.parametrize("bad", ["x.y", "0.2o", "-1.2", "+1", "1_0", "0.21.0rc2", ""])
def test_bad_version(bad):
    with pytest.raises(KneecapError):
        parse_version(bad)


def test_fraction_bounds():
    with pytest.raises(KneecapError):
        vllm(mem_util=1.5)


# --- vLLM hybrid layer groups (vllm/v1/core/kv_cache_utils.py), hand-checked ---------------------------------


def _hybrid(**kw) -> Model:
    base = dict(
        name="hybrid",
        source="test",
        architecture="X",
        num_hidden_layers=62,
        hidden_size=5376,
        num_attention_heads=32,
        num_key_value_heads=16,
        head_dim=128,
        vocab_size=262208,
        layer_types=("sliding_attention",) * 52 + ("full_attention",) * 10,
        total_params=27_000_000_000,
        active_params=27_000_000_000,
        sliding_window=1024,
    )
    base.update(kw)
    return Model(**base)


def test_vllm_groups_for_sliding_plus_full():
    from kneecap.plan.engines import vllm_layout

    # 52 sliding + 10 full: group size = 10 (52 >= 1.5 x 10), sliding padded to 6 groups, full 1 group.
    # page = 16 tokens x (2 x 16 heads x 128 x 2 B) = 131,072 B per layer slot.
    lay = vllm_layout(Deployment(_hybrid(), get_gpu("h100-sxm")))
    assert (lay.block_size, lay.page_bytes, lay.group_size) == (16, 131_072, 10)
    assert dict(lay.groups) == {"sliding_attention": 6, "full_attention": 1}
    # a 131,072-token request: full group 8,192 blocks; each sliding group min(8192, ceil(1023/16) + 1 = 65)
    assert lay.blocks_per_request(131_072) == 8_192 + 6 * 65


def test_vllm_groups_equal_counts_use_the_larger():
    from kneecap.plan.engines import vllm_layout

    m = _hybrid(num_hidden_layers=36, layer_types=("sliding_attention", "full_attention") * 18, sliding_window=128)
    lay = vllm_layout(Deployment(m, get_gpu("h100-sxm")))
    assert lay.group_size == 18 and dict(lay.groups) == {"sliding_attention": 1, "full_attention": 1}


def test_vllm_linear_attention_grows_the_block():
    from kneecap.plan.engines import vllm_layout

    # 15 full (2 KV heads x 256) + 45 linear layers, state 4,268,032 B per layer; TP 8 -> 533,504 B per GPU.
    # attention per token per layer at TP 8: 2 x 1 head x 256 x 2 B = 1,024 B -> block = 16 x ceil(533,504 / 16,384) = 528
    m = _hybrid(
        num_hidden_layers=60,
        num_attention_heads=32,
        num_key_value_heads=2,
        head_dim=256,
        layer_types=("linear_attention",) * 3 * 15 + ("full_attention",) * 15,
        sliding_window=None,
        linear_state_bytes_per_layer=4_268_032,
    )
    lay = vllm_layout(Deployment(m, get_gpu("rtx-pro-6000"), tp=8))
    assert lay.block_size == 528 and lay.page_bytes == 540_672 and lay.group_size == 15
    assert dict(lay.groups) == {"linear_attention": 3, "full_attention": 1}
    # ceil(2000 / 528) = 4 full blocks + the state blocks of the 3 linear groups: vLLM 0.32 prefix caching (its
    # default) keeps 2 per group for a non-Mamba-2 mixer (mamba_cache_mode 'align'), 1 with prefix caching off
    assert lay.blocks_per_request(2000) == 4 + 3 * 2 and lay.state_blocks_per_request == 6
    off = vllm_layout(Deployment(m, get_gpu("rtx-pro-6000"), tp=8), prefix_caching=False)
    assert off.blocks_per_request(2000) == 4 + 3 and (off.block_size, off.page_bytes) == (
        lay.block_size,
        lay.page_bytes,
    )


def test_effective_capacity_for_length_dependent_models():
    from kneecap.plan.preflight import effective_capacity_tokens

    # pool 1,000,000 B, a 2,000-token sequence costs 40,000 B in 2,000 slots -> 25 sequences = 50,000 tokens
    assert effective_capacity_tokens(1_000_000, 40_000, 2000, 16) == 50_000


def _linear_hybrid() -> Model:
    return _hybrid(
        num_hidden_layers=60,
        num_attention_heads=32,
        num_key_value_heads=2,
        head_dim=256,
        layer_types=("linear_attention",) * 45 + ("full_attention",) * 15,
        sliding_window=None,
        linear_state_bytes_per_layer=4_268_032,
    )


def test_sglang_sets_aside_a_mamba_pool_by_ratio():
    # TP 8: state per request = 45 layers x ceil(4,268,032 / 8) = 24,007,680 B
    # budget int(80 GiB x 0.9) = 77,309,411,328; rest = 77,309,411,328 - 50e9 = 27,309,411,328
    # slots = int(rest x 0.9 / 1.9) // 24,007,680 = 538 -> 12,916,131,840 B; rest 14,393,279,488
    # cell = 15 full layers x 2 x 1 KV head x 256 x 2 B = 15,360 -> 937,062 tokens
    p = sglang_pool(
        Deployment(_linear_hybrid(), get_gpu("rtx-pro-6000"), tp=8),
        total_bytes=80 * GiB,
        weights_bytes=50_000_000_000,
        mem_fraction=0.9,
        max_model_len=262144,
        non_torch_bytes=0,
    )
    assert p.state_pool_bytes == 12_916_131_840
    assert p.kv_capacity_tokens == 937_062
    assert any("Mamba Cache is allocated. max_mamba_cache_size: 538, ..." in n for n in p.notes)


def test_sglang_mamba_cache_size_flag():
    # 512 slots x 24,007,680 B = 12,291,932,160 B -> (27,309,411,328 - 12,291,932,160) // 15,360 = 977,700 tokens
    p = sglang_pool(
        Deployment(_linear_hybrid(), get_gpu("rtx-pro-6000"), tp=8),
        total_bytes=80 * GiB,
        weights_bytes=50_000_000_000,
        mem_fraction=0.9,
        max_model_len=262144,
        non_torch_bytes=0,
        mamba_cache_size=512,
    )
    assert p.kv_capacity_tokens == 977_700


@pytest.mark.parametrize(
    "preset, tp",
    [("gemma-3-27b", 1), ("gpt-oss-20b", 1), ("qwen3-next-80b-a3b", 4), ("llama-3.1-8b", 1), ("deepseek-v3", 16)],
)
def test_the_ledger_counts_vllms_blocks(preset, tp):
    # with --engine vllm the ledger's pool is vLLM's available memory: its blocks, block size and "GPU KV cache size"
    # are the ones vLLM's pool model derives (hybrids: a block is a page in each layer slot of one KV cache group)
    from kneecap.plan.build import DeploymentRequest, plan_deployment

    plan, pool = plan_deployment(DeploymentRequest(preset=preset, gpu="h100-sxm", tp=tp, context=16384, engine="vllm"))
    assert (plan.num_kv_blocks, plan.block_size, plan.kv_capacity_tokens) == (
        pool.num_blocks,
        pool.block_size,
        pool.kv_capacity_tokens,
    )
    assert plan.max_seqs_paged == plan.paged_max_seqs_at(16384) > 0


def test_vllm_034_sizes_its_kv_cache_after_warm_up_by_hand():
    # vLLM 0.34's extensible KV cache (v1/worker/extensible_kv_cache.py:592-618), util 1.0 by default:
    # non-KV = 16e9 weights + 0.5 GiB non-torch + 1 GiB graphs; margin = max(1 GiB, 0.75 x 2 GiB) = 1.5 GiB
    # available = min(80 GiB - non-KV, 80 GiB - non-KV - 1.5 GiB) - 2 GiB = 75 GiB - 16e9 = 64,530,636,800
    # blocks = 64,530,636,800 // 2,097,152 = 30,770 -> 492,320 tokens; the margin keeps 1.5 GiB beyond the 1.0 budget
    p = vllm(version="0.34", mem_util=1.0)
    assert p.kv_pool_bytes == 64_530_636_800
    assert p.num_blocks == 30_770
    assert p.kv_capacity_tokens == 492_320
    assert p.sizing_margin_bytes == 1_610_612_736
    # the line it logs before warm-up: 80 GiB - 16e9 - 2 GiB - 0.5 GiB, no graph estimate with this cache
    assert p.log_lines[0] == "Available KV cache memory: 62.60 GiB"
    assert p.log_lines[1] == "GPU KV cache size: 492,320 tokens"
    assert "after warm-up" in p.notes[0] and "keeps 1.50 GiB more free" in p.notes[0]
    # 0.33 at the same utilization: requested - everything, no margin (80 GiB - 16e9 - 3.5 GiB)
    assert vllm(version="0.33", mem_util=1.0).kv_pool_bytes == 66_141_249_536
    assert vllm(version="0.33", mem_util=1.0).sizing_margin_bytes == 0


def test_vllm_034_at_a_given_utilization_is_the_estimate_formula_where_the_utilization_binds():
    # util 0.9: 72 GiB - non-KV - 2 GiB < 80 GiB - non-KV - 1.5 GiB - 2 GiB, so the 0.20-0.33 figure (57,551,314,944)
    p = vllm(version="0.34", mem_util=0.9)
    assert p.kv_pool_bytes == 57_551_314_944 and p.sizing_margin_bytes == 0
    assert "the utilization binds before the margin" in p.notes[0]


def test_vllm_034_margin_floor_is_3_gib_on_rocm():
    # extensible_kv_cache.py:64 KV_CACHE_MARGIN_FLOOR_BYTES = 3 GiB on ROCm (1 GiB on CUDA)
    assert vllm_extensible_available(80 * GiB, 80 * GiB, 20 * GiB, 2 * GiB, rocm=True) == (55 * GiB, 3 * GiB)
    # CUDA: max(1 GiB, 0.75 x 2 GiB) = 1.5 GiB
    assert vllm_extensible_available(80 * GiB, 80 * GiB, 20 * GiB, 2 * GiB) == (56 * GiB + GiB // 2, 3 * GiB // 2)
    assert vllm_extensible_available(80 * GiB, 80 * GiB, 20 * GiB, GiB // 2) == (59 * GiB - GiB // 2, GiB)


def test_vllm_default_utilization_is_1_from_0_34():
    # config/cache.py:495-501 resolved_gpu_memory_utilization: 1.0 with the extensible KV cache (0.34's default)
    assert vllm_default_mem_util("0.34") == 1.0
    assert vllm_default_mem_util("0.34.1") == 1.0
    assert vllm_default_mem_util("0.33") == 0.92
    assert vllm_default_mem_util("0.20") == 0.92
    assert vllm_default_mem_util("0.19") == 0.9
    assert vllm_default_mem_util("0.11.0") == 0.9


def test_plan_on_vllm_034_keeps_the_margin_in_the_ledger(cli):
    import json

    args = ["plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm", "--context", "8192", "--engine", "vllm"]
    doc = json.loads(cli(*args, "--engine-version", "0.34", "--json").stdout)
    eng = doc["engine"]
    assert eng["fraction"] == 1.0 and eng["sizing_margin_bytes"] > 0
    assert doc["num_kv_blocks"] == eng["num_blocks"]  # the ledger keeps the margin too
    text = cli(*args, "--engine-version", "0.34").stdout
    assert "Kept by the engine (activation peak, non-torch, graphs, margin)" in text
    assert "kept free after warm-up 3.00 GiB" in text  # max(1 GiB, 0.75 x 4 GiB --overhead-gib)
