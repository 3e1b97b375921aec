"""Mamba hybrids: Nemotron-H (Mamba-2) and Jamba (Mamba-1): layer layout, SSM state bytes, parameter counts.

Owns what is Mamba-specific; hf_config.py calls it for model_type "nemotron_h" and "jamba". Not modelled yet:
Falcon-H1 (attention and SSM in parallel in every block), Granite-4.0-H, and Nemotron-H MoE blocks ("E"):
they fail with a one-line error rather than a wrong answer.

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
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from kneecap.errors import KneecapError
from kneecap.model.params import PARTS, ParamCount, gqa_attention_params, swiglu_params

_BLOCKS = {"M": "linear_attention", "*": "full_attention", "-": None}


def nemotron_h_blocks(cfg: Mapping, source: str) -> str:
    """The validated block pattern (one character per block)."""
    pattern = cfg.get("hybrid_override_pattern")
    n = cfg["num_hidden_layers"]
    if not isinstance(pattern, str) or not pattern:
        raise KneecapError(f"{source}: config.json has no 'hybrid_override_pattern', which the memory formula needs",
                           "add hybrid_override_pattern from the model's published config.json")
    if len(pattern) != n:
        raise KneecapError(f"{source}: hybrid_override_pattern has {len(pattern)} blocks for {n} layers",
                           f"make it as long as num_hidden_layers in {source}")
    bad = sorted(set(pattern) - set(_BLOCKS))
    if bad:
        what = "MoE blocks ('E') are not modelled yet" if bad == ["E"] else f"unknown block kinds {bad}"
        raise KneecapError(f"{source}: hybrid_override_pattern: {what}",
                           "supported: M (Mamba-2), * (attention), - (MLP); use --params and a dense stand-in")
    return pattern


def layer_types(pattern: str) -> list[str]:
    """Model.layer_types: the mixer blocks only (MLP-only blocks fold away)."""
    return [_BLOCKS[c] for c in pattern if _BLOCKS[c]]


def mamba2_intermediate(cfg: Mapping) -> int:
    return cfg["mamba_num_heads"] * cfg["mamba_head_dim"]


def mamba2_state_bytes_per_layer(cfg: Mapping, model_bytes: int) -> int:
    """Conv + temporal state of one Mamba-2 layer, bytes per sequence (whole layer, before TP)."""
    state_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}.get(str(cfg.get("mamba_ssm_dtype")), model_bytes)
    conv_dim = mamba2_intermediate(cfg) + 2 * cfg["n_groups"] * cfg["ssm_state_size"]
    conv = conv_dim * (cfg["conv_kernel"] - 1) * model_bytes
    temporal = cfg["mamba_num_heads"] * cfg["mamba_head_dim"] * cfg["ssm_state_size"] * state_bytes
    return conv + temporal


def mamba2_mixer_params(cfg: Mapping) -> int:
    h, heads = cfg["hidden_size"], cfg["mamba_num_heads"]
    inter = mamba2_intermediate(cfg)
    conv_dim = inter + 2 * cfg["n_groups"] * cfg["ssm_state_size"]
    in_proj = h * (inter + conv_dim + heads)
    conv = conv_dim * cfg["conv_kernel"] + (conv_dim if cfg.get("use_conv_bias", True) else 0)
    return in_proj + conv + 3 * heads + inter + inter * h


def count_nemotron_h_params(cfg: Mapping, pattern: str, tie_word_embeddings: bool) -> ParamCount:
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    parts = dict.fromkeys(PARTS, 0)
    parts["embed"] = vocab * h
    parts["lm_head"] = 0 if tie_word_embeddings else vocab * h
    parts["norms"] = len(pattern) * h + h
    for block in pattern:
        if block == "M":
            parts["linear_attention"] += mamba2_mixer_params(cfg)
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
    state_bytes = {"float32": 4, "float16": 2, "bfloat16": 2}.get(str(cfg.get("mamba_ssm_dtype")), model_bytes)
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
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    parts = dict.fromkeys(PARTS, 0)
    parts["embed"] = vocab * h
    parts["lm_head"] = 0 if tie_word_embeddings else vocab * h
    parts["norms"] = len(kinds) * 2 * h + h
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
    return ParamCount(parts=parts, expert_params=mlp if n_moe else 0, num_moe_layers=n_moe,
                      num_experts=experts if n_moe else 0,
                      num_experts_per_tok=cfg.get("num_experts_per_tok", 0) if n_moe else 0)
