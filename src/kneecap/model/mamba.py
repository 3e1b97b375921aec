"""Mamba-2 hybrids (Nemotron-H): block layout from hybrid_override_pattern, SSM state bytes, parameter counts.

Owns what is Mamba-specific; hf_config.py calls it for model_type "nemotron_h". Not modelled yet: Jamba
(Mamba-1 + attention), Falcon-H1 (attention and SSM in parallel in every block), Granite-4.0-H, and
Nemotron-H MoE blocks ("E"): they fail with a one-line error rather than a wrong answer.

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
"""

from __future__ import annotations

from collections.abc import Mapping

from kneecap.errors import KneecapError
from kneecap.model.params import PARTS, ParamCount, gqa_attention_params

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
