"""The KV-cache formula, one small function per attention kind. Bytes, per sequence.

    full / sliding (MHA, GQA, MQA):  2 (K and V) x kv_heads x head_dim x dtype_bytes   per token per layer
    mla (DeepSeek-V2/V3, Kimi-K2):   (kv_lora_rank + qk_rope_head_dim) x dtype_bytes   per token per layer
    linear_attention (DeltaNet/SSM): 0 per token; a fixed state per sequence per layer

Only K and V are cached, so num_key_value_heads — never num_attention_heads — sizes the cache
(Ainslie et al. 2023, GQA). Under tensor parallelism each rank holds kv_heads / tp heads; when
tp > kv_heads every rank still holds one whole head, i.e. the cache is replicated (vLLM's
`get_num_kv_heads` = max(1, kv_heads // tp); see seed 003's "TP beyond the KV-head count").
MLA caches one compressed latent per token per layer with no K/V factor 2, and vLLM and
SGLang keep the full latent on every TP rank (vLLM `MLAAttention` / SGLang `MLATokenToKVPool`:
kv_lora_rank + qk_rope_head_dim elements per token, not divided by tp).
A sliding-window layer keeps at most `sliding_window` tokens per sequence.

KV dtypes. Whole-byte types (bf16/fp16/f16 2 B, fp32/f32 4 B, fp8 1 B) have an integer dtype_bytes.
llama.cpp's block-quantized cache types (`--cache-type-k/-v` q8_0, q4_0, q4_1, iq4_nl, q5_0, q5_1; the list
is `kv_cache_types` in common/arg.cpp) store each K or V row of n elements as n / block_size blocks of
type_size bytes (ggml_row_size); their dtype_bytes is type_size / block_size (q8_0: 34 / 32 = 1.0625), taken
from the `gguf` package's GGML_QUANT_SIZES — a float, and exact, since every such block holds 32 (2**5) elements. Every per-layer figure below is a whole number of bytes,
exact when the block size divides head_dim — which llama.cpp requires ("K cache type q8_0 with block size 32
does not divide n_embd_head_k=16" is a start-up error, seen with xllamacpp 2026.10): see check_kv_dtype.
"""

from __future__ import annotations

import math

from kneecap.errors import KneecapError
from kneecap.model.spec import Model

