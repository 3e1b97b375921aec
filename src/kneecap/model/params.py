"""Parameter counts from the architecture in config.json, split into parts that can be priced per dtype.

Owns the counting formulas (one per attention / MLP kind, below) and the breakdown API the planner
calls; does not read files (hf_config.py does) and does not know dtypes (quant.py, weights.py).

Per decoder layer, with h = hidden_size, n = num_attention_heads, k = num_key_value_heads, d = head_dim:
  GQA/MQA/MHA attention   q: h*n*d  k,v: h*k*d each  o: n*d*h   (+ biases if attention_bias; Qwen2 q/k/v bias;
                          + q_norm/k_norm d each for Qwen3/Gemma3/Qwen3-Next; gated attention doubles q (Qwen3-Next,
                          Qwen3.5: attn_output_gate); + n sink logits (gpt-oss))
  MLA (DeepSeek-V2/V3)    q_a: h*q_lora + q_lora (norm), q_b: q_lora*n*(nope+rope)   [or q: h*n*(nope+rope) without q_lora]
                          kv_a: h*(kv_lora+rope) + kv_lora (norm), kv_b: kv_lora*n*(nope+v), o: n*v*h
  Gated DeltaNet          in_proj: h*(2*nk*dk + 2*nv*dv) + h*2*nv (b, a), conv1d: (2*nk*dk + nv*dv)*kernel,
                          dt_bias + A_log: 2*nv, gated norm: dv, out: nv*dv*h
  SwiGLU MLP / expert     3*h*i (gate, up, down) (+ gpt-oss expert biases 2*i + h)
  GELU MLP (Phi-1/2,      2*h*i (fc1/c_fc, fc2/c_proj) + biases i + h; their attention has q/k/v/o biases
   StarCoder2)            (Phi always, StarCoder2 when use_bias), LayerNorms carry a bias (2*h each); Phi has
                          one norm per layer (parallel attention + MLP) and an lm_head bias (vocab)
  router                  h*E (+ E bias: gpt-oss; + E e_score_correction_bias: DeepSeek-V3/Kimi-K2)
  shared expert           DeepSeek: n_shared*3*h*moe_i; Qwen-MoE: 3*h*shared_i + h (shared_expert_gate); Llama 4: 3*h*i
  norms                   2*h per layer (Gemma 2/3: 4*h) + h final
  embed                   vocab*h; lm_head vocab*h unless tie_word_embeddings
Sources: the module definitions in Hugging Face transformers (modeling_llama, modeling_qwen2/3, modeling_qwen3_moe,
modeling_qwen3_next, modeling_gemma3, modeling_mixtral, modeling_gpt_oss, modeling_deepseek_v3, modeling_llama4,
modeling_phi, modeling_starcoder2);
checked against published totals in tests/model (Llama-3.1-8B 8.03B, Mixtral 46.7B, gpt-oss-120b 116.83B, ...).
Active parameters = total - (E - top_k) routed experts in every MoE layer (embeddings counted, as Mistral's
12.9B for Mixtral does; OpenAI's 5.1B for gpt-oss-120b leaves the input embedding out).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from kneecap.model.spec import VisionTower

# Parts of a checkpoint, each priced at its own dtype by the planner.
PARTS = (
    "embed",
    "attention",
    "linear_attention",
    "dense_mlp",
    "routed_experts",
    "shared_experts",
    "router",
    "lm_head",
    "norms",
    "other",
)


@dataclass(frozen=True)
class ParamCount:
    """Parameters per part for a whole model (all layers), plus what one routed expert holds."""

    parts: dict[str, int]
    expert_params: int  # ONE routed expert in ONE layer
    num_moe_layers: int
    num_experts: int
    num_experts_per_tok: int

    @property
    def total(self) -> int:
        return sum(self.parts.values())

    @property
    def active(self) -> int:
        idle = self.num_moe_layers * (self.num_experts - self.num_experts_per_tok) * self.expert_params
        return self.total - idle


def gqa_attention_params(cfg: Mapping, model_type: str) -> int:
    """One GQA/MQA/MHA attention block (see module docstring)."""
    h, n, k, d = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    q_out = n * d * (2 if _gated_attention(cfg, model_type) else 1)
    count = h * q_out + 2 * h * k * d + n * d * h
    if cfg.get("attention_bias") or _gelu_biased(cfg, model_type):
        count += q_out + 2 * k * d + h
    elif model_type in ("qwen2", "qwen2_moe", "qwen2_vl_text", "qwen2_5_vl_text"):
        count += n * d + 2 * k * d  # Qwen2 always has q/k/v bias, no o bias
    if model_type in (
        "qwen3",
        "qwen3_moe",
        "gemma3_text",
        "qwen3_next",
        "qwen3_5_text",
        "qwen3_5_moe_text",
        "qwen3_vl_text",
        "qwen3_vl_moe_text",
    ) or (model_type == "glm4_moe" and cfg.get("use_qk_norm")):
        count += 2 * d  # q_norm, k_norm (RMSNorm over head_dim)
    if model_type == "gpt_oss":
        count += n  # learned attention-sink logit per head
    if model_type == "phi" and cfg.get("qk_layernorm"):
        count += 2 * 2 * d  # q_layernorm, k_layernorm (LayerNorm over head_dim, weight + bias)
    return count


# Decoders with a two-matrix GELU MLP and LayerNorms with biases (modeling_phi, modeling_starcoder2).
GELU_MLP_TYPES = ("phi", "starcoder2")


def _gelu_biased(cfg: Mapping, model_type: str) -> bool:
    """Linear layers with biases: Phi's always (nn.Linear default), StarCoder2's when use_bias (default True)."""
    return model_type == "phi" or (model_type == "starcoder2" and bool(cfg.get("use_bias", True)))


def _dense_mlp_params(cfg: Mapping, model_type: str, hidden: int, intermediate: int) -> int:
    if model_type in GELU_MLP_TYPES:
        return 2 * hidden * intermediate + ((intermediate + hidden) if _gelu_biased(cfg, model_type) else 0)
    return swiglu_params(hidden, intermediate)


def _gated_attention(cfg: Mapping, model_type: str) -> bool:
    if model_type == "qwen3_next":
        return True  # q_proj outputs query and gate (modeling_qwen3_next), no config flag
    return bool(cfg.get("attn_output_gate", False)) or (
        model_type in ("qwen3_5_text", "qwen3_5_moe_text") and cfg.get("attn_output_gate") is None
    )


def mla_attention_params(cfg: Mapping) -> int:
    """One Multi-head Latent Attention block (DeepSeek-V2/V3, Kimi-K2)."""
    h, n = cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    kv_lora, q_lora = cfg["kv_lora_rank"], cfg.get("q_lora_rank")
    q = (h * q_lora + q_lora + q_lora * n * (nope + rope)) if q_lora else h * n * (nope + rope)
    kv = h * (kv_lora + rope) + kv_lora + kv_lora * n * (nope + v)
    return q + kv + n * v * h


def mla_projection_params(cfg: Mapping) -> dict[str, int]:
    """mla_attention_params per module of one layer, by its name under self_attn (the two LayerNorms included)."""
    h, n = cfg["hidden_size"], cfg["num_attention_heads"]
    nope, rope, v = cfg["qk_nope_head_dim"], cfg["qk_rope_head_dim"], cfg["v_head_dim"]
    kv_lora, q_lora = cfg["kv_lora_rank"], cfg.get("q_lora_rank")
    q = (
        {"q_a_proj": h * q_lora, "q_a_layernorm": q_lora, "q_b_proj": q_lora * n * (nope + rope)}
        if q_lora
        else {"q_proj": h * n * (nope + rope)}
    )
    return q | {
        "kv_a_proj_with_mqa": h * (kv_lora + rope),
        "kv_a_layernorm": kv_lora,
        "kv_b_proj": kv_lora * n * (nope + v),
        "o_proj": n * v * h,
    }


def gated_deltanet_params(cfg: Mapping) -> int:
    """One Gated DeltaNet (linear attention) block (Qwen3-Next, Qwen3.5)."""
    h = cfg["hidden_size"]
    nk, nv = cfg["linear_num_key_heads"], cfg["linear_num_value_heads"]
    dk, dv = cfg["linear_key_head_dim"], cfg["linear_value_head_dim"]
    key_dim, value_dim = nk * dk, nv * dv
    in_proj = h * (2 * key_dim + 2 * value_dim) + h * 2 * nv
    conv = (2 * key_dim + value_dim) * cfg["linear_conv_kernel_dim"]
    return in_proj + conv + 2 * nv + dv + value_dim * h


def swiglu_params(hidden: int, intermediate: int) -> int:
    """gate_proj + up_proj + down_proj."""
    return 3 * hidden * intermediate


def count_params(
    cfg: Mapping, model_type: str, layer_types: Sequence[str], moe_layers: Sequence[bool], tie_word_embeddings: bool
) -> ParamCount:
    """Parameters per part from a normalised config (HF names; head_dim, expert fields already resolved).

    `layer_types` is Model.layer_types; `moe_layers[i]` says whether layer i has routed experts.
    """
    h, vocab = cfg["hidden_size"], cfg["vocab_size"]
    num_layers = len(layer_types)
    parts = dict.fromkeys(PARTS, 0)
    parts["embed"] = vocab * h
    parts["lm_head"] = 0 if tie_word_embeddings else vocab * h + (vocab if model_type == "phi" else 0)
    norms_per_layer = {"gemma2": 4, "gemma3_text": 4, "phi": 2, "starcoder2": 4}.get(model_type, 2)
    final_norm = 2 * h if model_type in GELU_MLP_TYPES else h  # LayerNorm weight + bias
    parts["norms"] = num_layers * norms_per_layer * h + final_norm

    for kind in layer_types:
        if kind == "mla":
            parts["attention"] += mla_attention_params(cfg)
        elif kind == "linear_attention":
            parts["linear_attention"] += gated_deltanet_params(cfg)
        else:
            parts["attention"] += gqa_attention_params(cfg, model_type)

    num_experts = cfg.get("num_experts", 0)
    top_k = cfg.get("num_experts_per_tok", 0)
    expert_i = cfg.get("moe_intermediate_size") or cfg.get("intermediate_size")
    expert = swiglu_params(h, expert_i) if num_experts else 0
    if model_type == "gpt_oss":
        expert += 2 * expert_i + h  # gate_up_proj_bias + down_proj_bias
    dense_i = cfg.get("intermediate_size_mlp") or cfg.get("intermediate_size")
    n_moe = 0
    for is_moe in moe_layers:
        if not is_moe:
            parts["dense_mlp"] += _dense_mlp_params(cfg, model_type, h, dense_i)
            continue
        n_moe += 1
        parts["routed_experts"] += num_experts * expert
        parts["router"] += h * num_experts
        if model_type in ("gpt_oss", "deepseek_v3", "kimi_k2", "deepseek_v32", "glm_moe_dsa", "glm4_moe"):
            parts["router"] += num_experts  # router bias / e_score_correction_bias
        parts["shared_experts"] += _shared_expert_params(cfg, model_type)
    return ParamCount(
        parts={p: parts[p] for p in PARTS},
        expert_params=expert,
        num_moe_layers=n_moe,
        num_experts=num_experts if n_moe else 0,
        num_experts_per_tok=top_k if n_moe else 0,
    )


def _shared_expert_params(cfg: Mapping, model_type: str) -> int:
    h = cfg["hidden_size"]
    if cfg.get("n_shared_experts"):
        return cfg["n_shared_experts"] * swiglu_params(h, cfg["moe_intermediate_size"])
    if cfg.get("shared_expert_intermediate_size"):
        return swiglu_params(h, cfg["shared_expert_intermediate_size"]) + h  # + shared_expert_gate (h -> 1)
    if model_type == "llama4_text":
        return swiglu_params(h, cfg["intermediate_size"])
    return 0


def param_breakdown(model) -> dict[str, int]:
    """Parameters per part (keys in PARTS, zeros omitted), summing to model.total_params.

    A Model built without a breakdown (by hand, or a synthetic preset) reports {"other": total_params}.
    """
    if model.param_parts:
        return {part: n for part, n in model.param_parts if n}
    return {"other": model.total_params}


def part_dtypes(model) -> dict[str, str]:
    """The dtype each part ships in (e.g. gpt-oss: routed_experts "mxfp4", the rest "bf16")."""
    if model.part_dtypes:
        return dict(model.part_dtypes)
    return {part: model.weight_dtype or "bf16" for part in param_breakdown(model)}


# Parts every quantization scheme leaves in the checkpoint's own dtype (AWQ/GPTQ, fp8, modelopt, compressed-tensors
# and mxfp4 all replace the decoder Linear layers only; see kneecap.model.quant).
UNQUANTIZED_PARTS = ("embed", "norms", "router", "lm_head")


def main_dtype(model) -> str | None:
    """The checkpoint's main dtype: that of its largest part (None without a breakdown)."""
    counts = param_breakdown(model)
    return part_dtypes(model).get(max(counts, key=counts.get)) if counts else None


