"""Every preset against hand-computed numbers from its published config (arithmetic in the comments).

Parameter formulas: see kneecap.model.params. h = hidden, L = layers, V = vocab.
"""

from __future__ import annotations

import json

import pytest

from kneecap.model import load_model, param_breakdown, preset_names
from kneecap.model.kv import kv_bytes_per_token
from kneecap.model.presets import PRESET_DIR, preset_data

# name, total_params, active_params, kv bytes/token in bf16, {kind: layers}
ROWS = [
    # Llama-3.1-8B: embed = lm_head = 128256*4096 = 525,336,576; attn/layer q,o 4096*4096 = 16,777,216 each,
    # k,v 4096*1024 = 4,194,304 each -> 41,943,040 x32 = 1,342,177,280; MLP 3*4096*14336 = 176,160,768 x32 =
    # 5,637,144,576; norms 32*2*4096 + 4096 = 266,240; total 8,030,261,248. KV 32*2*8*128*2 = 131,072.
    ("llama-3.1-8b", 8_030_261_248, 8_030_261_248, 131_072, {"full_attention": 32}),
    # 70B: embed x2 = 2*128256*8192 = 2,101,346,304; attn 2*8192^2 + 2*8192*1024 = 150,994,944 x80 =
    # 12,079,595,520; MLP 3*8192*28672 = 704,643,072 x80 = 56,371,445,760; norms 80*16384 + 8192 = 1,318,912.
    # KV 80*2*8*128*2 = 327,680 (seed 003's number).
    ("llama-3.1-70b", 70_553_706_496, 70_553_706_496, 327_680, {"full_attention": 80}),
    # 405B: embed x2 = 4,202,692,608; attn 2*16384^2 + 2*16384*1024 = 570,425,344 x126 = 71,873,593,344;
    # MLP 3*16384*53248 = 2,617,245,696 x126 = 329,772,957,696; norms 126*32768 + 16384 = 4,145,152.
    # KV 126*2*8*128*2 = 516,096.
    ("llama-3.1-405b", 405_853_388_800, 405_853_388_800, 516_096, {"full_attention": 126}),
    # gqa-70b: synthetic, 70e9 exactly (seed 003); KV 2*80*8*128*2 = 327,680.
    ("gqa-70b", 70_000_000_000, 70_000_000_000, 327_680, {"full_attention": 80}),
    # Mixtral: embed x2 = 2*32000*4096 = 262,144,000; attn 41,943,040 x32 = 1,342,177,280; expert 3*4096*14336 =
    # 176,160,768, x8 x32 = 45,097,156,608; router 4096*8*32 = 1,048,576; norms 266,240.
    # active = total - 32*6*176,160,768 (33,822,867,456) = 12,879,925,248. KV 32*2*8*128*2 = 131,072.
    ("mixtral-8x7b", 46_702_792_704, 12_879_925_248, 131_072, {"full_attention": 32}),
    # Qwen3-30B-A3B: attn q,o 2048*4096 = 8,388,608 each, k,v 2048*512 = 1,048,576 each, q/k norm 256 ->
    # 18,874,624 x48 = 905,981,952; expert 3*2048*768 = 4,718,592, x128 x48 = 28,991,029,248; router
    # 2048*128*48 = 12,582,912; embed x2 = 2*151936*2048 = 622,329,856; norms 48*4096 + 2048 = 198,656.
    # active = total - 48*120*4,718,592 (27,179,089,920) = 3,353,032,704. KV 48*2*4*128*2 = 98,304.
    ("qwen3-30b-a3b", 30_532_122_624, 3_353_032_704, 98_304, {"full_attention": 48}),
    # Qwen3-235B-A22B: attn q,o 4096*8192 each, k,v 4096*512 each, norms 256 -> 71,303,424 x94 = 6,702,521,856;
    # expert 3*4096*1536 = 18,874,368, x128 x94 = 227,096,395,776; router 4096*128*94 = 49,283,072;
    # embed x2 = 1,244,659,712; norms 94*8192 + 4096 = 774,144.
    # active = total - 94*120*18,874,368 (212,902,871,040) = 22,190,763,520. KV 94*2*4*128*2 = 192,512.
    ("qwen3-235b-a22b", 235_093_634_560, 22_190_763_520, 192_512, {"full_attention": 94}),
    # gpt-oss-120b: attn q,o 2880*4096 = 11,796,480 each, k,v 2880*512 = 1,474,560 each, biases 4096+512+512+2880,
    # sinks 64 -> 26,550,144 x36 = 955,805,184; expert gate_up 2880*5760 + 5760, down 2880*2880 + 2880 =
    # 24,891,840, x128 x36 = 114,701,598,720; router (2880*128 + 128) x36 = 13,275,648; embed x2 = 2*201088*2880 =
    # 1,158,266,880; norms 36*5760 + 2880 = 210,240. OpenAI: 116.83B.
    # active = total - 36*124*24,891,840 (111,117,173,760) = 5,711,982,912. KV 36*2*8*64*2 = 73,728.
    ("gpt-oss-120b", 116_829_156_672, 5_711_982_912, 73_728, {"sliding_attention": 18, "full_attention": 18}),
    # gpt-oss-20b: attn 26,550,144 x24 = 637,203,456; experts 24,891,840*32*24 = 19,116,933,120; router
    # (2880*32 + 32)*24 = 2,212,608; embed x2 1,158,266,880; norms 24*5760 + 2880 = 141,120. OpenAI: 20.91B.
    # active = total - 24*28*24,891,840 (16,727,316,480) = 4,187,440,704. KV 24*2*8*64*2 = 49,152.
    ("gpt-oss-20b", 20_914_757_184, 4_187_440_704, 49_152, {"sliding_attention": 12, "full_attention": 12}),
    # DeepSeek-V3 MLA attn/layer: q_a 7168*1536 = 11,010,048 + norm 1536; q_b 1536*128*192 = 37,748,736;
    # kv_a 7168*576 = 4,128,768 + norm 512; kv_b 512*128*256 = 16,777,216; o 128*128*7168 = 117,440,512 ->
    # 187,107,328 x61 = 11,413,547,008. Dense MLP (3 layers) 3*7168*18432 = 396,361,728 x3 = 1,189,085,184.
    # MoE (58 layers): expert 3*7168*2048 = 44,040,192, x256 x58 = 653,908,770,816; shared 44,040,192 x58 =
    # 2,554,331,136; router (7168*256 + 256) x58 = 106,445,312. embed x2 = 2*129280*7168 = 1,853,358,080;
    # norms 61*2*7168 + 7168 = 881,664. Total 671,026,419,200 (MTP layer excluded).
    # active = total - 58*248*44,040,192 (633,474,121,728) = 37,552,297,472.
    # KV: 61 layers x (512 + 64) x 2 B = 70,272 (not 2 x 128 heads x 192).
    ("deepseek-v3", 671_026_419_200, 37_552_297_472, 70_272, {"mla": 61}),
    # Kimi-K2: MLA attn/layer with 64 heads: 11,010,048 + 1536 + 1536*64*192 (18,874,368) + 4,128,768 + 512 +
    # 512*64*256 (8,388,608) + 64*128*7168 (58,720,256) = 101,124,096 x61 = 6,168,569,856; dense 396,361,728;
    # experts 44,040,192*384*60 = 1,014,686,023,680; shared 44,040,192*60 = 2,642,411,520; router
    # (7168*384 + 384)*60 = 165,173,760; embed x2 = 2*163840*7168 = 2,348,810,240; norms 881,664.
    # active = total - 60*376*44,040,192 (993,546,731,520) = 32,861,500,928. KV 61*576*2 = 70,272.
    ("kimi-k2", 1_026_408_232_448, 32_861_500_928, 70_272, {"mla": 61}),
    ("kimi-k2.5", 1_026_408_232_448, 32_861_500_928, 70_272, {"mla": 61}),  # same text model as Kimi-K2
    # Qwen3-Next-80B: full attn (gated: q 2048*16*256*2 = 16,777,216; k,v 2048*512 each; o 4096*2048;
    # norms 512) = 27,263,488 x12 = 327,161,856; DeltaNet in_proj 2048*(2*2048 + 2*4096) = 25,165,824 + ba
    # 2048*64 = 131,072, conv (4096+4096)*4 = 32,768, dt+A 64, norm 128, out 4096*2048 = 8,388,608 ->
    # 33,718,464 x36 = 1,213,864,704; experts 3*2048*512 = 3,145,728 x512 x48 = 77,309,411,328; shared
    # (3,145,728 + 2048) x48 = 151,093,248; router 2048*512*48 = 50,331,648; embed x2 622,329,856; norms 198,656.
    # active = total - 48*502*3,145,728 (75,799,461,888) = 3,874,929,408. KV 12*2*2*256*2 = 24,576.
    ("qwen3-next-80b-a3b", 79_674_391_296, 3_874_929_408, 24_576, {"linear_attention": 36, "full_attention": 12}),
    # Qwen3.5-397B (text): full attn q 4096*32*256*2 = 67,108,864, k,v 4096*512 each, o 8192*4096, norms 512 =
    # 104,858,112 x15 = 1,572,871,680; DeltaNet in_proj 4096*(4096 + 8192 + 8192) = 83,886,080 + ba 4096*128 =
    # 524,288, conv 12288*4 = 49,152, dt+A 128, norm 128, out 8192*4096 = 33,554,432 -> 118,014,208 x45 =
    # 5,310,639,360; experts 3*4096*1024 = 12,582,912 x512 x60 = 386,547,056,640; shared (12,582,912 + 4096)
    # x60 = 755,220,480; router 4096*512*60 = 125,829,120; embed x2 = 2*248320*4096 = 2,034,237,440;
    # norms 60*8192 + 4096 = 495,616. active = total - 60*502*12,582,912 (378,997,309,440) = 17,349,040,896.
    # KV: only 15 full layers: 15*2*2*256*2 = 30,720 (seed 000's all-60-layers formula: 122,880, 4x).
    ("qwen3.5-397b-a17b", 396_346_350_336, 17_349_040_896, 30_720, {"linear_attention": 45, "full_attention": 15}),
    # Gemma-3-27B (text): attn q,o 5376*4096 = 22,020,096 each, k,v 5376*2048 = 11,010,048 each, q/k norm 256 =
    # 66,060,544 x62 = 4,095,753,728; MLP 3*5376*21504 = 346,816,512 x62 = 21,502,623,744; embed 262208*5376 =
    # 1,409,630,208 (tied, no lm_head); norms 62*4*5376 + 5376 = 1,338,624. KV 62*2*16*128*2 = 507,904.
    ("gemma-3-27b", 27_009_346_304, 27_009_346_304, 507_904, {"sliding_attention": 52, "full_attention": 10}),
]


