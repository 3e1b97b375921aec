"""Mamba hybrids: Nemotron-H, Granite 4.0-H, Falcon-H1 (Mamba-2) and Jamba (Mamba-1): layer layout, SSM state
bytes, parameter counts.

Owns what is Mamba-specific; hf_config.py calls it for model_type "nemotron_h", "granitemoehybrid", "falcon_h1"
and "jamba". Not modelled yet: Nemotron-H MoE blocks ("E"), which fail with a one-line error rather than a wrong
answer.

hybrid_override_pattern has one character per block: "M" Mamba-2 mixer, "*" attention, "-" MLP only.
Only mixer blocks hold per-sequence memory, so Model.layer_types lists the M and * blocks ("linear_attention"
and "full_attention"); the MLP-only blocks cache nothing and are folded away (their weights still count).

Mamba-2 state per layer (vLLM MambaStateShapeCalculator.mamba2_state_shape, mamba_utils.py):
  conv state      (intermediate + 2 x n_groups x ssm_state_size) x (conv_kernel - 1) x model dtype bytes
  temporal state  mamba_num_heads x mamba_head_dim x ssm_state_size x ssm dtype bytes (model dtype unless
                  mamba_ssm_dtype says otherwise; vLLM's mamba_ssm_cache_dtype "auto")
  with intermediate = mamba_num_heads x mamba_head_dim.
Mamba-2 mixer parameters (HF modeling_nemotron_h NemotronHMamba2Mixer):
  in_proj h x (2 x intermediate + 2 x n_groups x state + heads), conv1d conv_dim x kernel (+ conv_dim bias when
  use_conv_bias), dt_bias + A_log + D 3 x heads, gated norm intermediate, out_proj intermediate x h.
MLP block: up + down, 2 x h x intermediate_size (relu^2, not gated). One RMSNorm (h) per block + final.

Jamba (HF JambaConfig / modeling_jamba): layer i is attention when i % attn_layer_period == attn_layer_offset,
else Mamba-1; its MLP is routed experts when i % expert_layer_period == expert_layer_offset, else dense SwiGLU.
Mamba-1 state per layer (vLLM MambaStateShapeCalculator.mamba1_state_shape):
  conv state      intermediate x (mamba_d_conv - 1) x model dtype bytes
  temporal state  intermediate x mamba_d_state x ssm dtype bytes, intermediate = mamba_expand x hidden_size
Mamba-1 mixer parameters (HF JambaMambaMixer): in_proj h x 2I (+2I bias if mamba_proj_bias), conv1d I x d_conv
(+ I bias if mamba_conv_bias), x_proj I x (dt_rank + 2 x state), dt_proj dt_rank x I + I, A_log I x state, D I,
out_proj I x h (+ h bias if mamba_proj_bias), dt/B/C layernorms dt_rank + 2 x state; dt_rank "auto" = ceil(h / 16).

Granite 4.0-H (HF GraniteMoeHybridConfig, vLLM 0.32 granitemoehybrid.py): layer_types[i] is "mamba" (a Mamba-2
mixer, vLLM MambaMixer2 with intermediate_size = mamba_expand x hidden_size) or "attention" (GQA, head_dim =
hidden_size / num_attention_heads, biases when attention_bias). Every layer, of either kind, also has an MLP:
num_local_experts routed SwiGLU experts of intermediate_size (router h x E, no bias) when num_local_experts > 0,
plus a shared SwiGLU MLP of shared_intermediate_size when that is > 0 (a dense Granite 4.0-H has no routed experts
and only the shared MLP). Two RMSNorms per layer + final. The Mamba state vLLM allocates
(get_mamba_state_shape_from_config): conv (mamba_expand x h + 2 x mamba_n_groups x mamba_d_state) x
(mamba_d_conv - 1), temporal mamba_n_heads x mamba_d_head x mamba_d_state.

Falcon-H1 (HF FalconH1Config, vLLM 0.32 falcon_h1.py FalconH1ParallelHybrid): EVERY block runs GQA attention and
a Mamba-2 mixer side by side on the same input (their outputs summed), then a SwiGLU MLP (intermediate_size, no
biases); two RMSNorms per block + final. So every block caches per-token K/V AND holds a Mamba state: kneecap
lists each block as two layer slots (attention, then Mamba-2), 2 x num_hidden_layers in Model.layer_types. The
mixer's width is mamba_d_ssm (vLLM: mamba_expand x hidden_size only when mamba_d_ssm is null); its gated RMSNorm
(d_ssm weights) exists only when mamba_rms_norm. Attention head_dim is the config's head_dim (else h / heads);
vLLM builds q/k/v/o without biases.
Config-class defaults used when a key is absent (HF GraniteMoeHybridConfig and FalconH1Config, transformers 5.19,
the one vLLM 0.32.0 runs with): mamba_n_groups 1, mamba_d_conv 4, mamba_expand 2, mamba_conv_bias true,
mamba_proj_bias false, mamba_rms_norm false (Falcon-H1), attention_bias false. Keys whose class default no
published model has are asked for by name instead: mamba_n_heads, mamba_d_state, Falcon-H1's mamba_d_ssm
(default 1024), Granite's num_local_experts (default 8, where a dense model says 0) and shared_intermediate_size.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from kneecap.errors import KneecapError
from kneecap.model.params import PARTS, ParamCount, gqa_attention_params, swiglu_params

_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": None}
STATE_BYTES = {"float32": 4, "float16": 2, "bfloat16": 2}  # mamba_ssm_dtype -> bytes of the temporal state


# transformers 5.x saves a Nemotron-H's blocks as layers_block_type (NemotronHConfig._list_to_pattern's mapping),
# with no hybrid_override_pattern; "mamba" / "attention" are the legacy names it remaps.
_BLOCK_NAMES = {"linear_attention": "M", "mamba": "M", "full_attention": "*", "attention": "*", "mlp": "-", "moe": "E"}


def nemotron_h_blocks(cfg: Mapping, source: str) -> str:
    """The validated block pattern (one character per block)."""
    pattern = cfg.get("hybrid_override_pattern")
    listed = cfg.get("layers_block_type")
    if pattern is None and isinstance(listed, list) and listed:
        bad = sorted({str(b) for b in listed} - set(_BLOCK_NAMES))
        if bad:
            raise KneecapError(f"{source}: unknown layers_block_type entries {bad}", f"use {', '.join(_BLOCK_NAMES)}")
        pattern = "".join(_BLOCK_NAMES[b] for b in listed)
    n = cfg["num_hidden_layers"]
    if not isinstance(pattern, str) or not pattern:
        raise KneecapError(
            f"{source}: config.json has no 'hybrid_override_pattern', which the memory formula needs",
            "add hybrid_override_pattern from the model's published config.json",
        )
    if len(pattern) != n:
        raise KneecapError(
            f"{source}: hybrid_override_pattern has {len(pattern)} blocks for {n} layers",
            f"make it as long as num_hidden_layers in {source}",
        )
    bad = sorted(set(pattern) - set(_BLOCKS))
    if bad:
        what = "MoE blocks ('E') are not modelled yet" if bad == ["E"] else f"unknown block kinds {bad}"
        raise KneecapError(
            f"{source}: hybrid_override_pattern: {what}",
            "supported: M (Mamba-2), * (attention), - (MLP); use --params and a dense stand-in",
        )
    return pattern


def layer_types(pattern: str) -> list[str]:
    """Model.layer_types: the mixer blocks only (MLP-only blocks fold away)."""
    return [_BLOCKS[c] for c in pattern if _BLOCKS[c]]


def nemotron_h_dims(cfg: Mapping) -> dict:
    """A Nemotron-H Mamba-2 mixer's dimensions (NemotronHMamba2Mixer: no in/out_proj biases, always a gated norm)."""
    heads, head_dim = cfg["mamba_num_heads"], cfg["mamba_head_dim"]
    return {
        "intermediate": heads * head_dim,
        "heads": heads,
        "head_dim": head_dim,
        "state": cfg["ssm_state_size"],
        "n_groups": cfg["n_groups"],
        "conv_kernel": cfg["conv_kernel"],
        "conv_bias": cfg.get("use_conv_bias", True),
        "proj_bias": False,
        "gated_norm": True,
    }


