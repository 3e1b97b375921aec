"""The Model record: the architecture facts that set memory and compute, nothing else.

Field names mirror Hugging Face `config.json` where the value mirrors it. A Model is built
by an adapter (kneecap.model.hf_config.from_hf_config, gguf_reader, presets) and never mutated; this
module imports none of them. Per-token KV bytes are derived in kneecap.model.kv from `layer_types`, not stored.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kneecap.errors import KneecapError

# One entry per decoder layer in Model.layer_types:
#   "full_attention"    MHA/GQA/MQA: caches K and V for every token, num_key_value_heads x head_dim each
#   "sliding_attention" same per token, but holds at most `sliding_window` tokens per sequence
#                       (chunked-local attention, e.g. Llama 4, is modelled the same way)
#   "mla"               Multi-head Latent Attention: one latent of kv_lora_rank + qk_rope_head_dim per token,
#                       no K/V factor 2, identical on every TP rank (as vLLM and SGLang cache it)
#   "linear_attention"  Gated DeltaNet / Mamba-style: no per-token cache, a fixed recurrent state per sequence
LAYER_KINDS = ("full_attention", "sliding_attention", "mla", "linear_attention")
# Readers refuse layer counts above this before building per-layer lists (a corrupt config.json or GGUF
# could otherwise ask for 2**63 entries); the deepest published decoders have ~130 layers.
MAX_LAYERS = 100_000


@dataclass(frozen=True)
class VisionTower:
    """What a vision encoder's forward pass holds per image (a ViT: patches through hidden and MLP widths), for the
    activation peak of the engine's start-up profile of it (kneecap.model.params.vision_profile_bytes)."""

    patches_per_image: int  # (image_size / patch_size)^2
    hidden_size: int
    intermediate_size: int
    image_size: int  # pixels a side
    channels: int
    tokens_per_image: int  # the language model's placeholder tokens an image becomes (after any pooling)


@dataclass(frozen=True)
class RopeCache:
    """One rotary-embedding cos/sin buffer vLLM builds when it loads the model (kneecap.model.rope, which also
    gives its rows at a vLLM release): rows x rotary_dim values of element_bytes."""

    kind: str  # vLLM's rope_type: default, llama3, ntk, linear, dynamic, yarn, longrope
    positions: int  # max_position_embeddings (YaRN: the original one; longrope: original + max)
    rotary_dim: int  # head_dim x partial_rotary_factor
    element_bytes: int  # 2: the model's 16-bit dtype; 4 where the model file asks for float32 (gpt-oss)
    theta: float  # the RoPE base (two caches that differ only in it are two buffers)
    factor: float = 1.0  # linear / dynamic / YaRN scaling factor


