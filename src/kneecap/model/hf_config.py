"""Model.from_hf_config: a Hugging Face config.json dict -> Model. Pure: no files, no network.

Owns which model_types are understood, how the per-layer attention kinds are derived (layer_types,
sliding_window_pattern, full_attention_interval, chunked attention, MLA) and the linear-attention state
size; parameter counting lives in params.py, dtypes in quant.py, file reading in resolve.py.
Multimodal wrappers (Gemma 3, Qwen3.5, Kimi-K2.5, Llama 4) are read through their `text_config`.
A model_type not listed in MODEL_TYPES whose config has the standard decoder fields (num_hidden_layers,
hidden_size, num_attention_heads, optional num_key_value_heads / head_dim) is read as a generic decoder,
with a note saying so; one with recurrent (Mamba/SSM) or cross-attention fields is refused, since a
generic decoder would get its cache wrong. The KV-cache dtype a checkpoint was calibrated for is read
from quant.kv_dtype_from_config.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

from kneecap.errors import KneecapError
from kneecap.model import kv, mamba, params, quant, rope
from kneecap.model.spec import MAX_LAYERS, Model
from kneecap.model.weights import weight_bytes

# model_type (of the text model) -> attention family
MODEL_TYPES = {
    # dense GQA / MQA / MHA
    "llama": "gqa",
    "mistral": "gqa",
    "qwen2": "gqa",
    "qwen3": "gqa",
    "granite": "gqa",
    "phi3": "gqa",
    "gemma": "gqa",
    "gemma2": "gqa",
    "gemma3_text": "gqa",
    "cohere": "gqa",
    "cohere2": "gqa",
    # dense MHA/GQA with a two-matrix GELU MLP and biases (kneecap.model.params.GELU_MLP_TYPES)
    "phi": "gqa",
    "starcoder2": "gqa",
    # MoE with GQA attention
    "mixtral": "gqa",
    "qwen2_moe": "gqa",
    "qwen3_moe": "gqa",
    "gpt_oss": "gqa",
    "llama4_text": "gqa",
    "glm4_moe": "gqa",
    "qwen3_vl_text": "gqa",
    "qwen3_vl_moe_text": "gqa",
    # Multi-head Latent Attention (deepseek_v32 and glm_moe_dsa add DeepSeek Sparse Attention's indexer, see
    # _DSA_NOTE)
    "deepseek_v2": "mla",
    "deepseek_v3": "mla",
    "kimi_k2": "mla",
    "deepseek_v32": "mla",
    "glm_moe_dsa": "mla",
    # hybrid Gated DeltaNet + gated full attention
    "qwen3_next": "gdn",
    "qwen3_5_text": "gdn",
    "qwen3_5_moe_text": "gdn",
    # hybrid Mamba-2 + attention (kneecap.model.mamba): Nemotron-H, Granite 4.0-H (MoE or dense), Falcon-H1
    # (attention and Mamba-2 side by side in every block)
    "nemotron_h": "mamba2",
    "granitemoehybrid": "granite_hybrid",
    "falcon_h1": "falcon_h1",
    # hybrid Mamba-1 + attention + MoE (kneecap.model.mamba)
    "jamba": "mamba1",
}
# Wrapper model_type -> the text model_type used when text_config does not name one.
_WRAPPERS = {
    "gemma3": "gemma3_text",
    "llama4": "llama4_text",
    "kimi_k25": "kimi_k2",
    "qwen3_5_moe": "qwen3_5_moe_text",
    "qwen3_5": "qwen3_5_text",
    "mistral3": "mistral",
    "qwen3_vl": "qwen3_vl_text",
    "qwen3_vl_moe": "qwen3_vl_moe_text",
}
# DeepSeek-V3.2 and GLM-5 (DeepSeek Sparse Attention): besides the MLA latent, the lightning indexer keeps one
# index_head_dim key per token per layer (vLLM stores it in fp8 with per-block scales); kneecap does not count it.
_DSA_NOTE = (
    "DeepSeek Sparse Attention: the indexer also caches index_head_dim {dim} per token per layer "
    "(an fp8 cache with scales in vLLM), which is not counted here — the MLA latent is"
)
_DEEPSEEK_STYLE_MOE = ("deepseek_v2", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa", "glm4_moe")
# HF config-class defaults for tie_word_embeddings when the key is absent (Gemma ties, the others do not).
_TIED_BY_DEFAULT = ("gemma", "gemma2", "gemma3_text", "cohere", "cohere2")
# Fields a published config leaves to its HF config class (only the keys it changes are saved): google/gemma-3-27b-it's
# text_config has no vocab_size or max_position_embeddings; transformers' Gemma3TextConfig defaults them
# (configuration_gemma3.py: vocab_size 262_208, max_position_embeddings 131_072; the same in 4.50 and 5.x).
# head_dim 256 is Gemma3TextConfig's default too (gemma-3-12b-it's text_config omits it; 3840 / 16 heads would be 240).
_CLASS_DEFAULTS = {"gemma3_text": {"vocab_size": 262_208, "max_position_embeddings": 131_072, "head_dim": 256}}
_SSM_FAMILIES = ("mamba1", "mamba2", "granite_hybrid", "falcon_h1")
_MIXER_NAMES = {
    "gdn": "Gated DeltaNet",
    "mamba2": "Mamba-2",
    "mamba1": "Mamba",
    "granite_hybrid": "Mamba-2",
    "falcon_h1": "Mamba-2",
}


# A config.json is untrusted input: a value of a shape no published config has (found by tests/fuzz) must
# still end as a one-line KneecapError naming the file, never as a traceback.
_SHAPE_ERRORS = (TypeError, ValueError, KeyError, IndexError, AttributeError, ZeroDivisionError, OverflowError)


def from_hf_config(
    config: Mapping[str, Any],
    *,
    name: str,
    source: str,
    checkpoint_bytes: int | None = None,
    extra_notes: tuple[str, ...] = (),
) -> Model:
    """Build a Model from a config.json dict; every missing or bad field becomes a one-line KneecapError."""
    if not isinstance(config, Mapping):
        raise KneecapError(
            f"{source}: config.json must hold a JSON object, got {type(config).__name__}",
            "point at the model's config.json",
        )
    try:
        return _from_hf_config(
            config, name=name, source=source, checkpoint_bytes=checkpoint_bytes, extra_notes=extra_notes
        )
    except _SHAPE_ERRORS as exc:
        raise KneecapError(
            f"{source}: a field has a type or value kneecap cannot use "
            f"({type(exc).__name__}: {' '.join(str(exc).split())[:120]})",
            "compare the file with the model's published config.json",
        ) from None


def _from_hf_config(
    config: Mapping[str, Any], *, name: str, source: str, checkpoint_bytes: int | None, extra_notes: tuple[str, ...]
) -> Model:
    cfg, model_type, architecture = _text_config(config, source)
    family = MODEL_TYPES.get(model_type)
    generic_note = None
    if family is None:
        _refuse_unmodelled(cfg, model_type, architecture, source)
        family = "gqa"
        generic_note = (
            f"model_type {model_type!r} ({architecture}) is not one kneecap knows: read as a generic "
            "decoder from num_hidden_layers, hidden_size, num_attention_heads, num_key_value_heads and "
            "head_dim (KV cache exact for standard attention); parameters counted as Llama-style "
            "blocks (SwiGLU MLP, no biases), so pass --params for the exact count"
        )
    num_layers = _pos_int(cfg, "num_hidden_layers", source)
    hidden = _pos_int(cfg, "hidden_size", source)
    heads = _pos_int(cfg, "num_attention_heads", source)
    _pos_int(cfg, "vocab_size", source)
    # absent or null num_key_value_heads means MHA (the HF config classes default it to num_attention_heads)
    kv_heads = _pos_int(cfg, "num_key_value_heads", source) if cfg.get("num_key_value_heads") is not None else heads
    cfg["num_key_value_heads"] = kv_heads
    notes: list[str] = list(extra_notes) + ([generic_note] if generic_note else [])

    if family == "mla":
        for key in ("kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"):
            _pos_int(cfg, key, source)
        if cfg.get("q_lora_rank") is not None:
            _pos_int(cfg, "q_lora_rank", source)
        head_dim = cfg["qk_nope_head_dim"] + cfg["qk_rope_head_dim"]
    elif cfg.get("head_dim") is not None:
        head_dim = _pos_int(cfg, "head_dim", source)
    elif cfg.get("attention_head_dim") is not None:  # Nemotron-H spelling
        head_dim = _pos_int(cfg, "attention_head_dim", source)
    else:
        if hidden % heads:
            raise KneecapError(
                f"{source}: no head_dim and hidden_size {hidden} is not a multiple of num_attention_heads {heads}",
                f"add head_dim to {source}",
            )
        head_dim = hidden // heads
    cfg["head_dim"] = head_dim

    tied = bool(cfg.get("tie_word_embeddings", model_type in _TIED_BY_DEFAULT))
    if family in _SSM_FAMILIES:
        return _from_ssm_hybrid(
            cfg,
            family,
            name=name,
            source=source,
            architecture=architecture,
            head_dim=head_dim,
            tied=tied,
            checkpoint_bytes=checkpoint_bytes,
            notes=notes,
        )
    layer_types, window = _layer_types(cfg, model_type, family, num_layers, source, notes)
    moe_layers = _moe_layers(cfg, model_type, num_layers, source)
    if not all(moe_layers):  # dense MLP layers
        _pos_int(cfg, "intermediate_size_mlp" if "intermediate_size_mlp" in cfg else "intermediate_size", source)
    if any(moe_layers):  # routed experts
        _pos_int(cfg, "moe_intermediate_size" if "moe_intermediate_size" in cfg else "intermediate_size", source)
    if family == "gdn":
        for key in (
            "linear_num_key_heads",
            "linear_num_value_heads",
            "linear_key_head_dim",
            "linear_value_head_dim",
            "linear_conv_kernel_dim",
        ):
            _pos_int(cfg, key, source)

    count = params.count_params(cfg, model_type, layer_types, moe_layers, tied)
    encoder, tower = 0, None
    if isinstance(config.get("vision_config"), Mapping):
        try:
            encoder = params.vision_encoder_params(config["vision_config"], hidden, str(model_type)) or 0
            tokens = config.get("mm_tokens_per_image")
            tower = params.siglip_tower(config["vision_config"], tokens if isinstance(tokens, int) else None)
        except (KeyError, TypeError, ZeroDivisionError):
            encoder, tower = 0, None
        if encoder:
            notes.append(
                f"vision tower and projector: {encoder / 1e9:.3g}e9 parameters at 16 bits, loaded by vLLM "
                "beside the language model unless it serves text only (vLLM --language-model-only; kneecap "
                "--language-only leaves them out); the activation peak of vLLM's start-up profile of the tower is "
                "priced beside --overhead-gib"
            )
        else:
            notes.append(
                "the checkpoint has a vision encoder kneecap does not count (only SigLIP towers are "
                "counted): add its weights with --params, or plan text-only serving (--language-only)"
            )
    weights, qnotes = _weight_fields(cfg, count)
    notes += qnotes
    state_bytes = linear_state_bytes_per_layer(cfg) if "linear_attention" in layer_types else 0
    model = Model(
        name=name,
        source=source,
        architecture=architecture,
        num_hidden_layers=num_layers,
        hidden_size=hidden,
        num_attention_heads=heads,
        num_key_value_heads=kv_heads,
        head_dim=head_dim,
        vocab_size=cfg["vocab_size"],
        layer_types=tuple(layer_types),
        **weights,
        max_position_embeddings=cfg.get("max_position_embeddings"),
        intermediate_size=cfg.get("intermediate_size"),
        sliding_window=window,
        attention_chunked=any(n.startswith("chunked-local attention") for n in notes),
        encoder_params=encoder,
        vision_tower=tower if encoder else None,
        kv_lora_rank=cfg.get("kv_lora_rank") if family == "mla" else None,
        qk_rope_head_dim=cfg.get("qk_rope_head_dim") if family == "mla" else None,
        q_lora_rank=cfg.get("q_lora_rank") if family == "mla" else None,
        v_head_dim=cfg.get("v_head_dim") if family == "mla" else None,
        linear_state_bytes_per_layer=state_bytes,
        num_experts=count.num_experts,
        num_experts_per_tok=count.num_experts_per_tok,
        num_shared_experts=_num_shared(cfg, model_type) if count.num_moe_layers else 0,
        expert_params=count.expert_params if count.num_moe_layers else 0,
        num_moe_layers=count.num_moe_layers,
        checkpoint_bytes=checkpoint_bytes,
        rope_caches=(
            rope.rope_caches(cfg, model_type, layer_types, known_model=model_type in MODEL_TYPES)
            if family != "mla"
            else ()
        ),
    )
    notes += _kv_notes(model, cfg, family, num_layers)
    if generic_note and cfg.get("sliding_window") and "sliding_attention" not in layer_types:
        notes.append(
            f"sliding_window {cfg['sliding_window']} is in the config but, with no layer_types saying "
            "which layers slide, every layer is counted as full attention (an upper bound)"
        )
    if family == "mla" and cfg.get("index_head_dim"):
        notes.append(_DSA_NOTE.format(dim=cfg["index_head_dim"]))
    if family == "mla" and cfg.get("num_nextn_predict_layers"):
        notes.append(
            f"{cfg['num_nextn_predict_layers']} multi-token-prediction layer(s) ship in the checkpoint "
            "but are loaded only for speculative decoding; not counted in total_params"
        )
    return _with_notes(model, notes)


def _text_config(config: Mapping, source: str) -> tuple[dict, str, str]:
    """Merge a wrapper's text_config over its top level; return (cfg, text model_type, architecture)."""
    archs = config.get("architectures") or []
    if isinstance(archs, str):
        archs = [archs]
    architecture = str(archs[0]) if isinstance(archs, list) and archs else str(config.get("model_type", "unknown"))
    top_type = config.get("model_type")
    text = config.get("text_config")
    if isinstance(text, Mapping):
        cfg = {k: v for k, v in config.items() if k not in ("text_config", "vision_config", "audio_config")}
        cfg.update(text)
        model_type = text.get("model_type") or _WRAPPERS.get(str(top_type))
    else:
        cfg = dict(config)
        model_type = (
            _WRAPPERS.get(str(top_type), top_type) if top_type in _WRAPPERS and "num_hidden_layers" in cfg else top_type
        )
    if model_type is not None and not isinstance(model_type, str):
        raise KneecapError(
            f"{source}: model_type must be a string, got {type(model_type).__name__}",
            f'set "model_type" to one of: {", ".join(sorted(MODEL_TYPES))}',
        )
    if model_type is None:
        raise KneecapError(
            f"{source}: config.json has no model_type", f'add "model_type" (one of: {", ".join(sorted(MODEL_TYPES))})'
        )
    for key, value in _CLASS_DEFAULTS.get(str(model_type), {}).items():
        if cfg.get(key) is None:
            cfg[key] = value
    if model_type not in MODEL_TYPES:
        for key in _GENERIC_NEEDS:  # a generic decoder needs these; name the first one missing
            if key not in cfg or cfg[key] is None:
                raise KneecapError(
                    f"{source}: unknown model_type {model_type!r} (architecture {architecture}) and no {key!r} to "
                    "read it as a generic decoder",
                    f"add {key} from the model's published config.json; known model types: "
                    f"{', '.join(sorted(MODEL_TYPES))}; or use a preset (kneecap plan --preset ...)",
                )
    return cfg, str(model_type), architecture


