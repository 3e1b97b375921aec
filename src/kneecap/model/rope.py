"""The rotary-embedding (RoPE) cos/sin caches vLLM builds when it loads a model: which caches a config.json asks for
(rope_caches) and how many rows each has at a vLLM release (cache_rows, cache_bytes). Pure: no files, no engine.

vLLM computes each cache while it builds the model and keeps it on the GPU as a non-persistent buffer, so its bytes
are in the "Model loading took X GiB" figure (DeviceMemoryProfiler around load_model reads the allocated bytes after
the load) and come out of the KV pool. Rules read in vLLM's published sources, 0.10.2 to 0.33.0, and compared with the
0.34.0 wheel, whose rotary_embedding/ differs from 0.33.0's in mrope.py only and whose models/gemma3.py and gpt_oss.py
are 0.33.0's (vllm/model_executor/layers/rotary_embedding/; line numbers are 0.19.0's unless another release is named):

- one buffer per distinct RoPE: get_rope (__init__.py:68-78, _ROPE_DICT) keys a cache on head size, rotary dims,
  max_position, neox style, the RoPE parameters and dtype, so every layer with the same RoPE shares one buffer;
- shape [rows, rotary_dim] (cos and sin halves of rotary_dim / 2 each: base.py:83-92), rotary_dim =
  int(head_dim x partial_rotary_factor) (__init__.py:62-66; 0.11.0 __init__.py:57-58);
- dtype: computed in float32, then cast to `dtype` (base.py:58-63; 0.11.0 base.py:45-49), which get_rope takes as
  torch's default dtype while vLLM builds the model, the model's 16-bit dtype; gpt-oss asks for float32
  (models/gpt_oss.py get_rope(..., dtype=torch.float32), 0.10.2 to 0.34.0): 4 bytes a value;
- rows, from the max_position the model file passes (config max_position_embeddings for every model kneecap reads):
  default, llama3, ntk, dynamic with alpha: max_position (base.py:86; llama3_rope.py and ntk_scaling_rope.py
  change the frequencies only);
  linear: max_position x factor (linear_scaling_rope.py:90-91);
  dynamic with factor: max_position x factor up to 0.21 (dynamic_ntk_scaling_rope.py:56; 0.11.0 :55), max_position
  from 0.22 (0.22.0 dynamic_ntk_scaling_rope.py:67, which takes max_trained_positions for the base instead);
  yarn: original_max_position_embeddings x factor (get_rope passes the original, __init__.py:264-273;
  yarn_scaling_rope.py:77-78);
  longrope: original_max_position_embeddings + max_position (a short and a long cache concatenated into one
  buffer, phi3_long_rope_scaled_rope.py:81-95);
- Gemma 3 (models/gemma3.py:167-185; 0.11.0 :154-170; 0.32.0 :157-162 reads both from rope_parameters): the
  sliding layers use the default RoPE at rope_local_base_freq, the full layers the config's RoPE (linear x 8 in the
  published checkpoints), so two caches: 131,072 and 1,048,576 rows.

Not modelled (no cache counted, the plan says so): multimodal RoPE (MRotaryEmbedding: 4 x max_position through
0.30.0, from 0.32.0 a factor each model file picks), dual-chunk attention, MLA models, RoPE kinds not listed above,
configs that do not state their RoPE (rope_theta / rope_scaling / rope_parameters) or their max_position_embeddings.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from kneecap.model.spec import RopeCache

DYNAMIC_ROWS_UNSCALED_FROM = (0, 22)  # dynamic NTK's cache is max_position rows from vLLM 0.22.0 (x factor before)
_MROPE_MODEL_TYPES = ("qwen2_vl", "qwen2_5_vl", "qwen3_vl", "qwen3_5", "glm4v")  # vLLM MRotaryEmbedding users
_PARTIAL_KEYS = ("partial_rotary_factor", "rotary_pct", "rotary_emb_fraction")  # vLLM's patch_rope_parameters names
# Gemma3TextConfig's defaults (transformers configuration_gemma3.py) where a published config leaves them out
_GEMMA3_THETA, _GEMMA3_LOCAL_THETA = 1_000_000.0, 10_000.0
_FLOAT32_ROPE_MODEL_TYPES = ("gpt_oss",)  # model files that ask get_rope for float32


def rope_caches(
    cfg: Mapping, model_type: str, layer_types: tuple[str, ...] | list[str], *, known_model: bool = True
) -> tuple[RopeCache, ...]:
    """The cos/sin caches vLLM builds for a (text) config: () where kneecap does not model them. For a model type
    whose vLLM model file kneecap has not read (`known_model` False: a generic decoder) only plain and Llama-3 RoPE
    over every rotary dim are counted, the kinds whose cache is max_position_embeddings x head_dim whatever the file."""
    if not any(key in cfg for key in ("rope_theta", "rope_scaling", "rope_parameters")):
        return ()  # a config that does not state its RoPE (an abridged one): not guessed
    if model_type.startswith(_MROPE_MODEL_TYPES) or cfg.get("dual_chunk_attention_config"):
        return ()
    if cfg.get("position_embedding_type") not in (None, "rope"):
        return ()
    positions = cfg.get("max_position_embeddings")
    head_dim = cfg.get("head_dim")
    if not (isinstance(positions, int) and positions > 0 and isinstance(head_dim, int) and head_dim > 0):
        return ()
    element_bytes = 4 if model_type in _FLOAT32_ROPE_MODEL_TYPES else 2
    full, local = _rope_parameters(cfg, model_type)
    if full is None or (not known_model and (local is not None or _kind(full) not in ("default", "llama3"))):
        return ()
    # one RoPE for every layer, or (Gemma 3) one for the full layers and one for the sliding layers, where present
    wanted = (
        [full]
        if local is None
        else [p for p, k in ((full, "full_attention"), (local, "sliding_attention")) if k in layer_types]
    )
    caches: list[RopeCache] = []
    for params in wanted:
        cache = _cache(params, cfg, positions, head_dim, element_bytes)
        if cache is None:
            return ()  # one layer kind's RoPE not modelled: count none rather than part
        if cache not in caches:  # get_rope shares one buffer between identical RoPEs
            caches.append(cache)
    if not known_model and any(c.rotary_dim != head_dim for c in caches):
        return ()  # partial rotary in a model file not read: how it sets rotary_dim is not known
    return tuple(caches)


def _rope_parameters(cfg: Mapping, model_type: str) -> tuple[Mapping | None, Mapping | None]:
    """(the full-attention layers' RoPE parameters, the sliding layers' where they differ, else None)."""
    params = cfg.get("rope_parameters")
    if isinstance(params, Mapping) and isinstance(params.get("full_attention"), Mapping):
        # transformers 5 writes one set per layer type (Gemma 3; other models' files not read: not modelled)
        if model_type != "gemma3_text":
            return None, None
        local = params.get("sliding_attention")
        return params["full_attention"], local if isinstance(local, Mapping) else None
    scaling = cfg.get("rope_scaling") or params or {}
    if not isinstance(scaling, Mapping):
        return None, None
    full = {**scaling}
    if "rope_theta" in cfg:
        full.setdefault("rope_theta", cfg["rope_theta"])
    if model_type == "gemma3_text":
        full.setdefault("rope_theta", _GEMMA3_THETA)
        local = {"rope_type": "default", "rope_theta": cfg.get("rope_local_base_freq", _GEMMA3_LOCAL_THETA)}
        return full, local
    return full, None


def _kind(params: Mapping) -> str:
    kind = params.get("rope_type") or params.get("type") or "default"
    return "longrope" if kind == "su" else kind  # vLLM renames the legacy "su" (patch_rope_parameters_dict)


def _cache(params: Mapping, cfg: Mapping, positions: int, head_dim: int, element_bytes: int) -> RopeCache | None:
    kind = _kind(params)
    if "mrope_section" in params:
        return None
    partial = next((cfg[k] for k in _PARTIAL_KEYS if cfg.get(k) is not None), None)
    partial = params.get("partial_rotary_factor", partial) or 1.0
    if not isinstance(partial, int | float) or not 0 < partial <= 1:
        return None
    rotary_dim = int(head_dim * partial)
    theta = params.get("rope_theta", cfg.get("rope_theta", 10_000.0))
    theta = float(theta) if isinstance(theta, int | float) else 0.0
    base = {"rotary_dim": rotary_dim, "element_bytes": element_bytes, "theta": theta}
    if kind in ("default", "llama3", "ntk") or (kind == "dynamic" and "alpha" in params):
        return RopeCache(kind=kind, positions=positions, **base)
    # a top-level original_max_position_embeddings (Phi-3's place for it) overrides the RoPE dict's: vLLM copies it
    # there (0.19.0 transformers_utils/config.py:387-405 patch_rope_parameters; 0.11.0 models/llama.py:255-259)
    original = cfg.get("original_max_position_embeddings") or params.get("original_max_position_embeddings")
    original = original if isinstance(original, int) and original > 0 else None
    if kind == "longrope":
        return RopeCache(kind=kind, positions=original + positions, **base) if original else None
    factor = params.get("factor")
    if not isinstance(factor, int | float) or factor <= 0:
        return None
    if kind in ("linear", "dynamic"):
        return RopeCache(kind=kind, positions=positions, factor=float(factor), **base)
    if kind == "yarn" and original:
        return RopeCache(kind=kind, positions=original, factor=float(factor), **base)
    return None


def cache_rows(cache: RopeCache, release: tuple[int, ...]) -> int:
    """Rows of one cache as vLLM `release` builds it (torch.arange over a float end: ceil)."""
    scaled = cache.kind in ("linear", "yarn") or (cache.kind == "dynamic" and release < DYNAMIC_ROWS_UNSCALED_FROM)
    return math.ceil(cache.positions * cache.factor) if scaled else cache.positions


def cache_bytes(caches: tuple[RopeCache, ...], release: tuple[int, ...]) -> int:
    """Bytes of all of a model's RoPE buffers at vLLM `release`, on every GPU (each rank holds them whole)."""
    return sum(cache_rows(c, release) * c.rotary_dim * c.element_bytes for c in caches)


def describe(caches: tuple[RopeCache, ...], release: tuple[int, ...]) -> str:
    """'1,048,576 x 256 linear x 8 + 131,072 x 256' (rows x rotary dims, the scaling, float32 where so)."""
    parts = []
    for c in caches:
        how = "" if c.kind in ("default", "llama3") else f" {c.kind}" + (f" x {c.factor:g}" if c.factor != 1 else "")
        parts.append(f"{cache_rows(c, release):,} x {c.rotary_dim}{how}" + (" float32" if c.element_bytes == 4 else ""))
    return " + ".join(parts)
