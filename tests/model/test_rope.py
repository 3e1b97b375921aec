"""kneecap.model.rope: the RoPE cos/sin caches vLLM builds at load, by kind and release (the rules its docstring cites;
tests/plan/test_plan_engine_startup_logs.py checks them against the buffers the vLLM CPU build really holds)."""

from __future__ import annotations

from kneecap.model import rope
from kneecap.model.hf_config import from_hf_config

_BASE = {
    "architectures": ["LlamaForCausalLM"],
    "model_type": "llama",
    "hidden_size": 512,
    "intermediate_size": 1024,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "vocab_size": 1000,
    "max_position_embeddings": 32_768,
    "rope_theta": 10_000.0,
}


def _caches(**over):
    cfg = {**_BASE, **over}
    return from_hf_config(cfg, name="t", source="test").rope_caches


def _rows(caches, release=(0, 19)):
    return [(rope.cache_rows(c, release), c.rotary_dim, c.element_bytes) for c in caches]


def test_plain_llama3_and_ntk_rope_span_max_position_embeddings():
    assert _rows(_caches()) == [(32_768, 128, 2)]
    llama3 = {"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
              "original_max_position_embeddings": 8192}  # fmt: skip
    assert _rows(_caches(rope_scaling=llama3)) == [(32_768, 128, 2)]
    assert _rows(_caches(rope_scaling={"rope_type": "ntk", "factor": 4.0})) == [(32_768, 128, 2)]


def test_linear_scaling_multiplies_the_rows_and_partial_rotary_narrows_them():
    assert _rows(_caches(rope_scaling={"rope_type": "linear", "factor": 4.0})) == [(131_072, 128, 2)]
    # a factor that does not divide: torch.arange over a float end rounds up
    assert _rows(_caches(rope_scaling={"type": "linear", "factor": 1.5}, max_position_embeddings=1001)) == [
        (1502, 128, 2)
    ]
    for key in ("partial_rotary_factor", "rotary_pct", "rotary_emb_fraction"):
        assert _rows(_caches(**{key: 0.25})) == [(32_768, 32, 2)], key


def test_dynamic_ntk_rows_change_at_vllm_0_22():
    caches = _caches(rope_scaling={"rope_type": "dynamic", "factor": 2.0})
    assert _rows(caches, (0, 11, 0)) == _rows(caches, (0, 21)) == [(65_536, 128, 2)]
    assert _rows(caches, (0, 22)) == _rows(caches, (0, 32, 0)) == [(32_768, 128, 2)]
    # the alpha form never scales the rows
    assert _rows(_caches(rope_scaling={"rope_type": "dynamic", "alpha": 2.0}), (0, 11)) == [(32_768, 128, 2)]


def test_yarn_spans_the_original_positions_times_the_factor():
    yarn = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 8192}
    assert _rows(_caches(rope_scaling=yarn)) == [(32_768, 128, 2)]
    # no original length: vLLM's get_rope needs it, kneecap counts nothing rather than guess
    assert _caches(rope_scaling={"rope_type": "yarn", "factor": 4.0}) == ()


def test_longrope_holds_the_short_and_the_long_cache():
    lr = {"type": "su", "short_factor": [1.0] * 64, "long_factor": [2.0] * 64}  # vLLM renames "su" to longrope
    # Phi-3 keeps original_max_position_embeddings at the top level; vLLM copies it into the RoPE parameters
    assert _rows(_caches(rope_scaling=lr, original_max_position_embeddings=4096)) == [(4096 + 32_768, 128, 2)]


def test_gemma3_builds_a_cache_for_its_sliding_layers_and_one_for_its_full_layers():
    gemma = {**_BASE, "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text", "num_hidden_layers": 6,
             "sliding_window": 512, "rope_theta": 1_000_000.0, "rope_local_base_freq": 10_000.0}  # fmt: skip
    scaled = from_hf_config({**gemma, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}, name="g", source="t")
    assert sorted(_rows(scaled.rope_caches)) == [(32_768, 128, 2), (262_144, 128, 2)]
    # transformers 5 writes the two sets per layer type: the same two caches
    v5 = {k: v for k, v in gemma.items() if k not in ("rope_theta", "rope_local_base_freq")}
    v5["rope_parameters"] = {
        "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 1_000_000.0},
        "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
    }
    assert from_hf_config(v5, name="g", source="t").rope_caches == scaled.rope_caches
    # the same RoPE for both kinds is one shared buffer (get_rope's cache); different bases are two
    same = from_hf_config({**gemma, "rope_theta": 10_000.0}, name="g", source="t")
    assert _rows(same.rope_caches) == [(32_768, 128, 2)]
    assert _rows(from_hf_config(gemma, name="g", source="t").rope_caches) == [(32_768, 128, 2)] * 2


def test_gpt_oss_asks_for_a_float32_cache():
    # gpt-oss's config (openai/gpt-oss-20b): YaRN x 32 over 4,096 original positions, head_dim 64
    cfg = {**_BASE, "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss", "head_dim": 64,
           "num_local_experts": 4, "num_experts_per_tok": 2, "max_position_embeddings": 131_072,
           "rope_scaling": {"rope_type": "yarn", "factor": 32.0, "original_max_position_embeddings": 4096}}  # fmt: skip
    caches = from_hf_config(cfg, name="o", source="t").rope_caches
    assert _rows(caches) == [(131_072, 64, 4)]
    assert rope.cache_bytes(caches, (0, 19)) == 32 * 2**20


def test_what_is_not_modelled_counts_nothing():
    assert _caches(rope_scaling={"rope_type": "default", "mrope_section": [16, 24, 24]}) == ()  # multimodal RoPE
    assert _caches(rope_scaling={"rope_type": "longrope_v9", "factor": 2.0}) == ()  # a kind not read
    assert _caches(position_embedding_type="alibi") == ()
    abridged = {k: v for k, v in _BASE.items() if k != "rope_theta"}  # a config that does not state its RoPE
    assert from_hf_config(abridged, name="a", source="t").rope_caches == ()
    # a model type kneecap reads as a generic decoder: plain RoPE yes, scaled or partial no (its file is not read)
    generic = {**_BASE, "architectures": ["SomeNewForCausalLM"], "model_type": "some_new"}
    assert _rows(from_hf_config(generic, name="n", source="t").rope_caches) == [(32_768, 128, 2)]
    linear = {**generic, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}
    assert from_hf_config(linear, name="n", source="t").rope_caches == ()
    assert from_hf_config({**generic, "partial_rotary_factor": 0.5}, name="n", source="t").rope_caches == ()


def test_describe_names_rows_dims_and_scaling():
    caches = _caches(rope_scaling={"rope_type": "linear", "factor": 8.0})
    assert rope.describe(caches, (0, 19)) == "262,144 x 128 linear x 8"