# The fields a generic decoder cannot do without (head_dim defaults to hidden_size / num_attention_heads,
# num_key_value_heads to num_attention_heads, as in the HF config classes).
_GENERIC_NEEDS = ("num_hidden_layers", "hidden_size", "num_attention_heads")
# Fields that say a model is not a plain decoder: recurrent (Mamba/SSM) mixers, cross-attention layers, a
# compressed (MLA-style) cache, per-layer block shapes, or layers whose KV heads / head_dim differ from the rest.
_UNMODELLED_MARKERS = (
    "hybrid_override_pattern",
    "layers_block_type",
    "attn_layer_indices",
    "mamba_d_state",
    "mamba_d_ssm",
    "mamba_n_heads",
    "ssm_state_size",
    "cross_attention_layers",
    "linear_attn_config",
    "kv_lora_rank",
    "block_configs",
    "compress_ratios",
    "global_head_dim",
    "num_global_key_value_heads",
    "attention_k_eq_v",
    "num_kv_shared_layers",
    "hybrid_layer_pattern",
    "swa_num_key_value_heads",
    "swa_head_dim",
    "v_head_dim",
    "sparse_attention_config",
    "index_head_dim",
)


def _refuse_unmodelled(cfg: Mapping, model_type: str, architecture: str, source: str) -> None:
    """A model_type read as a generic decoder must have nothing a generic decoder would get wrong."""
    found = [k for k in _UNMODELLED_MARKERS if cfg.get(k) is not None]
    layer_kinds = cfg.get("layer_types")
    if isinstance(layer_kinds, list):
        found += sorted(
            {
                f"layer_types {t!r}"
                for t in layer_kinds
                if t not in ("full_attention", "sliding_attention", "chunked_attention")
            }
        )
    if found:
        raise KneecapError(
            f"{source}: model_type {model_type!r} ({architecture}) is not one kneecap knows, and its "
            f"{', '.join(found[:3])} mean it is not a plain decoder (a generic reading would get the cache wrong)",
            f"known model types: {', '.join(sorted(MODEL_TYPES))}; or use a preset (kneecap plan --preset ...)",
        )