def test_every_preset_has_a_row_and_a_source():
    assert sorted(r[0] for r in ROWS) == preset_names()
    for name in preset_names():
        doc = preset_data(name)
        assert doc["_source"] and doc["published"]["source"], name


@pytest.mark.parametrize("name,total,active,kv_per_token,layers", ROWS, ids=[r[0] for r in ROWS])
def test_preset_matches_hand_computed_values(name, total, active, kv_per_token, layers):
    model = load_model(name)
    assert model.total_params == total
    assert model.active_params == active
    assert kv_bytes_per_token(model, 2) == kv_per_token
    assert {k: model.count_layers(k) for k in layers} == layers
    assert sum(param_breakdown(model).values()) == total


# Published totals (model cards; see each preset's "published.source") and how close the architecture count is.
PUBLISHED = [
    ("llama-3.1-8b", 0.001),
    ("llama-3.1-70b", 0.001),
    ("llama-3.1-405b", 0.005),
    ("mixtral-8x7b", 0.001),
    ("qwen3-30b-a3b", 0.002),
    ("qwen3-235b-a22b", 0.001),
    ("gpt-oss-120b", 0.0001),
    ("gpt-oss-20b", 0.0005),
    ("deepseek-v3", 0.001),
    ("qwen3.5-397b-a17b", 0.003),  # 397B on the card includes the vision tower
    ("qwen3-next-80b-a3b", 0.005),
    ("gemma-3-27b", 0.001),
    ("kimi-k2", 0.03),
    ("kimi-k2.5", 0.03),  # "1T" is rounded; the architecture gives 1.026T
]