@dataclass(frozen=True)
class Model:
    """Architecture facts of one decoder-only model (the text model of a multimodal wrapper)."""

    name: str
    source: str  # where the numbers came from: a file path, a preset and its citation, a hub id
    architecture: str  # HF architectures[0] or GGUF general.architecture
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_key_value_heads: int  # KV heads of full/sliding layers (for MLA: the config value, unused by the cache)
    head_dim: int  # per-head dim of K and V in full/sliding layers
    vocab_size: int
    layer_types: tuple[str, ...]  # len == num_hidden_layers, each in LAYER_KINDS
    total_params: int  # every weight, all experts: what must sit in memory
    active_params: int  # weights touched per token (MoE: shared + top-k experts); == total for dense
    max_position_embeddings: int | None = None
    intermediate_size: int | None = None
    sliding_window: int | None = None  # tokens kept by a sliding_attention layer
    attention_chunked: bool = False  # the sliding_attention layers are chunked-local (Llama 4): chunks, not a window
    # a multimodal checkpoint's encoder (vision tower + projector), stored at 16 bits, which vLLM loads unless it
    # serves the language model only (--language-model-only); not in total_params / param_parts (the decoder's)
    encoder_params: int = 0
    vision_tower: VisionTower | None = None  # that encoder's shapes, where kneecap knows them (SigLIP)
    # MLA (DeepSeek-V2/V3, Kimi-K2): cached latent = kv_lora_rank + qk_rope_head_dim elements per token per layer
    kv_lora_rank: int | None = None
    qk_rope_head_dim: int | None = None
    q_lora_rank: int | None = None  # MLA query down-projection width (None: DeepSeek-V2-Lite's plain q_proj)
    v_head_dim: int | None = None  # MLA value head width (head_dim is the query/key's: qk_nope + qk_rope)
    # Linear-attention / SSM layers: fixed state per sequence per layer, in bytes (recurrent + conv state)
    linear_state_bytes_per_layer: int = 0
    # MoE
    num_experts: int = 0  # routed experts per MoE layer (0 = dense)
    num_experts_per_tok: int = 0
    num_shared_experts: int = 0
    expert_params: int = 0  # parameters of ONE routed expert in ONE layer
    num_moe_layers: int = 0
    # Checkpoint
    checkpoint_bytes: int | None = None  # exact bytes of the weights on disk (safetensors index total_size)
    weight_dtype: str | None = None  # dtype the checkpoint ships in (from torch_dtype / quantization_config)
    # KV-cache dtype the checkpoint was calibrated for ("fp8": ModelOpt kv_cache_quant_algo FP8, compressed-tensors
    # kv_cache_scheme 8-bit float); None when the checkpoint says nothing (the engine's default applies)
    kv_dtype: str | None = None
    # the RoPE cos/sin caches vLLM builds at load (kneecap.model.rope; empty where kneecap does not model them)
    rope_caches: tuple[RopeCache, ...] = ()
    notes: tuple[str, ...] = field(default_factory=tuple)  # facts worth showing a user (e.g. naive-formula error)
    # Parameter breakdown (kneecap.model.params): (part, count) pairs summing to total_params, the dtype each
    # part ships in, and the bytes each part occupies as shipped (exact for GGUF; params x bits otherwise).
    # Empty when a Model is built by hand; kneecap.model.params.param_breakdown() then reports one "other" part.
    param_parts: tuple[tuple[str, int], ...] = ()
    part_dtypes: tuple[tuple[str, str], ...] = ()
    part_bytes: tuple[tuple[str, int], ...] = ()

    def __post_init__(self) -> None:
        for name in (
            "num_hidden_layers",
            "hidden_size",
            "num_attention_heads",
            "head_dim",
            "vocab_size",
            "total_params",
            "active_params",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value <= 0:
                raise KneecapError(
                    f"model {self.name!r}: {name} must be a positive integer, got {value!r}",
                    f"fix {name} in {self.source}",
                )
        unknown = sorted(set(self.layer_types) - set(LAYER_KINDS))
        for bad, what, fix in (  # the first that holds is the error
            (
                self.num_key_value_heads <= 0,
                f"num_key_value_heads must be positive, got {self.num_key_value_heads!r}",
                f"fix num_key_value_heads in {self.source}",
            ),
            (
                len(self.layer_types) != self.num_hidden_layers,
                f"{len(self.layer_types)} layer types for {self.num_hidden_layers} layers",
                f"make layer_types as long as num_hidden_layers in {self.source}",
            ),
            (unknown, f"unknown layer type(s) {unknown}", f"use one of {', '.join(LAYER_KINDS)}"),
            (
                "sliding_attention" in self.layer_types and not self.sliding_window,
                "sliding_attention layers but no sliding_window",
                f"set sliding_window in {self.source}",
            ),
            (
                "mla" in self.layer_types and not (self.kv_lora_rank and self.qk_rope_head_dim is not None),
                "MLA layers need kv_lora_rank and qk_rope_head_dim",
                f"set both in {self.source}",
            ),
            (
                self.active_params > self.total_params,
                f"active_params {self.active_params} exceeds total_params {self.total_params}",
                f"fix the parameter counts in {self.source}",
            ),
        ):
            if bad:
                raise KneecapError(f"model {self.name!r}: {what}", fix)

    @property
    def is_moe(self) -> bool:
        return self.num_experts > 0

    def count_layers(self, kind: str) -> int:
        return self.layer_types.count(kind)