def _pos_int(cfg: Mapping, key: str, source: str) -> int:
    if key not in cfg or cfg[key] is None:
        raise KneecapError(
            f"{source}: config.json has no {key!r}, which the memory formula needs",
            f"add {key} from the model's published config.json",
        )
    value = cfg[key]
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise KneecapError(f"{source}: {key} must be a positive integer, got {value!r}", f"fix {key} in {source}")
    if key == "num_hidden_layers" and value > MAX_LAYERS:  # per-layer lists are built: bound them
        raise KneecapError(
            f"{source}: num_hidden_layers {value} is not a plausible layer count (> {MAX_LAYERS:,})",
            f"fix num_hidden_layers in {source}",
        )
    return value


def _layer_types(
    cfg: dict, model_type: str, family: str, n: int, source: str, notes: list[str]
) -> tuple[list[str], int | None]:
    """Per-layer attention kind and the sliding window (tokens) of the sliding layers."""
    if family == "mla":
        return ["mla"] * n, None
    window = cfg.get("sliding_window")
    explicit = cfg.get("layer_types")
    if explicit is not None:
        if not isinstance(explicit, list) or len(explicit) != n:
            raise KneecapError(
                f"{source}: layer_types has {len(explicit) if isinstance(explicit, list) else 0} "
                f"entries for {n} layers",
                f"make layer_types as long as num_hidden_layers in {source}",
            )
        mapping = {
            "full_attention": "full_attention",
            "sliding_attention": "sliding_attention",
            "chunked_attention": "sliding_attention",
            "linear_attention": "linear_attention",
        }
        bad = sorted({t for t in explicit if t not in mapping})
        if bad:
            raise KneecapError(f"{source}: unknown layer_types entries {bad}", f"use {', '.join(mapping)}")
        kinds = [mapping[t] for t in explicit]
        if "chunked_attention" in explicit:
            window = _pos_int(cfg, "attention_chunk_size", source)
            notes.append(_chunk_note(window, kinds))
    elif family == "gdn":
        interval = _pos_int(cfg, "full_attention_interval", source)
        kinds = ["full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(n)]
    elif model_type == "gemma2":
        # HF Gemma2Config: layer_types = sliding if (i + 1) % 2 else full (even layers slide)
        kinds = ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(n)]
    elif model_type in ("gemma3_text", "cohere2"):
        # HF Gemma3TextConfig: sliding_window_pattern 6 -> every 6th layer global, the rest slide; HF Cohere2Config
        # (Command R7B): sliding_window_pattern 4
        pattern = cfg.get("sliding_window_pattern", 6 if model_type == "gemma3_text" else 4)
        kinds = ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(n)]
    elif model_type == "llama4_text" and cfg.get("attention_chunk_size"):
        # HF Llama4TextConfig / Llama4TextDecoderLayer: use_chunked_attention = int((i + 1) % interval != 0)
        # (the RoPE layers), interval = no_rope_layer_interval (4); no_rope_layers overrides per layer
        interval = cfg.get("no_rope_layer_interval") or 4
        no_rope = cfg.get("no_rope_layers") or [int((i + 1) % interval != 0) for i in range(n)]
        kinds = ["sliding_attention" if no_rope[i] else "full_attention" for i in range(n)]
        window = _pos_int(cfg, "attention_chunk_size", source)
        notes.append(_chunk_note(window, kinds))
    elif model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe"):
        # HF Qwen2/3: sliding only when use_sliding_window, for layers >= max_window_layers
        if cfg.get("use_sliding_window") and window:
            start = cfg.get("max_window_layers", 0)
            kinds = ["sliding_attention" if i >= start else "full_attention" for i in range(n)]
        else:
            kinds, window = ["full_attention"] * n, None
    elif window and model_type in ("mistral", "mixtral", "phi3", "starcoder2", "phimoe"):
        # Mistral-7B-v0.1 style: every layer keeps `sliding_window` tokens. StarCoder2 too: vLLM 0.32.0 serves it
        # through its Transformers backend, and with no layer_types in the config (transformers 5.19's
        # Starcoder2Config has none) arg_utils.py sets CacheConfig.sliding_window = config.sliding_window, which
        # every Attention layer takes (attention.py: no per_layer_sliding_window -> cache_config.sliding_window);
        # modeling_starcoder2 masks every layer with a sliding window too. PhiMoE (Phi-3.5-MoE, Phi-mini-MoE) the
        # same way: transformers 5.19's PhimoeConfig has no layer_types and vLLM 0.32.0 phimoe.py builds every
        # Attention with cache_config only (no per_layer_sliding_window)
        kinds = ["sliding_attention"] * n
        if model_type == "phimoe":
            notes.append(
                f"sliding_window {window} with no layer_types: vLLM 0.32.0 gives every layer that window "
                "(CacheConfig.sliding_window; its phimoe model passes no per-layer window), so all "
                f"{n} layers are counted as sliding"
            )
    else:
        kinds = ["full_attention"] * n
    if "sliding_attention" in kinds:
        if not isinstance(window, int) or isinstance(window, bool) or window <= 0:
            raise KneecapError(
                f"{source}: sliding layers but sliding_window is {window!r}",
                f"set sliding_window to the window in tokens in {source}",
            )
        if model_type == "cohere2":  # vLLM commandr.py (0.32.0): a Cohere2 sliding layer sees sliding_window + 1
            window += 1
    else:
        window = None
    return kinds, window