def part_dtypes_at(model, weight_dtype: str) -> dict[str, str]:
    """The dtype of each part with the decoder's Linear parts at weight_dtype: UNQUANTIZED_PARTS as shipped."""
    return {part: dt if part in UNQUANTIZED_PARTS else weight_dtype for part, dt in part_dtypes(model).items()}


def weight_bytes_by_part(model, weight_dtype: str | None = None) -> dict[str, int]:
    """Bytes of each part, whole model before sharding.

    weight_dtype=None: as the checkpoint ships (exact GGUF tensor bytes; else params x bits of each part's
    dtype, scale overhead included, kneecap.model.weights). A dtype name: every part stored as that dtype.
    """
    from kneecap.model.weights import weight_bytes

    breakdown = param_breakdown(model)
    if weight_dtype is None and model.part_bytes:
        return {part: n for part, n in model.part_bytes if part in breakdown}
    dtypes = part_dtypes(model)
    return {part: weight_bytes(n, weight_dtype or dtypes.get(part, "bf16")) for part, n in breakdown.items()}


def total_weight_bytes(model, weight_dtype: str | None = None) -> int:
    """Sum of weight_bytes_by_part: what the weights occupy, whole model before sharding."""
    return sum(weight_bytes_by_part(model, weight_dtype).values())


