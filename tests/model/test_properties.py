"""Invariants of the config adapter on generated configs (hypothesis): no formula is recomputed here."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.model import from_hf_config, param_breakdown
from kneecap.model.kv import kv_bytes_per_token


@st.composite
def dense_configs(draw):
    kv_heads = draw(st.sampled_from([1, 2, 4, 8]))
    heads = kv_heads * draw(st.sampled_from([1, 2, 4]))
    head_dim = draw(st.sampled_from([16, 64, 128]))
    return {
        "model_type": draw(st.sampled_from(["llama", "qwen2", "qwen3", "mistral", "gemma"])),
        "num_hidden_layers": draw(st.integers(1, 12)),
        "hidden_size": heads * head_dim,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "intermediate_size": draw(st.integers(1, 4096)),
        "vocab_size": draw(st.integers(1, 50_000)),
        "tie_word_embeddings": draw(st.booleans()),
    }


def _model(cfg):
    return from_hf_config(cfg, name="generated", source="generated")


@settings(max_examples=60, deadline=None)
@given(dense_configs())
def test_each_layer_adds_the_same_params_and_kv(cfg):
    models = [_model(dict(cfg, num_hidden_layers=cfg["num_hidden_layers"] + k)) for k in range(3)]
    totals = [m.total_params for m in models]
    kvs = [kv_bytes_per_token(m, 2) for m in models]
    assert totals[2] - totals[1] == totals[1] - totals[0] > 0
    assert kvs[2] - kvs[1] == kvs[1] - kvs[0] > 0
    for m in models:
        assert sum(param_breakdown(m).values()) == m.total_params == m.active_params


@settings(max_examples=60, deadline=None)
@given(dense_configs(), st.integers(2, 64), st.data())
def test_moe_total_ignores_top_k_and_active_grows_with_it(cfg, experts, data):
    cfg = dict(cfg, model_type="mixtral", num_local_experts=experts)
    k1 = data.draw(st.integers(1, experts - 1))
    small, big = _model(dict(cfg, num_experts_per_tok=k1)), _model(dict(cfg, num_experts_per_tok=k1 + 1))
    assert small.total_params == big.total_params
    assert small.active_params < big.active_params <= big.total_params
    assert big.active_params - small.active_params == small.num_moe_layers * small.expert_params


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 6), st.sampled_from([2, 3, 4]), st.sampled_from([1, 2]), st.sampled_from([64, 128, 256]))
def test_hybrid_kv_is_the_full_layers_share(groups, interval, kv_heads, head_dim):
    layers = groups * interval
    cfg = {
        "model_type": "qwen3_next",
        "num_hidden_layers": layers,
        "hidden_size": 256,
        "num_attention_heads": 4,
        "num_key_value_heads": kv_heads,
        "head_dim": head_dim,
        "vocab_size": 1000,
        "intermediate_size": 512,
        "full_attention_interval": interval,
        "linear_num_key_heads": 2,
        "linear_num_value_heads": 4,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
        "linear_conv_kernel_dim": 4,
    }
    hybrid = _model(cfg)
    all_full = _model(dict(cfg, full_attention_interval=1))
    assert hybrid.count_layers("full_attention") == groups
    assert kv_bytes_per_token(all_full, 2) == interval * kv_bytes_per_token(hybrid, 2)
    assert hybrid.linear_state_bytes_per_layer > 0 and all_full.count_layers("linear_attention") == 0
