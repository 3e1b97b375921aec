"""config.json files (tests/model/configs, sources in its SOURCES.md) -> Model, against hand-computed values."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from kneecap.model import load_model, param_breakdown, part_dtypes, total_weight_bytes, weight_bytes_by_part
from kneecap.model.kv import kv_bytes_per_token

CONFIGS = Path(__file__).parent / "configs"

# file, total params, head_dim, KV bytes/token bf16, {kind: layers}, sliding_window
ROWS = [
    # Qwen2.5-7B: embed x2 = 2*152064*3584 = 1,089,994,752; attn q,o 3584*3584 = 12,845,056 each, k,v 3584*512 =
    # 1,835,008 each, q/k/v bias 3584+512+512 = 4,608 -> 29,364,736 x28 = 822,212,608; MLP 3*3584*18944 =
    # 203,685,888 x28 = 5,703,204,864; norms 28*7168 + 3584 = 204,288 -> 7,615,616,512 (card: 7.61B).
    # head_dim 3584/28 = 128; KV 28*2*4*128*2 = 57,344.
    ("qwen2.5-7b-instruct.json", 7_615_616_512, 128, 57_344, {"full_attention": 28}, None),
    # Qwen3-0.6B: explicit head_dim 128 (hidden/heads would be 64). attn q 1024*2048 = 2,097,152, k,v 1024*1024
    # each, o 2048*1024, q/k norm 256 -> 6,291,712 x28 = 176,167,936; MLP 3*1024*3072*28 = 264,241,152; embed
    # (tied) 151936*1024 = 155,582,464; norms 28*2048 + 1024 = 58,368 -> 596,049,920.
    # KV 28*2*8*128*2 = 114,688 (with hidden/heads = 64 it would read 57,344).
    ("qwen3-0.6b.json", 596_049_920, 128, 114_688, {"full_attention": 28}, None),
    # Mistral-7B-v0.1: embed x2 = 2*32000*4096 = 262,144,000; attn 41,943,040 x32 = 1,342,177,280; MLP
    # 176,160,768 x32 = 5,637,144,576; norms 266,240 -> 7,241,732,096. Every layer slides over 4096 tokens.
    ("mistral-7b-v0.1.json", 7_241_732_096, 128, 131_072, {"sliding_attention": 32}, 4096),
    # Phi-3-mini-4k (MHA, 32 KV heads): embed x2 = 2*32064*3072 = 197,001,216; attn 4*3072^2 = 37,748,736 x32 =
    # 1,207,959,552; MLP 3*3072*8192 = 75,497,472 x32 = 2,415,919,104; norms 32*6144 + 3072 = 199,680 ->
    # 3,821,079,552 (card: 3.8B). head_dim 3072/32 = 96; KV 32*2*32*96*2 = 393,216; sliding_window 2047.
    ("phi-3-mini-4k-instruct.json", 3_821_079_552, 96, 393_216, {"sliding_attention": 32}, 2047),
    # Gemma-2B (MQA, 1 KV head): attn q,o 2048*2048 each, k,v 2048*256 each = 9,437,184 x18 = 169,869,312;
    # MLP 3*2048*16384 = 100,663,296 x18 = 1,811,939,328; embed (tied) 256000*2048 = 524,288,000; norms
    # 18*4096 + 2048 = 75,776 -> 2,506,172,416 (the published count). KV 18*2*1*256*2 = 18,432.
    ("gemma-2b.json", 2_506_172_416, 256, 18_432, {"full_attention": 18}, None),
]


@pytest.mark.parametrize("fname,total,head_dim,kv_per_token,layers,window", ROWS, ids=[r[0] for r in ROWS])
def test_dense_configs(fname, total, head_dim, kv_per_token, layers, window):
    model = load_model(str(CONFIGS / fname))
    assert model.total_params == total == model.active_params
    assert model.head_dim == head_dim
    assert kv_bytes_per_token(model, 2) == kv_per_token
    assert {k: model.count_layers(k) for k in layers} == layers
    assert model.sliding_window == window


def test_granite_head_dim_from_hidden_over_heads():
    model = load_model(str(CONFIGS / "granite-3.1-2b-base.json"))
    assert (model.head_dim, model.num_key_value_heads) == (64, 8)  # 2048 / 32
    assert kv_bytes_per_token(model, 2) == 81_920  # 40 x 2 x 8 x 64 x 2


def test_llama4_chunked_layers_and_moe_under_text_config():
    model = load_model(str(CONFIGS / "llama-4-scout-17b-16e-instruct.json"))
    # no_rope_layers default: layer i chunked unless (i + 1) % 4 == 0 -> 36 chunked (window 8192) + 12 global
    assert model.count_layers("sliding_attention") == 36 and model.count_layers("full_attention") == 12
    assert model.layer_types[3] == "full_attention" and model.sliding_window == 8192
    assert any("chunked" in n for n in model.notes)
    # embed x2 = 2*202048*5120 = 2,068,971,520; attn q,o 5120*5120 each, k,v 5120*1024 each = 62,914,560 x48 =
    # 3,019,898,880; expert 3*5120*8192 = 125,829,120, x16 x48 = 96,636,764,160; shared 125,829,120 x48 =
    # 6,039,797,760; router 5120*16*48 = 3,932,160; norms 48*10240 + 5120 = 496,640 -> 107,769,861,120
    assert model.total_params == 107_769_861_120
    # active = total - 48*15*125,829,120 (90,596,966,400) = 17,172,894,720 ("17B active")
    assert model.active_params == 17_172_894_720
    assert (model.num_experts, model.num_experts_per_tok, model.num_shared_experts) == (16, 1, 1)


def test_folder_with_safetensors_index(tmp_path):
    shutil.copy(CONFIGS / "qwen3-0.6b.json", tmp_path / "config.json")
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"metadata": {"total_size": 1_503_238_144}, "weight_map": {}})
    )
    model = load_model(str(tmp_path))
    assert model.checkpoint_bytes == 1_503_238_144
    assert model.name == tmp_path.name
    # a config.json path also picks up the index beside it
    assert load_model(str(tmp_path / "config.json")).checkpoint_bytes == 1_503_238_144


def test_breakdown_keys_and_per_part_dtypes_gpt_oss():
    model = load_model("gpt-oss-120b")
    parts = param_breakdown(model)
    assert set(parts) == {"embed", "attention", "routed_experts", "router", "lm_head", "norms"}
    assert parts["routed_experts"] == 114_701_598_720  # 24,891,840 x 128 x 36
    dtypes = part_dtypes(model)
    assert dtypes["routed_experts"] == "mxfp4"
    assert {dtypes[p] for p in ("embed", "attention", "router", "lm_head")} == {"bf16"}
    by_part = weight_bytes_by_part(model)
    # 114,701,598,720 x 4.25 bits / 8 = 60,935,224,320 B; attention 955,805,184 x 2 B = 1,911,610,368
    assert by_part["routed_experts"] == 60_935_224_320
    assert by_part["attention"] == 1_911_610_368
    # every part at fp8: total 116,829,156,672 B
    assert total_weight_bytes(model, "fp8") == 116_829_156_672


def test_kimi_k25_only_routed_experts_int4():
    model = load_model("kimi-k2.5")
    dtypes = part_dtypes(model)
    assert dtypes["routed_experts"] == "int4-g32"
    assert {dtypes[p] for p in ("attention", "shared_experts", "dense_mlp", "lm_head", "embed")} == {"bf16"}
    by_part = weight_bytes_by_part(model)
    # experts 1,014,686,023,680 x 4.5 bits / 8 = 570,760,888,320 B
    assert by_part["routed_experts"] == 570_760_888_320
    # non-expert parameters 1,026,408,232,448 - 1,014,686,023,680 = 11,722,208,768, x 2 B = 23,444,417,536
    assert total_weight_bytes(model) == 570_760_888_320 + 23_444_417_536


def test_deepseek_fp8_block_keeps_embeddings_bf16():
    dtypes = part_dtypes(load_model("deepseek-v3"))
    assert dtypes["routed_experts"] == dtypes["attention"] == dtypes["dense_mlp"] == "fp8-block"
    assert dtypes["embed"] == dtypes["lm_head"] == dtypes["router"] == "bf16"


def test_multimodal_wrapper_reads_text_config():
    model = load_model("qwen3.5-397b-a17b")
    assert model.architecture == "Qwen3_5MoeForConditionalGeneration"
    assert (model.num_hidden_layers, model.hidden_size, model.num_key_value_heads) == (60, 4096, 2)
    gemma = load_model("gemma-3-27b")
    assert (gemma.num_hidden_layers, gemma.head_dim) == (62, 128)  # explicit head_dim, not 5376 / 32 = 168


def test_awq_and_modelopt_quantization(tmp_path):
    cfg = json.loads((CONFIGS / "qwen2.5-7b-instruct.json").read_text())
    cfg["quantization_config"] = {"quant_method": "awq", "bits": 4, "group_size": 128, "zero_point": True}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    dtypes = part_dtypes(load_model(str(tmp_path)))
    assert dtypes["attention"] == dtypes["dense_mlp"] == "awq"
    assert dtypes["embed"] == dtypes["lm_head"] == "bf16"
    cfg["quantization_config"] = {"quant_method": "modelopt", "quant_algo": "NVFP4", "exclude_modules": ["lm_head"]}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    dtypes = part_dtypes(load_model(str(tmp_path)))
    assert dtypes["attention"] == dtypes["dense_mlp"] == "nvfp4"
    assert dtypes["lm_head"] == "bf16"


def test_unknown_quant_method_is_a_note_not_a_failure(tmp_path):
    cfg = json.loads((CONFIGS / "qwen3-0.6b.json").read_text())
    cfg["quantization_config"] = {"quant_method": "bitsandbytes"}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model = load_model(str(tmp_path))
    assert any("bitsandbytes" in n and "--weight-dtype" in n for n in model.notes)


def test_layer_types_key_wins_for_qwen2_style_configs(tmp_path):
    cfg = json.loads((CONFIGS / "qwen3-0.6b.json").read_text())
    cfg["layer_types"] = ["full_attention"] * 28
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    assert load_model(str(tmp_path)).count_layers("full_attention") == 28


def test_deepseek_v2_lite_mla_without_q_lora():
    model = load_model(str(CONFIGS / "deepseek-v2-lite.json"))
    assert set(model.layer_types) == {"mla"} and model.head_dim == 192  # nope 128 + rope 64 (config head_dim unused)
    assert kv_bytes_per_token(model, 2) == 31_104  # 27 x (512 + 64) x 2
    # MLA attn/layer (no q_lora): q 2048*16*192 = 6,291,456; kv_a 2048*576 = 1,179,648 + norm 512; kv_b
    # 512*16*256 = 2,097,152; o 16*128*2048 = 4,194,304 -> 13,763,072 x27 = 371,602,944. Dense layer 0:
    # 3*2048*10944 = 67,239,936. 26 MoE layers: expert 3*2048*1408 = 8,650,752, x64 x26 = 14,394,851,328;
    # 2 shared 17,301,504 x26 = 449,839,104; router 2048*64*26 = 3,407,872 (no bias in V2). embed x2 =
    # 2*102400*2048 = 419,430,400; norms 27*4096 + 2048 = 112,640 -> 15,706,484,224 (card: 15.7B)
    assert model.total_params == 15_706_484_224
    # active = total - 26*58*8,650,752 (13,045,334,016) = 2,661,150,208 (card: 2.4B, embeddings not counted)
    assert model.active_params == 2_661_150_208


def test_nemotron_h_mamba2_hybrid():
    model = load_model(str(CONFIGS / "nemotron-h-8b-base-8k.json"))
    # 52 blocks: 24 M (Mamba-2), 4 * (attention), 24 - (MLP only, folded away) -> 28 layers
    assert (model.count_layers("linear_attention"), model.count_layers("full_attention")) == (24, 4)
    assert model.num_hidden_layers == 28 and model.head_dim == 128  # attention_head_dim
    assert kv_bytes_per_token(model, 2) == 16_384  # 4 x 2 x 8 x 128 x 2 (naive 52 layers: 212,992, 13x)
    # Mamba-2 state: conv (128*64 + 2*8*128 = 10,240) x (4 - 1) x 2 B = 61,440; temporal 128 x 64 x 128 x 2 B =
    # 2,097,152 -> 2,158,592 per layer
    assert model.linear_state_bytes_per_layer == 2_158_592
    assert any("13.0x" in n for n in model.notes)
    # Mamba-2 mixer: in_proj 4096*(8192 + 10240 + 128) = 76,021,760; conv 10240*4 + 10240 = 51,200; dt/A/D 384;
    # norm 8192; out 8192*4096 = 33,554,432 -> 109,635,968 x24 = 2,631,263,232. Attention 4 x 41,943,040 =
    # 167,772,160. MLP 2*4096*21504 = 176,160,768 x24 = 4,227,858,432. embed + lm_head 2*131072*4096 =
    # 1,073,741,824. norms 52*4096 + 4096 = 217,088 -> 8,100,852,736 ("8B")
    assert model.total_params == 8_100_852_736


def test_gemma2_alternation_rule(tmp_path):
    # Synthetic (shape only): HF Gemma2Config layer_types = "sliding" if (i + 1) % 2 else "full" -> layer 0 slides
    cfg = {
        "model_type": "gemma2",
        "architectures": ["Gemma2ForCausalLM"],
        "num_hidden_layers": 4,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 16,
        "vocab_size": 100,
        "sliding_window": 4096,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model = load_model(str(tmp_path))
    assert model.layer_types == ("sliding_attention", "full_attention") * 2
    # tied by default (Gemma): embed 100*64 = 6,400, no lm_head; 4 norms per layer: 4*4*64 + 64 = 1,088;
    # attn q,o 64*64 each + k,v 64*32 each = 12,288 x4 = 49,152; MLP 3*64*128 = 24,576 x4 = 98,304 -> 154,944
    assert model.total_params == 154_944


def test_cohere2_interleaved_sliding_layers(tmp_path):
    # Synthetic (shape only; no Command R7B config.json is shipped): HF Cohere2Config layer_types = "sliding" if
    # (i + 1) % sliding_window_pattern (4) else "full"; vLLM commandr.py (0.32.0) gives those layers a window of
    # sliding_window + 1
    cfg = {
        "model_type": "cohere2",
        "architectures": ["Cohere2ForCausalLM"],
        "num_hidden_layers": 8,
        "hidden_size": 64,
        "intermediate_size": 128,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "vocab_size": 100,
        "sliding_window": 4096,
        "sliding_window_pattern": 4,
    }
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    model = load_model(str(tmp_path))
    assert model.layer_types == ("sliding_attention",) * 3 + ("full_attention",) + ("sliding_attention",) * 3 + (
        "full_attention",
    )
    assert model.sliding_window == 4097 and not any("generic" in n for n in model.notes)
    assert kv_bytes_per_token(model, 2) == 8 * 2 * 2 * 16 * 2  # 8 layers x K,V x 2 KV heads x (64 / 4) x 2 B
    # tied by default (CohereConfig, Cohere2Config): embed 100*64 = 6,400 and no lm_head; attn q,o 64*64 each +
    # k,v 64*32 each = 12,288 x8 = 98,304; MLP 3*64*128 = 24,576 x8 = 196,608; norms 8*2*64 + 64 = 1,088 -> 302,400
    assert dict(model.param_parts)["lm_head"] == 0 and model.total_params == 302_400


def test_from_hf_config_on_a_dict_and_no_import_cycle():
    import subprocess
    import sys

    from kneecap.model import Model, from_hf_config

    cfg = json.loads((CONFIGS / "qwen3-0.6b.json").read_text())
    model = from_hf_config(cfg, name="qwen3-0.6b", source="inline")
    assert model.total_params == 596_049_920 and model.source == "inline"
    assert not hasattr(Model, "from_hf_config")  # spec.py knows no adapter: the dependency points one way
    # importing the record alone must not pull in an adapter (spec -> hf_config -> kv -> spec was a cycle)
    code = "import sys, kneecap.model.spec; print(sorted(m for m in sys.modules if m.startswith('kneecap.model.')))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True)
    assert out.stdout.strip() == "['kneecap.model.spec']"


def test_jamba_mamba1_hybrid_moe():
    model = load_model(str(CONFIGS / "ai21-jamba-1.5-mini.json"))
    # attention where i % 8 == 4 -> layers 4, 12, 20, 28; the other 28 are Mamba-1
    assert [i for i, t in enumerate(model.layer_types) if t == "full_attention"] == [4, 12, 20, 28]
    assert kv_bytes_per_token(model, 2) == 16_384  # 4 x 2 x 8 x 128 x 2 (naive 32 layers: 131,072, 8x)
    # Mamba-1 state: I = 2 x 4096 = 8192; conv 8192 x 3 x 2 B = 49,152; temporal 8192 x 16 x 2 B = 262,144
    assert model.linear_state_bytes_per_layer == 311_296
    # Mamba-1 mixer: in_proj 4096*16384 = 67,108,864; conv 8192*4 + 8192 = 40,960; x_proj 8192*(256 + 32) =
    # 2,359,296; dt_proj 256*8192 + 8192 = 2,105,344; A_log 8192*16 = 131,072; D 8192; out 8192*4096 =
    # 33,554,432; dt/B/C norms 256 + 16 + 16 = 288 -> 105,308,448 x28 = 2,948,636,544. Attention 41,943,040 x4 =
    # 167,772,160. MLP 3*4096*14336 = 176,160,768: dense on 16 even layers = 2,818,572,288; experts x16 on 16 odd
    # layers = 45,097,156,608; router 4096*16*16 = 1,048,576. embed x2 = 2*65536*4096 = 536,870,912. norms
    # 32*8192 + 4096 = 266,240 -> 51,570,323,328 ("52B total")
    assert model.total_params == 51_570_323_328
    # active = total - 16 x 14 x 176,160,768 (39,460,012,032) = 12,110,311,296 ("12B active")
    assert model.active_params == 12_110_311_296


def test_absent_or_null_kv_heads_means_mha(tmp_path):
    cfg = json.loads((CONFIGS / "qwen3-0.6b.json").read_text())
    for value in (None, "absent"):
        doc = (
            dict(cfg, num_key_value_heads=value)
            if value is None
            else {k: v for k, v in cfg.items() if k != "num_key_value_heads"}
        )
        (tmp_path / "config.json").write_text(json.dumps(doc))
        assert load_model(str(tmp_path)).num_key_value_heads == 16  # = num_attention_heads