def _chunk_note(chunk: int, kinds: list[str]) -> str:
    return (
        f"chunked-local attention (chunks of {chunk} tokens) on {kinds.count('sliding_attention')} of "
        f"{len(kinds)} layers is modelled as a sliding window of {chunk}: a chunked layer never holds more "
        f"than {chunk} tokens of a sequence"
    )


def _moe_layers(cfg: dict, model_type: str, n: int, source: str) -> list[bool]:
    """Which layers hold routed experts; also normalises num_experts / num_experts_per_tok in cfg."""
    experts = cfg.get("n_routed_experts") or cfg.get("num_local_experts") or cfg.get("num_experts") or 0
    if not experts:
        cfg["num_experts"] = 0
        return [False] * n
    cfg["num_experts"] = _pos_int({"num_experts": experts}, "num_experts", source)
    top_k = cfg.get("num_experts_per_tok") or cfg.get("experts_per_token")
    if not top_k:
        raise KneecapError(
            f"{source}: {experts} experts but no num_experts_per_tok", f"add num_experts_per_tok to {source}"
        )
    cfg["num_experts_per_tok"] = _pos_int({"num_experts_per_tok": top_k}, "num_experts_per_tok", source)
    if model_type in _DEEPSEEK_STYLE_MOE:
        first, freq = cfg.get("first_k_dense_replace", 0), cfg.get("moe_layer_freq", 1)
        return [i >= first and i % freq == 0 for i in range(n)]
    if model_type == "llama4_text":
        step = cfg.get("interleave_moe_layer_step", 1)
        return [(i + 1) % step == 0 for i in range(n)]
    if model_type in ("qwen2_moe", "qwen3_moe", "qwen3_next", "qwen3_5_moe_text", "qwen3_vl_moe_text"):
        only_mlp = set(cfg.get("mlp_only_layers") or [])
        step = cfg.get("decoder_sparse_step", 1)
        return [i not in only_mlp and (i + 1) % step == 0 for i in range(n)]
    return [True] * n  # mixtral, gpt_oss: every layer is MoE