# Bytes per cached element. fp8 = e4m3/e5m2 (one byte, per-tensor scale held separately); f16/f32 are llama.cpp's names.
KV_DTYPE_BYTES = {"bf16": 2, "fp16": 2, "f16": 2, "fp32": 4, "f32": 4, "fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1}
# llama.cpp's block-quantized KV cache types (common/arg.cpp kv_cache_types, besides f32, f16 and bf16).
LLAMACPP_BLOCK_KV_DTYPES = ("q8_0", "q4_0", "q4_1", "iq4_nl", "q5_0", "q5_1")


def kv_dtype_block(kv_dtype: str) -> tuple[int, int]:
    """(block_size elements, block bytes) of a KV dtype: (1, bytes) for whole-byte types, GGML's block for q8_0 & co."""
    name = str(kv_dtype).lower()
    if name in KV_DTYPE_BYTES:
        return 1, KV_DTYPE_BYTES[name]
    if name in LLAMACPP_BLOCK_KV_DTYPES:
        from kneecap.model.weights import ggml_tensor_types

        return ggml_tensor_types()[name]
    raise KneecapError(
        f"unknown KV dtype {kv_dtype!r}", f"use one of {', '.join((*KV_DTYPE_BYTES, *LLAMACPP_BLOCK_KV_DTYPES))}"
    )


def kv_dtype_bytes(kv_dtype: str) -> int | float:
    """Bytes per cached K/V element for a --kv-dtype name: an int, or for a block type the exact binary fraction
    type_size / block_size (q8_0: 1.0625, q4_0: 0.5625)."""
    block, size = kv_dtype_block(kv_dtype)
    if block == 1:
        return size
    if block & (block - 1):  # pragma: no cover - every GGML KV cache type has 32-element blocks
        raise KneecapError(f"KV dtype {kv_dtype} has {block}-element blocks", "use --kv-dtype f16")
    return size / block


def check_kv_dtype(model: Model, kv_dtype: str) -> None:
    """Raise unless a block-quantized KV dtype's block size divides the model's head_dim (llama.cpp refuses it)."""
    block, _ = kv_dtype_block(kv_dtype)
    if block == 1:
        return
    dims = {"head_dim": model.head_dim}
    if "mla" in model.layer_types:
        dims = {"kv_lora_rank + qk_rope_head_dim": model.kv_lora_rank + model.qk_rope_head_dim}
    for what, dim in dims.items():
        if dim % block:
            raise KneecapError(
                f"KV dtype {kv_dtype} stores blocks of {block} elements, which do not divide the "
                f"{what} {dim} of {model.name} (llama.cpp refuses to start)",
                "use --kv-dtype f16, bf16 or f32 for this model",
            )


def _whole_bytes(value: int | float) -> int:
    """A byte count computed with a fractional dtype_bytes, as a whole number (rounded up if it is not one)."""
    return value if isinstance(value, int) else math.ceil(value)


def kv_heads_per_gpu(num_key_value_heads: int, tp: int) -> int:
    """KV heads each TP rank stores: kv_heads / tp, but never less than one whole head (replication)."""
    return max(1, num_key_value_heads // tp)


def is_kv_replicated(num_key_value_heads: int, tp: int) -> bool:
    """True when tp exceeds the KV heads, so ranks hold copies of the same head."""
    return tp > num_key_value_heads


def check_tp(model: Model, tp: int) -> None:
    """Raise unless tp splits the attention heads evenly (what vLLM and SGLang require)."""
    heads, kvh = model.num_attention_heads, model.num_key_value_heads
    if heads % tp != 0:
        divisors = ", ".join(str(d) for d in range(1, min(heads, 64) + 1) if heads % d == 0)
        raise KneecapError(
            f"--tp {tp} does not divide the {heads} attention heads of {model.name}",
            f"use a divisor such as {divisors}",
        )
    uses_kv_heads = any(t in ("full_attention", "sliding_attention") for t in model.layer_types)
    if uses_kv_heads and kvh % tp != 0 and tp % kvh != 0:
        raise KneecapError(
            f"--tp {tp} neither divides nor is a multiple of the {kvh} KV heads of {model.name}",
            "use a TP degree that divides the KV heads or is a multiple of them",
        )


def layer_bytes_per_token(model: Model, kind: str, dtype_bytes: int | float, tp: int = 1) -> int:
    """Bytes one layer of this kind caches per token, per GPU at this TP degree (a whole number of bytes).

    dtype_bytes is kv_dtype_bytes(name): for a block type each K and V row (kv_heads x head_dim elements) is
    rows of whole blocks, as llama.cpp's ggml_row_size counts them.
    """
    if kind in ("full_attention", "sliding_attention"):
        return 2 * _whole_bytes(kv_heads_per_gpu(model.num_key_value_heads, tp) * model.head_dim * dtype_bytes)
    if kind == "mla":
        return _whole_bytes((model.kv_lora_rank + model.qk_rope_head_dim) * dtype_bytes)
    return 0  # linear_attention: fixed state, see state_bytes_per_sequence


def stage_layer_types(model: Model, pp: int = 1) -> list[str]:
    """Layer kinds one GPU holds: all of them at pp=1, else those of the heaviest pipeline stage (layers split as
    evenly as possible, first stages larger)."""
    if pp == 1:
        return list(model.layer_types)
    per_stage = math.ceil(model.num_hidden_layers / pp)
    stages = [model.layer_types[i : i + per_stage] for i in range(0, model.num_hidden_layers, per_stage)]
    return list(max(stages, key=lambda s: sum(layer_bytes_per_token(model, k, 1) for k in s) + len(s)))


def kv_bytes_per_token(model: Model, dtype_bytes: int | float) -> int:
    """Whole model, one sequence, all layers, before any sharding: bytes cached per token.

    Sliding layers count here (each token is cached while inside the window); linear layers add 0.
    """
    return sum(layer_bytes_per_token(model, kind, dtype_bytes, 1) for kind in model.layer_types)


def kv_bytes_per_token_per_gpu(model: Model, dtype_bytes: int | float, tp: int = 1, pp: int = 1) -> int:
    """Bytes per token on one GPU: TP shards KV heads (down to one head), PP splits the layers."""
    kinds = stage_layer_types(model, pp)
    return sum(layer_bytes_per_token(model, kind, dtype_bytes, tp) for kind in kinds)


def state_bytes_per_sequence(model: Model, tp: int = 1, pp: int = 1) -> int:
    """Fixed per-sequence state of linear-attention layers on one GPU (heads sharded over TP)."""
    n_linear = stage_layer_types(model, pp).count("linear_attention")
    return n_linear * math.ceil(model.linear_state_bytes_per_layer / tp)


def blocks_for(tokens: int, block_size: int) -> int:
    """Whole blocks needed for `tokens` tokens."""
    return -(-tokens // block_size)


def sequence_kv_bytes_per_gpu(
    model: Model,
    tokens: int,
    dtype_bytes: int | float,
    tp: int = 1,
    pp: int = 1,
    block_size: int = 16,
    paged: bool = True,
) -> int:
    """Bytes one sequence of `tokens` tokens occupies on one GPU.

    paged=True: whole blocks of `block_size` tokens per layer group (the last block partly empty —
    waste < block_size tokens); paged=False: exactly `tokens` slots (contiguous reservation).
    Sliding layers hold min(tokens, window) tokens (paged: plus one block, since the window
    straddles a block boundary); linear layers hold their fixed state.
    """
    kinds = stage_layer_types(model, pp)
    growing = sum(layer_bytes_per_token(model, k, dtype_bytes, tp) for k in kinds if k in ("full_attention", "mla"))
    sliding = sum(layer_bytes_per_token(model, k, dtype_bytes, tp) for k in kinds if k == "sliding_attention")
    if paged:
        slots = blocks_for(tokens, block_size) * block_size
        window = model.sliding_window or 0
        sliding_slots = min(slots, (blocks_for(window, block_size) + 1) * block_size) if sliding else 0
    else:
        slots = tokens
        sliding_slots = min(tokens, model.sliding_window or 0)
    return growing * slots + sliding * sliding_slots + state_bytes_per_sequence(model, tp, pp)
