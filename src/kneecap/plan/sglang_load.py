"""What SGLang's weight load holds on one GPU beyond the weight tensors (pure): the segments PyTorch's CUDA caching
allocator reserves for them.

SGLang logs the load as the drop in free GPU memory ("Load weight end. ... mem usage=X GB": model_runner.py
`load_model`, `get_available_gpu_memory` before and after, each after `torch.cuda.empty_cache()`), and takes the pool
from what is left, so it counts the segments PyTorch's CUDA caching allocator reserves for the tensors once the cache
is emptied (plan/caching_allocator.py `reserved_bytes`), not the tensors' bytes. PyTorch's default allocator is the
one SGLang 0.4.3 and 0.4.4 run (they require PyTorch 2.5).

A 12.5 MiB weight, for one, holds a 14 MiB segment (get_allocation_size). SGLang builds the model on the GPU tensor by tensor
(model_loader/loader.py `with target_device:`), in the order of the model file's __init__; for the two model files
read (models/llama.py and models/qwen2.py, 0.4.3.post4 and 0.4.4.post1): the embedding, then per layer the fused
qkv_proj (weight, then its bias where the model has one), o_proj, the RoPE cache (the first layer only: get_rope
keeps one; its float32 freqs, cos and sin temporaries are freed once it is built), the fused gate_up_proj,
down_proj and the two norms, then the final norm and the untied lm_head. The embedding and lm_head rows are the
vocabulary padded to a multiple of 64 (layers/vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE), split over
the TP ranks. Not modelled: expandable segments (PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True, which packs the
tensors in 2 MiB pages), quantized checkpoints, MoE, MLA and other model files (load_overhead_bytes returns None).
The two engines share the allocator, not the tensor order: vLLM's replay (vllm_load.py, from vLLM's model files)
adds four float32 attention scale scalars per layer, o_proj biases, q/k norms, Gemma's files and the RoPE's arange and
inv_freq temporaries; this one, from SGLang's llama.py / qwen2.py, has none of them (SGLang's RadixAttention sets its
k_scale / v_scale to None, not to tensors, without a quantization config: layers/radix_attention.py as read on the
main branch, the 0.4.x file not compared).
"""

from __future__ import annotations

from kneecap.model.spec import Model
from kneecap.plan.caching_allocator import Op, replay

VOCAB_PADDING = 64  # SGLang DEFAULT_VOCAB_PADDING_SIZE
SGLANG_DENSE_FILES = ("LlamaForCausalLM", "Qwen2ForCausalLM")  # the model files read (models/llama.py, qwen2.py)


def dense_load_ops(model: Model, tp: int, element_bytes: int, rope_bytes: int, rope_temp_bytes: int) -> list[Op]:
    """The tensors SGLang's Llama / Qwen2 model file creates on one TP rank, in order (caching_allocator.Op)."""
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
    ops = [("a", None, vocab_rows * h * element_bytes)]
    for i in range(model.num_hidden_layers):
        ops.append(("a", None, (q + 2 * kv) * h * element_bytes))
        if has_bias:
            ops.append(("a", None, (q + 2 * kv) * element_bytes))
        ops.append(("a", None, h * q * element_bytes))
        if i == 0 and rope_bytes:  # get_rope builds the one cache: float32 freqs, cos, sin, then the cache
            t = rope_temp_bytes
            ops += [("a", "rope.freqs", t), ("a", "rope.cos", t), ("a", "rope.sin", t)]
            ops += [("a", None, rope_bytes)]
            ops += [("f", "rope.freqs"), ("f", "rope.cos"), ("f", "rope.sin")]
        ops.append(("a", None, 2 * inter * h * element_bytes))
        ops.append(("a", None, h * inter * element_bytes))
        ops += [("a", None, h * element_bytes), ("a", None, h * element_bytes)]
    ops.append(("a", None, h * element_bytes))
    if parts.get("lm_head"):
        ops.append(("a", None, vocab_rows * h * element_bytes))
    return ops


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
    alloc = replay(dense_load_ops(model, tp, 2, rope_bytes, rope_temp_bytes))
    alloc.empty_cache()
    return alloc.reserved_bytes - weights_bytes - rope_bytes