def vision_encoder_params(vision: Mapping, text_hidden: int, model_type: str) -> int | None:
    """Parameters of a SigLIP vision tower and its projector (transformers' SiglipVisionModel: patch embedding,
    one position embedding per patch, per layer q/k/v/o with biases, a GELU MLP with biases and two LayerNorms, a
    final LayerNorm; Gemma 3's projector: mm_input_projection vision x text hidden and an RMS norm), None for an
    encoder of another kind (not counted)."""
    if vision.get("model_type") != "siglip_vision_model":
        return None
    h, i, n = vision["hidden_size"], vision["intermediate_size"], vision["num_hidden_layers"]
    patch, image, channels = vision["patch_size"], vision["image_size"], vision.get("num_channels", 3)
    layer = 4 * (h * h + h) + (h * i + i) + (i * h + h) + 2 * 2 * h
    tower = channels * patch * patch * h + h + (image // patch) ** 2 * h + n * layer + 2 * h
    projector = h * text_hidden + h if model_type == "gemma3_text" else 0
    return tower + projector


def siglip_tower(vision: Mapping, tokens_per_image: int | None) -> VisionTower | None:
    """A SigLIP tower's shapes (None for another encoder); tokens_per_image: what the model's projector pools an
    image to (Gemma 3's mm_tokens_per_image), else one token a patch."""
    if vision.get("model_type") != "siglip_vision_model":
        return None
    patches = (vision["image_size"] // vision["patch_size"]) ** 2
    return VisionTower(
        patches_per_image=patches,
        hidden_size=vision["hidden_size"],
        intermediate_size=vision["intermediate_size"],
        image_size=vision["image_size"],
        channels=vision.get("num_channels", 3),
        tokens_per_image=tokens_per_image or patches,
    )


def vision_profile_bytes(tower: VisionTower, images: int, text_hidden: int) -> tuple[int, int]:
    """(peak, kept) bytes of vLLM's start-up profile of a vision tower on `images` images of the largest size
    (gpu_model_runner.profile_run: embed_multimodal on a dummy batch, its outputs kept in the encoder cache while
    the language model's dummy pass runs). Peak: the pixels (16-bit) plus one encoder layer's live activations, the
    residual stream and the layer's input (2 x hidden) and the MLP's up-projection and its activation (2 x
    intermediate) a patch, 16-bit; attention runs in a fused kernel that keeps no score matrix. Kept: the
    projected embeddings, tokens_per_image x the language model's hidden size a image, 16-bit."""
    per_patch = 2 * (2 * tower.hidden_size + 2 * tower.intermediate_size)
    pixels = 2 * tower.channels * tower.image_size**2
    peak = images * (tower.patches_per_image * per_patch + pixels)
    kept = images * tower.tokens_per_image * text_hidden * 2
    return peak, kept


# -- what one tensor-parallel rank holds --------------------------------------------------------------------------
# Every part is split over the TP ranks except what the engines build whole on each rank. Read in vLLM 0.11.0
# (model_executor/), SGLang 0.5 (python/sglang/srt/) and TensorRT-LLM's PyTorch backend (tensorrt_llm/_torch/);
# all three agree on each of these, so the rule needs no engine:
#   norms      RMSNorm / LayerNorm weights are plain parameters of the full width on every rank (vLLM
#              models/llama.py:304-306,368, qwen3_moe.py:339-341,395; the attention's q_norm / k_norm over head_dim
#              too: qwen3.py:136-137, qwen3_moe.py:265-266).
#   router     the MoE gate is ReplicatedLinear (vLLM models/qwen3_moe.py:156, mixtral.py:106, qwen2_moe.py:125,
#              deepseek_v2.py:158 with its e_score_correction_bias :164; SGLang models/qwen2_moe.py:155;
#              TensorRT-LLM modeling_qwen3_moe.py Qwen3Gate, a whole (num_experts, hidden) weight).
#   K/V heads  QKVParallelLinear gives each rank one KV head when TP reaches the KV head count, replicated
#              tp / kv_heads times (vLLM layers/linear.py:903-905 num_kv_head_replicas = divide(tp_size,
#              total_num_kv_heads); SGLang's layers/linear.py copies it; TensorRT-LLM _torch/modules/attention.py
#              Attention.__init__ at commit 00547a2: num_key_value_heads = ceil(kv_heads / tp) a rank, qkv_proj of
#              tp x (q + 2 kv) columns). Their biases follow them.
#   o_proj bias  RowParallelLinear keeps its bias at the full output size on every rank (vLLM layers/linear.py:
#              1281-1282).
#   MLA        the down-projections q_a_proj and kv_a_proj_with_mqa and their layernorms are whole on every rank
#              (vLLM models/deepseek_v2.py DeepseekV2MLAAttention :877-891 fused_qkv_a_proj = MergedColumnParallelLinear(disable_tp=True) or
#              kv_a_proj_with_mqa = ReplicatedLinear, q_a_layernorm :894, kv_a_layernorm :909; SGLang
#              models/deepseek_v2.py fused_qkv_a_proj_with_mqa = ReplicatedLinear; TensorRT-LLM attention.py MLA:
#              kv_a_proj_with_mqa = Linear(hidden, q_lora + kv_lora + rope) without a mapping, so whole).
#              (TensorRT-LLM's MLA also keeps k_b_proj_trans / v_b_proj copies of kv_b_proj: not counted.)
# Not followed (small, or not read): the biases of GELU MLPs' down projections (Phi, StarCoder2), Qwen2-MoE's
# shared_expert_gate (h -> 1), the linear-attention layers' norms; the vocabulary padding of the embedding.


def _gqa_extras(model) -> tuple[bool, bool, bool]:
    """(q/k/v bias, o bias, q/k norms) of a GQA layer, read off the attention count as vLLM's layout reader does:
    anything else beyond q/k/v/o (gated queries, sinks, biases of other shapes) is left split."""
    gqa = model.count_layers("full_attention") + model.count_layers("sliding_attention")
    attention = dict(model.param_parts).get("attention", 0)
    if not gqa or "mla" in model.layer_types or attention % gqa:
        return False, False, False
    h, n, k, d = model.hidden_size, model.num_attention_heads, model.num_key_value_heads, model.head_dim
    extra = attention // gqa - (h * (n + 2 * k) * d + n * d * h)
    return {
        (n + 2 * k) * d: (True, False, False),
        (n + 2 * k) * d + h: (True, True, False),
        2 * d: (False, False, True),
    }.get(extra, (False, False, False))


def tp_layout(model, tp: int) -> dict[str, tuple[int, int]]:
    """(split, whole) parameters of each part (keys of param_breakdown) on a TP-`tp` deployment: each rank holds
    split / tp + whole. split counts the K/V heads as often as the ranks hold copies of them (tp / kv_heads when TP
    exceeds the KV heads), whole what every rank builds in full (the rules above). At tp 1: (count, 0)."""
    counts = param_breakdown(model)
    if tp <= 1 or set(counts) == {"other"}:
        return {part: (n, 0) for part, n in counts.items()}
    whole = dict.fromkeys(counts, 0)
    extra_split = dict.fromkeys(counts, 0)
    whole["norms"] = counts.get("norms", 0)
    whole["router"] = counts.get("router", 0)
    h, k, d = model.hidden_size, model.num_key_value_heads, model.head_dim
    if "attention" in counts:
        gqa = model.count_layers("full_attention") + model.count_layers("sliding_attention")
        qkv_bias, o_bias, qk_norm = _gqa_extras(model)
        copies = max(0, max(1, k // tp) * tp - k)  # K/V heads beyond the model's, over all ranks
        extra_split["attention"] = gqa * copies * 2 * d * (h + (1 if qkv_bias else 0))
        whole["attention"] = gqa * ((h if o_bias else 0) + (2 * d if qk_norm else 0))
        if "mla" in model.layer_types:
            q_lora = model.q_lora_rank or 0
            kv_a = model.kv_lora_rank + model.qk_rope_head_dim
            whole["attention"] += model.count_layers("mla") * (h * (q_lora + kv_a) + q_lora + model.kv_lora_rank)
    return {part: (n - whole[part] + extra_split[part], whole[part]) for part, n in counts.items()}


def params_per_rank(model, tp: int) -> dict[str, float]:
    """Parameters of each part one TP rank holds (tp_layout: split / tp + whole)."""
    return {part: split / tp + whole for part, (split, whole) in tp_layout(model, tp).items()}