def _base_parts(cfg: Mapping, tie_word_embeddings: bool, norms: int) -> dict[str, int]:
    """Every part at 0 but the embedding, the LM head (none when tied) and the `norms` norm weights."""
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    return dict.fromkeys(PARTS, 0) | {
        "embed": vocab * h,
        "lm_head": 0 if tie_word_embeddings else vocab * h,
        "norms": norms,
    }


def count_nemotron_h_params(cfg: Mapping, pattern: str, dims: Mapping, tie_word_embeddings: bool) -> ParamCount:
    h = cfg["hidden_size"]
    parts = _base_parts(cfg, tie_word_embeddings, len(pattern) * h + h)
    for block in pattern:
        if block == "M":
            parts["linear_attention"] += mamba2_dims_mixer_params(h, dims)
        elif block == "*":
            parts["attention"] += gqa_attention_params(cfg, "nemotron_h")
        else:
            parts["dense_mlp"] += 2 * h * cfg["intermediate_size"]
    return ParamCount(parts=parts, expert_params=0, num_moe_layers=0, num_experts=0, num_experts_per_tok=0)


def jamba_layout(cfg: Mapping) -> tuple[list[str], list[bool]]:
    """(layer kinds, which layers hold routed experts) from the attn_/expert_layer period and offset."""
    n = cfg["num_hidden_layers"]
    blocks = cfg.get("layers_block_type")
    if isinstance(blocks, list) and len(blocks) == n:
        kinds = ["full_attention" if b == "attention" else "linear_attention" for b in blocks]
    else:
        period, offset = cfg.get("attn_layer_period", 8), cfg.get("attn_layer_offset", 4)
        kinds = ["full_attention" if i % period == offset else "linear_attention" for i in range(n)]
    e_period, e_offset = cfg.get("expert_layer_period", 2), cfg.get("expert_layer_offset", 1)
    experts = cfg.get("num_experts", 0) or 0
    moe = [experts > 1 and i % e_period == e_offset for i in range(n)]
    return kinds, moe