def _num_shared(cfg: Mapping, model_type: str) -> int:
    if cfg.get("n_shared_experts"):
        return int(cfg["n_shared_experts"])
    if cfg.get("shared_expert_intermediate_size") or model_type == "llama4_text":
        return 1
    return 0


def linear_state_bytes_per_layer(cfg: Mapping) -> int:
    """Fixed per-sequence state of one Gated DeltaNet layer, bytes (whole layer, before TP).

    recurrent state: linear_num_value_heads x linear_value_head_dim x linear_key_head_dim x state dtype bytes
                     (mamba_ssm_dtype float32 -> 4; absent -> the model dtype)
    conv state:      (linear_conv_kernel_dim - 1) x (2 x linear_num_key_heads x linear_key_head_dim
                     + linear_num_value_heads x linear_value_head_dim) x model dtype bytes
    Source: vLLM MambaStateShapeCalculator.gated_delta_net_state_shape (conv_dim = head_k_dim x num_k_heads x 2
    + head_v_dim x num_v_heads, state_len = conv_kernel_size - 1; temporal = (num_v_heads, head_v_dim, head_k_dim))
    and MambaStateDtypeCalculator.gated_delta_net_state_dtype (conv in the model dtype, temporal in
    mamba_ssm_cache_dtype), vllm/model_executor/layers/mamba/mamba_utils.py.
    """
    model_bytes = {"bf16": 2, "fp16": 2, "fp32": 4}[quant.model_dtype(cfg)]
    ssm = cfg.get("mamba_ssm_dtype")
    state_bytes = mamba.STATE_BYTES.get(str(ssm), model_bytes) if ssm else model_bytes
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    recurrent = nv * dv * dk * state_bytes
    conv = (cfg["linear_conv_kernel_dim"] - 1) * (2 * nk * dk + nv * dv) * model_bytes
    return recurrent + conv