@pytest.mark.parametrize("name,rel_tol", PUBLISHED, ids=[p[0] for p in PUBLISHED])
def test_total_params_close_to_published(name, rel_tol):
    published = preset_data(name)["published"]["total_params"]
    assert load_model(name).total_params == pytest.approx(published, rel=rel_tol)


# Active counts published with three significant figures (the others are only a model name such as "A3B").
# gpt-oss: OpenAI's 5.13B / 3.61B leave the input embedding (201088 x 2880 = 579,133,440) out; we count it.
ACTIVE = [
    ("mixtral-8x7b", 0, 0.002),
    ("qwen3-30b-a3b", 0, 0.02),
    ("gpt-oss-120b", 579_133_440, 0.002),
    ("gpt-oss-20b", 579_133_440, 0.005),
]


@pytest.mark.parametrize("name,embedding,rel_tol", ACTIVE, ids=[a[0] for a in ACTIVE])
def test_active_params_close_to_published(name, embedding, rel_tol):
    published = preset_data(name)["published"]["active_params"]
    assert load_model(name).active_params - embedding == pytest.approx(published, rel=rel_tol)


def test_mla_latent_is_not_per_head():
    model = load_model("deepseek-v3")
    assert (model.kv_lora_rank, model.qk_rope_head_dim) == (512, 64)
    assert set(model.layer_types) == {"mla"}
    assert kv_bytes_per_token(model, 2) == 70_272  # 61 x 576 x 2, not 61 x 2 x 128 x 192 x 2
    assert any("71x" in note for note in model.notes)  # per-head K 192 + V 128 for 128 heads: 4,997,120 B