def _mamba1_dims(cfg: Mapping) -> tuple[int, int, int]:
    inter = cfg.get("mamba_expand", 2) * cfg["hidden_size"]
    rank = cfg.get("mamba_dt_rank", "auto")
    dt_rank = math.ceil(cfg["hidden_size"] / 16) if rank in (None, "auto") else int(rank)
    return inter, dt_rank, cfg.get("mamba_d_state", 16)


def mamba1_state_bytes_per_layer(cfg: Mapping, model_bytes: int) -> int:
    """Conv + temporal state of one Mamba-1 layer, bytes per sequence (whole layer, before TP)."""
    inter, _, state = _mamba1_dims(cfg)
    state_bytes = STATE_BYTES.get(str(cfg.get("mamba_ssm_dtype")), model_bytes)
    return inter * (cfg.get("mamba_d_conv", 4) - 1) * model_bytes + inter * state * state_bytes


def mamba1_mixer_params(cfg: Mapping) -> int:
    h = cfg["hidden_size"]
    inter, dt_rank, state = _mamba1_dims(cfg)
    proj_bias = bool(cfg.get("mamba_proj_bias", False))
    in_proj = h * 2 * inter + (2 * inter if proj_bias else 0)
    conv = inter * cfg.get("mamba_d_conv", 4) + (inter if cfg.get("mamba_conv_bias", True) else 0)
    x_proj = inter * (dt_rank + 2 * state)
    dt_proj = dt_rank * inter + inter
    out_proj = inter * h + (h if proj_bias else 0)
    return in_proj + conv + x_proj + dt_proj + inter * state + inter + out_proj + dt_rank + 2 * state


def count_jamba_params(cfg: Mapping, kinds: list[str], moe: list[bool], tie_word_embeddings: bool) -> ParamCount:
    h = cfg["hidden_size"]
    parts = _base_parts(cfg, tie_word_embeddings, len(kinds) * 2 * h + h)
    mlp = swiglu_params(h, cfg["intermediate_size"])
    experts = cfg.get("num_experts", 0) or 0
    for kind, is_moe in zip(kinds, moe):
        if kind == "full_attention":
            parts["attention"] += gqa_attention_params(cfg, "jamba")
        else:
            parts["linear_attention"] += mamba1_mixer_params(cfg)
        if is_moe:
            parts["routed_experts"] += experts * mlp
            parts["router"] += h * experts
        else:
            parts["dense_mlp"] += mlp
    n_moe = sum(moe)
    return ParamCount(
        parts=parts,
        expert_params=mlp if n_moe else 0,
        num_moe_layers=n_moe,
        num_experts=experts if n_moe else 0,
        num_experts_per_tok=cfg.get("num_experts_per_tok", 0) if n_moe else 0,
    )


# --- Mamba-2 mixers described by their dimensions (Nemotron-H, Granite 4.0-H, Falcon-H1) --------------------