def _weight_fields(cfg: Mapping, count: params.ParamCount) -> tuple[dict, list[str]]:
    """The Model fields of the parameters and their dtypes (quantization config; headline weight_dtype: that of the
    largest part, what most of the weight bytes are stored as) and the KV dtype, with the notes they bring."""
    dtypes, qnotes = quant.part_dtypes_from_config(cfg, count.parts)
    kv_dtype, kv_notes = quant.kv_dtype_from_config(cfg)
    parts = tuple(count.parts.items())
    part_bytes = {p: weight_bytes(n, dtypes[p]) for p, n in parts}
    if cfg.get("kv_lora_rank") and count.parts.get("attention"):  # MLA: ModelOpt may quantize some projections
        per_layer = params.mla_projection_params(cfg)
        mixed = quant.modelopt_attention_bytes(cfg, per_layer, count.parts["attention"] // sum(per_layer.values()))
        if mixed:
            part_bytes["attention"], note = mixed
            qnotes = qnotes + [note]
    return dict(
        total_params=count.total,
        active_params=count.active,
        kv_dtype=kv_dtype,
        weight_dtype=dtypes[max(count.parts, key=lambda p: count.parts[p])],
        param_parts=parts,
        part_dtypes=tuple((p, dtypes[p]) for p, _ in parts),
        part_bytes=tuple(part_bytes.items()),
    ), qnotes + kv_notes


def _kv_notes(model: Model, cfg: Mapping, family: str, n: int) -> list[str]:
    """How far the naive all-layers formula 2 x n x kv_heads x head_dim x 2 B is off, when it is (n = config layers)."""
    correct = kv.kv_bytes_per_token(model, 2)
    if family == "mla":
        heads, k_dim, v_dim = model.num_attention_heads, model.head_dim, cfg["v_head_dim"]
        naive = n * heads * (k_dim + v_dim) * 2
        return [
            f"MLA caches one latent of kv_lora_rank {model.kv_lora_rank} + qk_rope_head_dim "
            f"{model.qk_rope_head_dim} = {model.kv_lora_rank + model.qk_rope_head_dim} elements per token per "
            f"layer: {n} x {model.kv_lora_rank + model.qk_rope_head_dim} x 2 B = {correct:,} B/token in bf16; "
            f"caching per-head K ({k_dim}) and V ({v_dim}) for {heads} heads would be {naive:,} B/token "
            f"({naive / correct:.0f}x too much)"
        ]
    naive = 2 * n * model.num_key_value_heads * model.head_dim * 2
    if family == "falcon_h1":
        return [
            f"every one of the {n} blocks runs attention and a Mamba-2 mixer side by side, so each caches "
            f"per-token KV ({n} x 2 x {model.num_key_value_heads} x {model.head_dim} x 2 B = {correct:,} B/token "
            f"in bf16) and also holds a fixed {model.linear_state_bytes_per_layer:,} B Mamba state per sequence "
            f"({n * model.linear_state_bytes_per_layer:,} B per sequence in all); kneecap lists each block as "
            f"two layer slots, one attention and one Mamba-2 ({2 * n} in all)"
        ]
    if family in ("gdn", *_SSM_FAMILIES):
        full = model.count_layers("full_attention")
        linear = model.count_layers("linear_attention")
        mixer = _MIXER_NAMES[family]
        return [
            f"only the {full} full-attention layers of {n} cache per-token KV: {full} x 2 x "
            f"{model.num_key_value_heads} x {model.head_dim} x 2 B = {correct:,} B/token in bf16; the naive "
            f"all-layers formula gives {naive:,} B/token ({naive / correct:.1f}x too much); the {linear} {mixer} "
            f"layers hold a fixed {model.linear_state_bytes_per_layer:,} B per sequence each "
            f"({linear * model.linear_state_bytes_per_layer:,} B per sequence in all)"
        ]
    sliding = model.count_layers("sliding_attention")
    if sliding:
        return [
            f"{sliding} of {n} layers keep at most {model.sliding_window} tokens per sequence (sliding window); "
            f"per-token KV counts all layers ({correct:,} B/token in bf16) but a long sequence's sliding "
            f"layers stop growing at the window"
        ]
    return []


def _with_notes(model: Model, notes: list[str]) -> Model:
    return replace(model, notes=tuple(model.notes) + tuple(notes)) if notes else model


def _from_ssm_hybrid(
    cfg: dict,
    family: str,
    *,
    name: str,
    source: str,
    architecture: str,
    head_dim: int,
    tied: bool,
    checkpoint_bytes: int | None,
    notes: list[str],
) -> Model:
    """Mamba hybrids: Nemotron-H, Granite 4.0-H, Falcon-H1 (Mamba-2) and Jamba (Mamba-1); see kneecap.model.mamba."""
    model_bytes = {"bf16": 2, "fp16": 2, "fp32": 4}[quant.model_dtype(cfg)]
    shared = 0
    if family == "granite_hybrid":
        # vLLM granitemoehybrid.py: head_dim = hidden_size // num_attention_heads (no head_dim key is read)
        if cfg["hidden_size"] % cfg["num_attention_heads"]:
            raise KneecapError(
                f"{source}: hidden_size {cfg['hidden_size']} is not a multiple of num_attention_heads "
                f"{cfg['num_attention_heads']}",
                f"fix num_attention_heads in {source}",
            )
        head_dim = cfg["head_dim"] = cfg["hidden_size"] // cfg["num_attention_heads"]
        kinds = mamba.granite_hybrid_layout(cfg, source)
        dims = mamba.granite_hybrid_dims(cfg, source)
        for key in ("num_local_experts", "shared_intermediate_size"):  # class defaults 8 and 1024: ask instead
            if cfg.get(key) is None:
                raise KneecapError(
                    f"{source}: config.json has no {key!r} (0 for none), which the weight count needs",
                    f"add {key} from the model's published config.json",
                )
        experts = cfg["num_local_experts"]
        if experts:
            _pos_int(cfg, "num_local_experts", source)
            _pos_int(cfg, "num_experts_per_tok", source)
            _pos_int(cfg, "intermediate_size", source)
        if cfg.get("shared_intermediate_size"):
            _pos_int(cfg, "shared_intermediate_size", source)
        elif not experts:
            raise KneecapError(
                f"{source}: neither routed experts (num_local_experts) nor a shared MLP "
                "(shared_intermediate_size): the layers' MLP size is unknown",
                "add shared_intermediate_size from the model's published config.json",
            )
        shared = 1 if experts and cfg.get("shared_intermediate_size") else 0
        count = mamba.count_granite_hybrid_params(cfg, kinds, dims, tied)
        config_layers = len(kinds)
        mlp = (
            (f"{experts} routed experts (top {cfg['num_experts_per_tok']})" + (" + a shared expert" if shared else ""))
            if experts
            else "a dense MLP"
        )
        notes = notes + [
            f"Granite 4.0-H layers: {kinds.count('linear_attention')} Mamba-2 + "
            f"{kinds.count('full_attention')} attention, each with {mlp}"
        ]
    elif family == "falcon_h1":
        _pos_int(cfg, "intermediate_size", source)
        kinds = mamba.falcon_h1_layout(cfg, source)
        dims = mamba.falcon_h1_dims(cfg, source)
        count = mamba.count_falcon_h1_params(cfg, dims, tied)
        config_layers = cfg["num_hidden_layers"]
    elif family == "mamba2":
        blocks = mamba.nemotron_h_blocks(cfg, source)
        for key in ("mamba_num_heads", "mamba_head_dim", "ssm_state_size", "n_groups", "conv_kernel"):
            _pos_int(cfg, key, source)
        if "-" in blocks:
            _pos_int(cfg, "intermediate_size", source)
        dims = mamba.nemotron_h_dims(cfg)
        kinds, count = mamba.layer_types(blocks), mamba.count_nemotron_h_params(cfg, blocks, dims, tied)
        config_layers = len(blocks)
        notes = notes + [
            f"{len(blocks)} blocks = {blocks.count('M')} Mamba-2 + {blocks.count('*')} attention + "
            f"{blocks.count('-')} MLP-only; the MLP-only blocks cache nothing and are folded away, so the model "
            f"has {len(kinds)} layers here"
        ]
    else:
        _pos_int(cfg, "intermediate_size", source)
        for key in ("mamba_d_state", "mamba_d_conv", "mamba_expand"):
            if key in cfg:
                _pos_int(cfg, key, source)
        kinds, moe = mamba.jamba_layout(cfg)
        if any(moe):
            _pos_int(cfg, "num_experts_per_tok", source)
        count = mamba.count_jamba_params(cfg, kinds, moe, tied)
        config_layers = len(kinds)
    state = (
        mamba.mamba1_state_bytes_per_layer(cfg, model_bytes)
        if family == "mamba1"
        else mamba.mamba2_dims_state_bytes(dims, model_bytes, cfg.get("mamba_ssm_dtype"))
    )
    weights, qnotes = _weight_fields(cfg, count)
    model = Model(
        name=name,
        source=source,
        architecture=architecture,
        num_hidden_layers=len(kinds),
        hidden_size=cfg["hidden_size"],
        num_attention_heads=cfg["num_attention_heads"],
        num_key_value_heads=cfg["num_key_value_heads"],
        head_dim=head_dim,
        vocab_size=cfg["vocab_size"],
        layer_types=tuple(kinds),
        **weights,
        max_position_embeddings=cfg.get("max_position_embeddings"),
        intermediate_size=cfg.get("intermediate_size"),
        linear_state_bytes_per_layer=state,
        num_experts=count.num_experts,
        num_shared_experts=shared,
        num_experts_per_tok=count.num_experts_per_tok,
        expert_params=count.expert_params,
        num_moe_layers=count.num_moe_layers,
        checkpoint_bytes=checkpoint_bytes,
    )
    return _with_notes(model, notes + qnotes + _kv_notes(model, cfg, family, config_layers))
