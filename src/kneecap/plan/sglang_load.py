"""What SGLang's weight load holds on one GPU beyond the weight tensors (pure): the segments PyTorch's CUDA caching
allocator reserves for them.

SGLang logs the load as the drop in free GPU memory ("Load weight end. ... mem usage=X GB": model_runner.py
`load_model`, `get_available_gpu_memory` before and after, each after `torch.cuda.empty_cache()`), and takes the pool
from what is left, so it counts the allocator's segments, not the tensors' bytes. PyTorch's default allocator
(c10/cuda/CUDACachingAllocator.cpp; the constants and rules below are those of PyTorch 2.5, the release SGLang 0.4.3
and 0.4.4 require, and unchanged in later releases):

- every request is rounded up to 512 B (`round_size`, kMinBlockSize);
- requests of at most 1 MiB (kSmallSize) come from 2 MiB segments (kSmallBuffer), those under 10 MiB
  (kMinLargeAlloc) from 20 MiB segments (kLargeBuffer), larger ones from a segment of their own rounded up to
  2 MiB (kRoundLarge) (`get_allocation_size`);
- a request takes the smallest free block of its pool that holds it (`get_free_block`), else a new segment; the
  block is split when what is left is at least 512 B (small pool) or more than 1 MiB (large pool) (`should_split`);
- `empty_cache` returns only segments with nothing allocated in them (`release_cached_blocks`).

So a 12.5 MiB weight holds a 14 MiB segment. SGLang builds the model on the GPU tensor by tensor
(model_loader/loader.py `with target_device:`), in the order of the model file's __init__; for the two model files
read (models/llama.py and models/qwen2.py, 0.4.3.post4 and 0.4.4.post1): the embedding, then per layer the fused
qkv_proj (weight, then its bias where the model has one), o_proj, the RoPE cache (the first layer only: get_rope
keeps one; its float32 freqs, cos and sin temporaries are freed once it is built), the fused gate_up_proj,
down_proj and the two norms, then the final norm and the untied lm_head. The embedding and lm_head rows are the
vocabulary padded to a multiple of 64 (layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE), split over
the TP ranks. Not modelled: expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which packs the
tensors in 2 MiB pages), quantized checkpoints, MoE, MLA and other model files (load_overhead_bytes returns None).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kneecap.model.spec import Model

MiB = 2**20
MIN_BLOCK = 512  # kMinBlockSize
SMALL_SIZE = 1 * MiB  # kSmallSize: largest request served by the small pool
SMALL_BUFFER = 2 * MiB  # kSmallBuffer: small-pool segment
LARGE_BUFFER = 20 * MiB  # kLargeBuffer: segment for requests between 1 and 10 MiB
MIN_LARGE_ALLOC = 10 * MiB  # kMinLargeAlloc
ROUND_LARGE = 2 * MiB  # kRoundLarge
VOCAB_PADDING = 64  # SGLang DEFAULT_VOCAB_PADDING_SIZE
SGLANG_DENSE_FILES = ("LlamaForCausalLM", "Qwen2ForCausalLM")  # the model files read (models/llama.py, qwen2.py)


def round_size(nbytes: int) -> int:
    return max(MIN_BLOCK, -(-nbytes // MIN_BLOCK) * MIN_BLOCK)


def allocation_size(nbytes: int) -> int:
    """The segment PyTorch reserves for a request that no free block holds (`get_allocation_size`)."""
    if nbytes <= SMALL_SIZE:
        return SMALL_BUFFER
    if nbytes < MIN_LARGE_ALLOC:
        return LARGE_BUFFER
    return -(-nbytes // ROUND_LARGE) * ROUND_LARGE


@dataclass
class _Segment:
    small: bool
    blocks: list = field(default_factory=list)  # [size, owner or None], in address order


@dataclass
class CachingAllocator:
    """PyTorch's CUDA caching allocator on one stream, as far as the sizes go: alloc, free, empty_cache."""

    segments: list = field(default_factory=list)

    def alloc(self, owner: str, nbytes: int) -> None:
        size = round_size(nbytes)
        small = size <= SMALL_SIZE
        best = None
        for seg in self.segments:
            if seg.small != small:
                continue
            for i, (bsize, who) in enumerate(seg.blocks):
                if who is None and bsize >= size and (best is None or bsize < best[0].blocks[best[1]][0]):
                    best = (seg, i)
        if best is None:
            seg = _Segment(small, [[allocation_size(size), None]])
            self.segments.append(seg)
            best = (seg, 0)
        seg, i = best
        left = seg.blocks[i][0] - size
        if (small and left >= MIN_BLOCK) or (not small and left > SMALL_SIZE):
            seg.blocks[i : i + 1] = [[size, owner], [left, None]]
        else:
            seg.blocks[i][1] = owner

    def free(self, owner: str) -> None:
        for seg in self.segments:
            for block in seg.blocks:
                if block[1] == owner:
                    block[1] = None
            merged: list = []
            for block in seg.blocks:  # coalesce neighbouring free blocks
                if merged and merged[-1][1] is None and block[1] is None:
                    merged[-1][0] += block[0]
                else:
                    merged.append(block)
            seg.blocks = merged

    def empty_cache(self) -> None:
        self.segments = [s for s in self.segments if any(who is not None for _, who in s.blocks)]

    @property
    def reserved_bytes(self) -> int:
        return sum(size for s in self.segments for size, _ in s.blocks)