def mamba2_dims_state_bytes(dims: Mapping, model_bytes: int, ssm_dtype: object = None) -> int:
    """Conv + temporal state of one Mamba-2 mixer, bytes per sequence (whole layer, before TP); vLLM
    MambaStateShapeCalculator.mamba2_state_shape: conv (intermediate + 2 x n_groups x state) x (conv_kernel - 1)
    in the model dtype, temporal heads x head_dim x state in mamba_ssm_cache_dtype ("auto": the model dtype)."""
    state_bytes = STATE_BYTES.get(str(ssm_dtype), model_bytes)
    conv_dim = dims["intermediate"] + 2 * dims["n_groups"] * dims["state"]
    return (
        conv_dim * (dims["conv_kernel"] - 1) * model_bytes
        + dims["heads"] * dims["head_dim"] * dims["state"] * state_bytes
    )


def mamba2_dims_mixer_params(h: int, dims: Mapping) -> int:
    """One Mamba-2 mixer (HF GraniteMoeHybridMambaLayer / FalconH1Mixer): in_proj h x (2 x intermediate +
    2 x n_groups x state + heads) (+ bias), conv1d conv_dim x kernel (+ conv_dim bias), dt_bias + A_log + D
    3 x heads, gated RMSNorm intermediate (when it has one), out_proj intermediate x h (+ h bias)."""
    inter, heads = dims["intermediate"], dims["heads"]
    conv_dim = inter + 2 * dims["n_groups"] * dims["state"]
    proj = inter + conv_dim + heads
    in_proj = h * proj + (proj if dims["proj_bias"] else 0)
    conv = conv_dim * dims["conv_kernel"] + (conv_dim if dims["conv_bias"] else 0)
    out_proj = inter * h + (h if dims["proj_bias"] else 0)
    return in_proj + conv + 3 * heads + (inter if dims["gated_norm"] else 0) + out_proj