def test_hybrid_note_states_naive_error_and_state():
    model = load_model("qwen3.5-397b-a17b")
    # recurrent 64 x 128 x 128 x 4 B (mamba_ssm_dtype float32) = 4,194,304;
    # conv (4 - 1) x (2 x 16 x 128 + 64 x 128) x 2 B = 73,728 -> 4,268,032 per DeltaNet layer
    assert model.linear_state_bytes_per_layer == 4_268_032
    note = " ".join(model.notes)
    assert "122,880" in note and "30,720" in note and "4.0x" in note
    # Qwen3-Next has no mamba_ssm_dtype: state in bf16: 32 x 128 x 128 x 2 = 1,048,576 + 3 x (4096 + 4096) x 2
    # = 49,152 -> 1,097,728
    assert load_model("qwen3-next-80b-a3b").linear_state_bytes_per_layer == 1_097_728


def test_sliding_windows():
    assert load_model("gpt-oss-120b").sliding_window == 128
    assert load_model("gpt-oss-120b").layer_types[:2] == ("sliding_attention", "full_attention")
    gemma = load_model("gemma-3-27b")
    assert gemma.sliding_window == 1024
    assert [i + 1 for i, t in enumerate(gemma.layer_types) if t == "full_attention"] == list(range(6, 61, 6))


def test_preset_files_are_config_json_like():
    for path in PRESET_DIR.glob("*.json"):
        doc = json.loads(path.read_text())
        assert "model_type" in doc["config"], path.name