def dense_load_tensors(
    model: Model, tp: int, element_bytes: int, rope_bytes: int, rope_temp_bytes: int
) -> list[tuple[str, str, int]]:
    """('alloc' | 'free', name, bytes) in the order SGLang's Llama / Qwen2 model file creates them on one TP rank."""
    q = model.num_attention_heads // tp * model.head_dim
    kv = max(1, model.num_key_value_heads // tp) * model.head_dim
    h, inter = model.hidden_size, (model.intermediate_size or 0) // tp
    parts = dict(model.param_parts)
    per_layer_attn = parts.get("attention", 0) // model.num_hidden_layers
    has_bias = (
        per_layer_attn
        - model.hidden_size * (2 * model.num_attention_heads + 2 * model.num_key_value_heads) * (model.head_dim)
        == (model.num_attention_heads + 2 * model.num_key_value_heads) * model.head_dim
    )
    vocab_rows = -(-model.vocab_size // VOCAB_PADDING) * VOCAB_PADDING // tp
    events = [("alloc", "embed", vocab_rows * h * element_bytes)]
    for i in range(model.num_hidden_layers):
        events.append(("alloc", f"{i}.qkv", (q + 2 * kv) * h * element_bytes))
        if has_bias:
            events.append(("alloc", f"{i}.qkv_bias", (q + 2 * kv) * element_bytes))
        events.append(("alloc", f"{i}.o", h * q * element_bytes))
        if i == 0 and rope_bytes:  # get_rope builds the one cache: float32 freqs, cos, sin, then the cache
            t = rope_temp_bytes
            events += [("alloc", "rope.freqs", t), ("alloc", "rope.cos", t), ("alloc", "rope.sin", t)]
            events += [("alloc", "rope", rope_bytes)]
            events += [("free", "rope.freqs", 0), ("free", "rope.cos", 0), ("free", "rope.sin", 0)]
        events.append(("alloc", f"{i}.gate_up", 2 * inter * h * element_bytes))
        events.append(("alloc", f"{i}.down", h * inter * element_bytes))
        events += [("alloc", f"{i}.norm1", h * element_bytes), ("alloc", f"{i}.norm2", h * element_bytes)]
    events.append(("alloc", "norm", h * element_bytes))
    if parts.get("lm_head"):
        events.append(("alloc", "lm_head", vocab_rows * h * element_bytes))
    return events


def load_overhead_bytes(
    model: Model, tp: int, weight_dtype: str, weights_bytes: int, rope_bytes: int, rope_temp_bytes: int
) -> int | None:
    """Bytes SGLang's load reserves on one TP rank beyond the weights kneecap counts there (weights_bytes) and its
    RoPE cache (rope_temp_bytes: each of the float32 freqs, cos and sin it is computed from): the allocator's rounding
    plus the vocabulary padding. None where kneecap does not model the load: another model file, MoE, MLA, linear
    attention, weights that are not 16-bit, heads or MLP width that TP does not divide, a model without its
    parameter breakdown (param_parts)."""
    shardable = (
        model.num_attention_heads % tp == 0
        and (model.num_key_value_heads % tp == 0 or tp % model.num_key_value_heads == 0)
        and model.intermediate_size
        and model.intermediate_size % tp == 0
    )
    plain = set(model.layer_types) <= {"full_attention"} and not model.num_experts and bool(model.param_parts)
    if (
        model.architecture not in SGLANG_DENSE_FILES
        or not plain
        or not shardable
        or weight_dtype
        not in (
            "bf16",
            "fp16",
        )
    ):
        return None
    alloc = CachingAllocator()
    for action, name, nbytes in dense_load_tensors(model, tp, 2, rope_bytes, rope_temp_bytes):
        if action == "alloc":
            alloc.alloc(name, nbytes)
        else:
            alloc.free(name)
    alloc.empty_cache()
    return alloc.reserved_bytes - weights_bytes - rope_bytes