def _int_field(cfg: Mapping, key: str, source: str, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if value is None:
        raise KneecapError(
            f"{source}: config.json has no {key!r}, which the Mamba state size needs",
            f"add {key} from the model's published config.json",
        )
    if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
        raise KneecapError(f"{source}: {key} must be a positive integer, got {value!r}", f"fix {key} in {source}")
    return value


def _head_dim(cfg: Mapping, inter: int, heads: int, source: str) -> int:
    """mamba_d_head, or "auto" = intermediate / mamba_n_heads; the HF config classes refuse a config whose
    mamba_d_head x mamba_n_heads is not the mixer's width, and so does kneecap."""
    if cfg.get("mamba_d_head", "auto") == "auto":
        if inter % heads:
            raise KneecapError(
                f"{source}: mamba_d_head 'auto' but the Mamba width {inter} is not a multiple of mamba_n_heads {heads}",
                f"set mamba_d_head in {source}",
            )
        return inter // heads
    head_dim = _int_field(cfg, "mamba_d_head", source)
    if head_dim * heads != inter:
        raise KneecapError(
            f"{source}: mamba_d_head {head_dim} x mamba_n_heads {heads} is not the Mamba width {inter}"
            " (transformers refuses this config too)",
            "compare mamba_d_head, mamba_n_heads, mamba_d_ssm / mamba_expand with the published file",
        )
    return head_dim


# Granite 4.0-H's layer_types spellings: IBM's files say "mamba" / "attention"; transformers 5.x saves them as
# "linear_attention" / "full_attention" (configuration_utils._LEGACY_LAYER_TYPE_REMAP), which vLLM 0.32.0's
# granitemoehybrid.py keys its decoder layers by.
_GRANITE_KINDS = {
    "mamba": "linear_attention",
    "linear_attention": "linear_attention",
    "attention": "full_attention",
    "full_attention": "full_attention",
}


def granite_hybrid_layout(cfg: Mapping, source: str) -> list[str]:
    """Layer kinds of a Granite 4.0-H model from layer_types ("mamba" / "attention", or transformers 5's names)."""
    n = cfg["num_hidden_layers"]
    kinds = cfg.get("layer_types")
    if not isinstance(kinds, list) or not kinds:
        raise KneecapError(
            f"{source}: config.json has no 'layer_types', which says which layers are Mamba-2 and which attention",
            "add layer_types from the model's published config.json",
        )
    if len(kinds) != n:
        raise KneecapError(
            f"{source}: layer_types has {len(kinds)} entries for {n} layers",
            f"make layer_types as long as num_hidden_layers in {source}",
        )
    bad = sorted({str(k) for k in kinds} - set(_GRANITE_KINDS))
    if bad:
        raise KneecapError(f"{source}: unknown layer_types entries {bad}", "use 'mamba' or 'attention'")
    return [_GRANITE_KINDS[k] for k in kinds]


def _mamba2_dims(cfg: Mapping, source: str, inter: int, gated_norm: bool) -> dict:
    """A Mamba-2 mixer of width `inter` from the mamba_* keys (Granite 4.0-H and Falcon-H1 spell them alike)."""
    heads = _int_field(cfg, "mamba_n_heads", source)
    return {
        "intermediate": inter,
        "heads": heads,
        "head_dim": _head_dim(cfg, inter, heads, source),
        "state": _int_field(cfg, "mamba_d_state", source),
        "n_groups": _int_field(cfg, "mamba_n_groups", source, 1),
        "conv_kernel": _int_field(cfg, "mamba_d_conv", source, 4),
        "conv_bias": bool(cfg.get("mamba_conv_bias", True)),
        "proj_bias": bool(cfg.get("mamba_proj_bias", False)),
        "gated_norm": gated_norm,
    }


def granite_hybrid_dims(cfg: Mapping, source: str) -> dict:
    inter = _int_field(cfg, "mamba_expand", source, 2) * cfg["hidden_size"]  # vLLM: mamba_expand x hidden_size
    return _mamba2_dims(cfg, source, inter, True)  # GraniteMoeHybridRMSNormGated: always present


def count_granite_hybrid_params(cfg: Mapping, kinds: list[str], dims: Mapping, tie_word_embeddings: bool) -> ParamCount:
    h = cfg["hidden_size"]
    parts = _base_parts(cfg, tie_word_embeddings, len(kinds) * 2 * h + h)
    experts = cfg.get("num_local_experts") or 0
    shared = cfg.get("shared_intermediate_size") or 0
    expert = swiglu_params(h, cfg["intermediate_size"]) if experts else 0
    for kind in kinds:
        if kind == "full_attention":
            parts["attention"] += gqa_attention_params(cfg, "granitemoehybrid")
        else:
            parts["linear_attention"] += mamba2_dims_mixer_params(h, dims)
        if experts:
            parts["routed_experts"] += experts * expert
            parts["router"] += h * experts
        parts["shared_experts" if experts else "dense_mlp"] += swiglu_params(h, shared) if shared else 0
    n_moe = len(kinds) if experts else 0
    return ParamCount(
        parts=parts,
        expert_params=expert,
        num_moe_layers=n_moe,
        num_experts=experts,
        num_experts_per_tok=cfg.get("num_experts_per_tok", 0) if n_moe else 0,
    )


def falcon_h1_dims(cfg: Mapping, source: str) -> dict:
    h = cfg["hidden_size"]
    if cfg.get("mamba_d_ssm") is None and "mamba_d_ssm" in cfg:  # null: vLLM falls back to mamba_expand x h
        inter = _int_field(cfg, "mamba_expand", source, 2) * h
    else:  # absent: the HF class would default it (1024), which no published Falcon-H1 uses: ask for it
        inter = _int_field(cfg, "mamba_d_ssm", source)
    return _mamba2_dims(cfg, source, inter, bool(cfg.get("mamba_rms_norm", False)))


def falcon_h1_layout(cfg: Mapping, source: str) -> list[str]:
    """Two layer slots per block (attention, then the Mamba-2 mixer beside it)."""
    if cfg.get("attn_layer_indices") is not None:
        raise KneecapError(
            f"{source}: attn_layer_indices {cfg['attn_layer_indices']!r}: a Falcon-H1 with attention "
            "in only some blocks is not modelled (every published Falcon-H1 has it in all, null here)",
            "set attn_layer_indices to null if every block has attention, or pass a preset",
        )
    return ["full_attention", "linear_attention"] * cfg["num_hidden_layers"]


def count_falcon_h1_params(cfg: Mapping, dims: Mapping, tie_word_embeddings: bool) -> ParamCount:
    h, n = cfg["hidden_size"], cfg["num_hidden_layers"]
    parts = _base_parts(cfg, tie_word_embeddings, n * 2 * h + h)  # input_layernorm, pre_ff_layernorm; final norm
    unbiased = {**cfg, "attention_bias": False}  # vLLM falcon_h1.py: qkv_proj and o_proj with bias=False
    parts["attention"] = n * gqa_attention_params(unbiased, "falcon_h1")
    parts["linear_attention"] = n * mamba2_dims_mixer_params(h, dims)
    parts["dense_mlp"] = n * swiglu_params(h, cfg["intermediate_size"])
    return ParamCount(parts=parts, expert_params=0, num_moe_layers=0, num_experts=0, num_experts_per_tok=0)
