"""The HBM ledger: one Deployment in, one Plan out (pure: no I/O, no clocks, no printing).

Owns the per-GPU budget (weights, overhead, fragmentation headroom, KV pool), the KV cost of a
sequence, and how many sequences fit under contiguous vs paged allocation. Does not own the
KV formula (kneecap.model.kv), weight bits (kneecap.model.weights), levers and sweeps
(levers.py, sweeps.py), engine pool models (engines.py) or rendering (render.py).

Arithmetic, bytes per GPU (seed 003 §1.2-1.4; every division rounds down unless noted):
    usable      = hbm x mem_util
    weights     = (split / tp + whole) / pp              (rounded up: a weight byte is never shared; split / whole:
                                                          each part's bytes as the engines shard it over TP,
                                                          model.params.tp_layout; params x bits/8 / (tp x pp)
                                                          for a model without a parameter breakdown)
    rest        = usable - weights - overhead
    frag        = rest x frag_fraction                     (headroom for allocator fragmentation)
    kv_pool     = rest - frag
    blocks      = kv_pool / (kv_bytes_per_token_per_gpu x block_size)
    contiguous  = kv_pool / (bytes/token x context)                      reserve the advertised max
    paged       = kv_pool / (bytes/token x ceil(mean/block) x block)     whole blocks of the mean
Models mixing layer kinds (sliding-window or linear-attention layers beside full ones) are counted as vLLM's
hybrid allocator lays them out (engines.VllmLayout, vLLM 0.32 kv_cache_utils): layers in KV cache groups of
equal size, each kind padded up to whole groups; a block is one page in each of a group's layer slots, so
    blocks      = kv_pool / (page x group_size)                         (vLLM's num_gpu_blocks)
    paged       = blocks / (blocks one mean-length sequence holds over all groups)
and the capacity in tokens is vLLM's "GPU KV cache size": blocks / (blocks per context-length request) x context.
Seed 003 (gqa-70b, fp16, MI300X 192e9 B): pool 45,319,781,069 B = 42.21 GiB -> 16 contiguous, 67 paged.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from fractions import Fraction

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.model import kv as kvmath
from kneecap.model.params import part_dtypes_at, tp_layout
from kneecap.model.weights import weight_bits, weight_bytes
from kneecap.plan.engines import DEFAULT_VLLM_VERSION, VllmLayout, model_layout, prefix_caching_notes
from kneecap.units import GiB

# Mean contexts the plan shows paged capacity at when no --mean-context is given (the headline then
# assumes every sequence at the full advertised context: the worst case, not the answer).
TYPICAL_MEAN_CONTEXTS = (1000, 2000, 4000, 8000, 16000, 32000)


@dataclass(frozen=True)
class Ledger:
    """Where one GPU's memory goes. The five DESIGN fields plus what --mem-util leaves unused.

    hbm_bytes = weights_bytes + overhead_bytes + fragmentation_bytes + kv_pool_bytes + reserved_bytes.
    """

    hbm_bytes: int
    weights_bytes: int
    overhead_bytes: int
    fragmentation_bytes: int
    kv_pool_bytes: int
    reserved_bytes: int = 0  # hbm x (1 - mem_util): memory the engine is told not to touch

    def to_json(self) -> dict:
        return dataclasses.asdict(self)


@dataclass(frozen=True)
class Plan:
    """The capacity plan of one Deployment at one context. Bytes are per GPU unless named otherwise."""

    deployment: Deployment
    context: int  # advertised max tokens per sequence (what contiguous allocation reserves)
    mean_context: int  # typical tokens per sequence (what paged allocation charges)
    compute_batch_cap: int | None  # latency/SLO cap on concurrent sequences, if any
    weights_total_bytes: int  # whole model, before sharding
    weights_source: str  # "params x dtype" | "checkpoint" | "override"
    kv_dtype_bytes: int
    kv_bytes_per_token: int  # whole model, one sequence, all layers, before sharding
    kv_bytes_per_token_per_gpu: int
    kv_heads_per_gpu: int  # KV heads each rank stores (GQA/MQA layers; MLA: the latent is whole on every rank)
    kv_replicated: bool  # ranks hold copies of the same KV (tp > kv heads, or MLA at tp > 1)
    state_bytes_per_sequence: int  # fixed linear-attention state per sequence, per GPU
    ledger: Ledger
    pool_source: str  # "ledger" | "override" (--kv-pool-gib or an engine model)
    block_size: int
    num_kv_blocks: int
    kv_capacity_tokens: int  # tokens the pool holds, in whole blocks
    seq_bytes_contiguous: int  # one sequence reserving `context` tokens
    seq_bytes_paged: int  # one sequence of `mean_context` tokens in whole blocks
    max_seqs_contiguous: int
    max_seqs_paged: int
    max_concurrency: int  # min(paged, compute cap)
    binding: str  # "hbm" | "compute"
    hbm_datasheet_bytes: int
    hbm_device_bytes: int | None
    hbm_framework_bytes: int | None
    notes: tuple[str, ...] = field(default_factory=tuple)
    kv_groups: VllmLayout | None = None  # vLLM's KV cache groups for a model mixing layer kinds (None: one kind)
    state_apart: bool = False  # a linear-attention hybrid's state lives outside the pool (SGLang's Mamba pool)
    # engine mode with a predicted profile-run peak: (tp, overhead_bytes) at other TP degrees, for levers and sweeps
    # (vLLM profiles per rank, so its kept memory changes with TP; empty: the same overhead at every TP)
    overhead_by_tp: tuple[tuple[int, int], ...] = ()
    # engine mode: the block size the engine picks with an fp8 KV cache where it differs from this plan's (vLLM's MLA
    # backends on Hopper from 0.18: FlashAttention MLA's 16 for a 16-bit cache, FlashMLA's 64 for fp8), for levers
    fp8_kv_block_size: int | None = None
    # engine mode: the --block-size the user passed where the engine overrides it with block_size (vLLM 0.8-0.17's
    # MLA backends; the plan's notes say why); None where the block is the user's or the engine's own default
    block_size_requested: int | None = None

    # -- derived figures the worksheet prints -------------------------------------------------
    @property
    def paged_waste_bound_tokens(self) -> int:
        """Worst-case empty slots per sequence under paging: block_size - 1 (seed 003: 15)."""
        return self.block_size - 1

    @property
    def paged_waste_bound_bytes(self) -> int:
        return self.paged_waste_bound_tokens * self.kv_bytes_per_token_per_gpu

    @property
    def paged_waste_bytes(self) -> int:
        """Empty slots in the last block of a mean-length sequence, in bytes (seed 003: 14 tokens = 4.4 MiB)."""
        slots = kvmath.blocks_for(self.mean_context, self.block_size) * self.block_size
        return (slots - self.mean_context) * self.kv_bytes_per_token_per_gpu

    @property
    def contiguous_waste_bytes(self) -> int:
        """Reserved but unused per mean-length sequence under contiguous allocation (seed 003: 1.87 GiB)."""
        return (self.context - self.mean_context) * self.kv_bytes_per_token_per_gpu

    @property
    def contiguous_waste_fraction(self) -> float:
        return (self.context - self.mean_context) / self.context

    @property
    def worst_case(self) -> bool:
        """True when the mean context is the advertised maximum: every sequence assumed at full length."""
        return self.mean_context == self.context

    def paged_max_seqs_at(self, mean_context: int) -> int:
        """Paged sequences the pool holds at another mean context (whole blocks, sliding layers capped)."""
        d = self.deployment
        seq = paged_sequence_bytes(d, self.kv_groups, min(mean_context, self.context), self.kv_dtype_bytes)
        if self.state_apart:
            seq -= self.state_bytes_per_sequence
        return d.attention_dp * (self.ledger.kv_pool_bytes // seq) if seq else 0

    def typical_means(self) -> list[tuple[int, int]]:
        """(mean context, paged max sequences) at each TYPICAL_MEAN_CONTEXTS point below the advertised context."""
        return [(mean, self.paged_max_seqs_at(mean)) for mean in TYPICAL_MEAN_CONTEXTS if mean < self.context]

    @property
    def hbm_device_minus_datasheet_bytes(self) -> int | None:
        return None if self.hbm_device_bytes is None else self.hbm_device_bytes - self.hbm_datasheet_bytes

    def to_json(self) -> dict:
        """DESIGN.md's plan keys (levers and sweeps are added by the CLI from levers.py / sweeps.py)."""
        d = self.deployment
        return {
            "model": d.model.name,
            "gpu": d.gpu.name,
            "tp": d.tp,
            "pp": d.pp,
            "ep": d.expert_parallel,
            "dp_attention": d.dp_attention,
            # whose DP-attention weight layout the ledger counts (null: the parts every engine keeps whole)
            "dp_attention_engine": d.dp_attention_engine,
            "num_gpus": d.num_gpus,
            "weight_dtype": d.weight_dtype,
            "kv_dtype": d.kv_dtype,
            "context": self.context,
            "mean_context": self.mean_context,
            "block_size": self.block_size,
            # the --block-size the engine overrode with block_size (null: not overridden; notes say why)
            "block_size_requested": self.block_size_requested,
            "compute_batch_cap": self.compute_batch_cap,
            "hbm": {
                "accounting": d.hbm if isinstance(d.hbm, str) else "bytes",
                "datasheet_bytes": self.hbm_datasheet_bytes,
                "device_bytes": self.hbm_device_bytes,
                "framework_bytes": self.hbm_framework_bytes,
                "device_minus_datasheet_bytes": self.hbm_device_minus_datasheet_bytes,
            },
            "weights_total_bytes": self.weights_total_bytes,
            "weights_source": self.weights_source,
            "kv_bytes_per_token": self.kv_bytes_per_token,
            "kv_bytes_per_token_per_gpu": self.kv_bytes_per_token_per_gpu,
            "kv_heads_per_gpu": self.kv_heads_per_gpu,
            "kv_replicated": self.kv_replicated,
            "state_bytes_per_sequence": self.state_bytes_per_sequence,
            # vLLM's start-up profile of a vision tower, in the ledger's overhead (null: none is profiled)
            "vision_profile": None
            if d.vision_profile is None
            else dict(zip(("images", "peak_bytes", "kept_bytes"), d.vision_profile)),
            "ledger": self.ledger.to_json(),
            "kv_pool_source": self.pool_source,
            "num_kv_blocks": self.num_kv_blocks,
            "kv_capacity_tokens": self.kv_capacity_tokens,
            "seq_bytes": {"contiguous": self.seq_bytes_contiguous, "paged": self.seq_bytes_paged},
            "max_seqs": {"contiguous": self.max_seqs_contiguous, "paged": self.max_seqs_paged},
            "max_concurrency": self.max_concurrency,
            "worst_case": self.worst_case,
            "paged_at_mean_context": [
                {
                    "mean_context": mean,
                    "max_seqs": seqs,
                    "max_concurrency": seqs if self.compute_batch_cap is None else min(seqs, self.compute_batch_cap),
                }
                for mean, seqs in self.typical_means()
            ],
            "binding": self.binding,
            "waste": {
                "paged_bound_tokens": self.paged_waste_bound_tokens,
                "paged_bound_bytes": self.paged_waste_bound_bytes,
                "paged_bytes": self.paged_waste_bytes,
                "contiguous_bytes": self.contiguous_waste_bytes,
                "contiguous_fraction": round(self.contiguous_waste_fraction, 6),
            },
            "kv_derivation": kv_derivation(self),
            "notes": list(self.notes),
        }


KIND_LABELS = {
    "full_attention": "full-attention",
    "sliding_attention": "sliding-window",
    "mla": "MLA",
    "linear_attention": "linear-attention",
}


def kv_factor_lines(plan: Plan) -> list[str]:
    """The KV-bytes-per-token multiplication written out, one line per layer kind."""
    from collections import Counter

    from kneecap.units import fmt_bytes

    m, b = plan.deployment.model, plan.kv_dtype_bytes
    dt = plan.deployment.kv_dtype
    counts = Counter(m.layer_types)
    lines = []
    for kind, n in counts.items():
        if kind in ("full_attention", "sliding_attention"):
            value = 2 * n * m.num_key_value_heads * m.head_dim * b
            where = f" (window {m.sliding_window:,} tokens)" if kind == "sliding_attention" else ""
            lines.append(
                f"  {KIND_LABELS[kind]}{where}: 2 (K and V) × {n} layers × {m.num_key_value_heads} kv_heads × "
                f"{m.head_dim} head_dim × {b} B ({dt}) = {value:,} B"
            )
        elif kind == "mla":
            value = n * (m.kv_lora_rank + m.qk_rope_head_dim) * b
            lines.append(
                f"  MLA latent: ({m.kv_lora_rank} kv_lora_rank + {m.qk_rope_head_dim} qk_rope_head_dim) × {n} layers × "
                f"{b} B ({dt}) = {value:,} B  (no K/V factor 2; the same latent on every TP rank)"
            )
        else:
            lines.append(
                f"  linear-attention: {n} layers × 0 B per token (a fixed "
                f"{fmt_bytes(m.linear_state_bytes_per_layer)} state per layer per sequence instead)"
            )
    return lines


def kv_derivation(plan: Plan) -> list[str]:
    """The KV bytes of one token and of one sequence, step by step (what the worksheet's section 1 prints)."""
    m, d = plan.deployment.model, plan.deployment
    per_tok = plan.kv_bytes_per_token
    lines = [line.strip() for line in kv_factor_lines(plan)]
    lines.append(f"= {per_tok:,} B per token per sequence (whole model, all layers)")
    whole = kvmath.sequence_kv_bytes_per_gpu(m, plan.context, plan.kv_dtype_bytes, 1, 1, plan.block_size, paged=False)
    capped = (
        f" (sliding-window layers hold only the last {m.sliding_window:,} tokens)"
        if "sliding_attention" in m.layer_types and m.sliding_window and m.sliding_window < plan.context
        else ""
    )
    lines.append(f"a {plan.context:,}-token sequence: {whole:,} B{capped}")
    if plan.kv_bytes_per_token_per_gpu != per_tok:
        lines.append(
            f"per GPU at TP={d.tp}, PP={d.pp}: {plan.kv_heads_per_gpu} KV head(s) per rank"
            f"{' (replicated)' if plan.kv_replicated else ''} → {plan.kv_bytes_per_token_per_gpu:,} B per token"
        )
    if plan.state_bytes_per_sequence:
        lines.append(f"+ {plan.state_bytes_per_sequence:,} B fixed linear-attention state per sequence per GPU")
    bs = plan.block_size
    if (groups := plan.kv_groups) is not None:
        lines.append(f"vLLM's KV cache groups: {groups.describe()}")
        dp = plan.deployment.attention_dp
        ranks = f" × {dp} DP ranks" if dp > 1 else ""
        lines.append(
            f"pool {plan.ledger.kv_pool_bytes:,} B / ({groups.page_bytes:,} B page × {groups.group_size} layers)"
            f"{ranks} = {plan.num_kv_blocks:,} blocks of {bs} tokens; {plan.kv_capacity_tokens:,} tokens at "
            f"{plan.context:,} per sequence"
        )
        return lines
    lines.append(
        f"pool {plan.ledger.kv_pool_bytes:,} B / ({plan.kv_bytes_per_token_per_gpu:,} B × {bs}-token blocks)"
        f" = {plan.num_kv_blocks:,} blocks = {plan.kv_capacity_tokens:,} tokens"
    )
    return lines


def kv_groups(
    deployment: Deployment, prefix_caching: bool | None = None, version: str = DEFAULT_VLLM_VERSION
) -> VllmLayout | None:
    """vLLM's KV cache groups for a model mixing layer kinds on one GPU (its attention ranks), else None.
    prefix_caching None: vLLM `version`'s default (on for hybrids from 0.26): linear-attention groups then hold 2 or 3
    state blocks per request (engines.vllm_state_blocks), 1 with it off."""
    m = deployment.model
    if len(set(kvmath.stage_layer_types(m, deployment.pp))) < 2:
        return None
    return model_layout(
        m,
        tp=deployment.attention_tp,
        pp=deployment.pp,
        kv_dtype=deployment.kv_dtype,
        block_size=deployment.block_size,
        prefix_caching=prefix_caching,
        version=version,
    )


def paged_sequence_bytes(deployment: Deployment, groups: VllmLayout | None, tokens: int, dtype_bytes) -> int:
    """Bytes one decoding sequence of `tokens` tokens holds on one GPU under paged allocation: whole blocks of every
    layer (sliding layers capped at their window), or with KV cache groups the blocks it takes in every group."""
    if groups is not None:
        return groups.block_bytes * groups.blocks_per_request(tokens, in_flight=1)
    return kvmath.sequence_kv_bytes_per_gpu(
        deployment.model, tokens, dtype_bytes, deployment.attention_tp, deployment.pp, deployment.block_size, paged=True
    )


# -- the pieces -------------------------------------------------------------------------------


def weights_total_bytes(deployment: Deployment) -> int:
    """Whole-model weight bytes at --weight-dtype.

    --params given, or a model without a parameter breakdown: params x bits / 8 (seed 003: 70e9 x 2 B).
    With a breakdown: the decoder's Linear parts at --weight-dtype; embeddings, norms, router and
    lm_head as the checkpoint ships them (kneecap.model.params.part_dtypes_at).
    """
    m = deployment.model
    parts = dict(m.param_parts)
    if deployment.params_override or not parts or set(parts) == {"other"}:
        return weight_bytes(deployment.params_override or m.total_params, deployment.weight_dtype)
    dtypes = part_dtypes_at(m, deployment.weight_dtype)
    decoder = sum(weight_bytes(n, dtypes.get(part, deployment.weight_dtype)) for part, n in parts.items())
    return decoder + encoder_bytes(deployment)


def encoder_bytes(deployment: Deployment) -> int:
    """A multimodal checkpoint's encoder (vision tower + projector) as the engine loads it: at 16 bits (vLLM leaves
    it unquantized), none when serving text only (--language-only, vLLM --language-model-only)."""
    m = deployment.model
    return 0 if deployment.language_only or not m.encoder_params else weight_bytes(m.encoder_params, "bf16")


def vision_profile(deployment: Deployment, max_num_batched_tokens: int) -> tuple[int, int, int] | None:
    """(images, peak bytes, kept bytes) per GPU of vLLM's start-up profile of the model's vision tower, None when
    there is none to profile (a text model, text-only serving, an encoder kneecap has no shapes for).

    vLLM (multimodal/encoder_budget.py, 0.32) profiles max(1, encoder budget // tokens an image) images at once,
    the budget being max_num_batched_tokens (or one image's tokens if larger); the decoder-side cap (max_num_seqs x
    images a prompt) is far above it at the default limits. The tower's MLP is sharded over TP (vLLM's SigLIP uses
    column/row-parallel linears), its residual stream is not."""
    from kneecap.model.params import vision_profile_bytes
    from kneecap.plan.profile_peak import profiled_images

    m = deployment.model
    tower = m.vision_tower
    if deployment.language_only or tower is None:
        return None
    images = profiled_images(tower, max_num_batched_tokens)
    sharded = dataclasses.replace(tower, intermediate_size=-(-tower.intermediate_size // deployment.tp))
    peak, kept = vision_profile_bytes(sharded, images, m.hidden_size)
    return images, peak, kept


def with_vision_profile(overhead_bytes: int, profile: tuple[int, int, int] | None) -> int:
    """What the engine keeps beside the KV pool once it has profiled a vision tower: the larger of the two
    activation peaks (the tower's, the rest's in overhead_bytes) plus the tower's outputs, cached across both."""
    if profile is None:
        return overhead_bytes
    _, peak, kept = profile
    return max(overhead_bytes, peak) + kept


# Under attention data parallelism, the parts of the model each engine keeps whole on every GPU of a stage (the
# rest is split over the tp GPUs as under TP: the routed experts expert-parallel). Read from the engines' sources:
#   every engine: the attention projections (each rank attends its own sequences), the RMSNorms, and the MoE router
#     (TensorRT-LLM modeling_qwen3_moe.py Qwen3Gate: a whole (num_experts, hidden) weight; SGLang 0.5.2
#     models/qwen2_moe.py:155 ReplicatedLinear; vLLM below);
#   SGLang (0.5.2, --enable-dp-attention): the embedding too (models/qwen2_moe.py:461-464 and models/deepseek_v2.py:
#     2174-2177, VocabParallelEmbedding(enable_tp=not is_dp_attention_enabled())); the LM head stays split over all tp
#     GPUs (models/qwen3_moe.py:663-668 and deepseek_v2.py:2378-2383 ParallelLMHead(use_attn_tp_group=
#     enable_dp_lm_head), off by default: server_args.py:347), and the dense and shared-expert MLPs too (deepseek_v2.py
#     DeepseekV2MLP at the TP size unless --moe-dense-tp-size 1 or DeepEP);
#   TensorRT-LLM (PyTorch backend, enable_attention_dp): the embedding (modeling_qwen3_moe.py Qwen3MoEModel.__init__:
#     Embedding() without a mapping "when attention_dp is enabled", commit 03441af; modeling_deepseekv3.py
#     DeepseekV3Model: Embedding() without a mapping whatever the layout), the LM head (modeling_utils.py
#     DecoderModelForCausalLM.__init__: LMHead() without a mapping under enable_attention_dp, commit 000a01d; the
#     prototype enable_lm_head_tp_in_adp, off by default, splits it), and DeepSeek-V3's dense and shared-expert MLPs
#     (modeling_deepseekv3.py _compute_mlp_tp_size / _compute_shared_expert_tp_size: "If using attention DP, the MLP
#     also uses DP instead of TP", tp size 1);
#   vLLM (--data-parallel-size N --enable-expert-parallel): each DP rank is its own engine at TP 1 here, so every
#     layer but the routed experts is whole on it; only the FusedMoE layers span the DP x TP GPUs
#     (model_executor/layers/fused_moe/config.py FusedMoEParallelConfig.make: ep_size = dp_size x tp_size).
# Without an engine the ledger keeps what all three keep whole. Linear-attention layers (hybrids) are left split: no
# engine source for them under attention DP has been read.
_ALWAYS_WHOLE = ("attention", "norms", "router")
DP_ATTENTION_WHOLE_PARTS: dict[str, frozenset[str]] = {
    "sglang": frozenset((*_ALWAYS_WHOLE, "embed")),
    "tensorrt-llm": frozenset((*_ALWAYS_WHOLE, "embed", "lm_head", "dense_mlp", "shared_experts")),
    "vllm": frozenset((*_ALWAYS_WHOLE, "embed", "lm_head", "dense_mlp", "shared_experts")),
}


def dp_attention_whole_parts(engine: str | None) -> frozenset[str]:
    """The model parts every attention-DP rank holds whole under `engine` (None: those every engine holds whole)."""
    if engine is None:
        return frozenset.intersection(*DP_ATTENTION_WHOLE_PARTS.values())
    if engine not in DP_ATTENTION_WHOLE_PARTS:
        raise KneecapError(
            f"no attention-DP weight layout for engine {engine!r}",
            f"use one of {sorted(DP_ATTENTION_WHOLE_PARTS)}, or none",
        )
    return DP_ATTENTION_WHOLE_PARTS[engine]


def _parts_fraction(deployment: Deployment, parts: frozenset[str] | tuple[str, ...]) -> float:
    """These parts' share of the whole model's weight bytes, each at its dtype (0 when the model has no breakdown)."""
    m = deployment.model
    counts = dict(m.param_parts)
    if deployment.params_override or not counts or set(counts) == {"other"}:
        return 0.0
    dtypes = part_dtypes_at(m, deployment.weight_dtype)
    total = weights_total_bytes(deployment)
    held = sum(
        weight_bytes(n, dtypes.get(part, deployment.weight_dtype)) for part, n in counts.items() if part in parts
    )
    return held / total if total else 0.0


def attention_weight_fraction(deployment: Deployment) -> float:
    """The attention projections' share of the whole model's weight bytes (0 when the model has no breakdown)."""
    return _parts_fraction(deployment, ("attention",))


def dp_attention_whole_fraction(deployment: Deployment) -> float:
    """The share of the model's weight bytes each attention-DP rank holds whole (dp_attention_whole_parts of the
    deployment's engine); 0 without DP attention."""
    if not deployment.dp_attention:
        return 0.0
    return _parts_fraction(deployment, dp_attention_whole_parts(deployment.dp_attention_engine))


def weights_bytes_per_gpu(total_bytes: int, deployment: Deployment) -> int:
    """Weights on one GPU, rounded up: each part split over the tp ranks of a stage but what every rank holds whole
    (kneecap.model.params.tp_layout: the norms, the MoE router, K/V heads copied when TP exceeds them, MLA's
    down-projections), over the pp stages. Under DP attention every GPU of a stage also holds whole the parts its
    engine keeps whole (DP_ATTENTION_WHOLE_PARTS: the attention, as each rank attends its own sequences, and more
    per engine); the routed experts stay split. `total_bytes` may differ from params x dtype (a checkpoint's size):
    each part's share of it is its share of params x dtype."""
    return -(-total_bytes * rank_weight_fraction(deployment) // deployment.pp)


# what the worksheet calls each part a rank may hold whole
_PART_NAMES = {
    "attention": "attention",
    "norms": "norms",
    "router": "router",
    "embed": "embedding",
    "lm_head": "LM head",
    "dense_mlp": "dense MLPs",
    "shared_experts": "shared experts",
}


def whole_on_every_rank(deployment: Deployment) -> list[str]:
    """What each GPU of a stage holds beyond its even share of the weights, in the worksheet's words: under DP
    attention the parts its engine keeps whole, else the TP layout's (model.params.tp_layout)."""
    m = deployment.model
    counts = dict(m.param_parts)
    if deployment.tp <= 1 or deployment.params_override or not counts or set(counts) == {"other"}:
        return []
    if deployment.dp_attention:
        whole = dp_attention_whole_parts(deployment.dp_attention_engine)
        return [name for part, name in _PART_NAMES.items() if part in whole and counts.get(part)]
    layout = tp_layout(m, deployment.tp)
    names = [_PART_NAMES[p] for p in ("norms", "router") if layout.get(p, (0, 0))[1]]
    split, whole = layout.get("attention", (0, 0))
    if split + whole > counts.get("attention", 0):
        names.append("K/V heads (one a GPU, copied)")
    if "mla" in m.layer_types and whole:
        names.append("MLA down-projections")
    return names


def rank_weight_fraction(deployment: Deployment) -> Fraction:
    """The share of the whole model's weight bytes one GPU of a stage holds (1 / tp when every part splits evenly;
    exact, for the ledger's rounding)."""
    tp = deployment.tp
    m = deployment.model
    counts = dict(m.param_parts)
    if tp <= 1 or deployment.params_override or not counts or set(counts) == {"other"}:
        return Fraction(1, tp)
    dtypes = part_dtypes_at(m, deployment.weight_dtype)
    total = weights_total_bytes(deployment)
    if not total:
        return Fraction(1, tp)
    whole_parts = dp_attention_whole_parts(deployment.dp_attention_engine) if deployment.dp_attention else ()
    held = Fraction(
        total - sum(weight_bytes(n, dtypes.get(p, deployment.weight_dtype)) for p, n in counts.items() if n)
    )
    held /= tp  # bytes outside the breakdown (a vision encoder): split
    for part, (split, whole) in tp_layout(m, tp).items():
        part_bytes = weight_bytes(counts[part], dtypes.get(part, deployment.weight_dtype))
        held += part_bytes if part in whole_parts else Fraction(part_bytes * (split + whole * tp), tp * counts[part])
    return held / total


def usable_bytes(deployment: Deployment) -> int:
    """HBM the engine may use: hbm x mem_util, rounded down."""
    return int(deployment.hbm_bytes * deployment.mem_util)


def kv_layout(deployment: Deployment) -> tuple[int, bool]:
    """(KV heads per GPU, replicated?) at this TP degree."""
    m = deployment.model
    if deployment.dp_attention:
        return m.num_key_value_heads, False  # every rank keeps whole heads, of its own sequences only
    heads = kvmath.kv_heads_per_gpu(m.num_key_value_heads, deployment.tp)
    if "mla" in m.layer_types and not any(t in ("full_attention", "sliding_attention") for t in m.layer_types):
        return heads, deployment.tp > 1  # MLA keeps the whole latent on every rank
    return heads, kvmath.is_kv_replicated(m.num_key_value_heads, deployment.tp)


def suggest_fit(deployment: Deployment, weights_total: int) -> str:
    """The fix for weights that do not fit: the smallest TP (power of two dividing the heads) and/or fp8."""
    usable, overhead = usable_bytes(deployment), deployment.overhead_bytes
    heads = deployment.model.num_attention_heads
    options = []
    tp = deployment.tp
    while tp < 4096:
        tp *= 2
        if heads % tp == 0 and weights_total / (tp * deployment.pp) + overhead < usable:
            options.append(f"--tp {tp}")
            break
    if weight_bits(deployment.weight_dtype) > 8:
        fp8_total = weight_bytes(deployment.params_override or deployment.model.total_params, "fp8")
        if fp8_total / deployment.num_gpus + overhead < usable:
            options.append("--weight-dtype fp8")
    if not options:
        options.append("more GPUs (--tp / --pp) or a smaller --weight-dtype such as int4")
    return "try " + " or ".join(options)


def _check_inputs(deployment: Deployment, context: int, mean_context: int, compute_batch_cap: int | None) -> None:
    for flag, value in (("--context", context), ("--mean-context", mean_context)):
        if not isinstance(value, int) or value <= 0:
            raise KneecapError(
                f"{flag} must be a positive whole number of tokens, got {value!r}", f"pass e.g. {flag} 8192"
            )
    if mean_context > context:
        raise KneecapError(
            f"--mean-context {mean_context} exceeds --context {context}",
            "the mean sequence cannot be longer than the advertised maximum: lower --mean-context or raise --context",
        )
    if compute_batch_cap is not None and (not isinstance(compute_batch_cap, int) or compute_batch_cap <= 0):
        raise KneecapError(
            f"--compute-batch-cap must be a positive whole number, got {compute_batch_cap!r}",
            "pass e.g. --compute-batch-cap 128, or leave it out",
        )
    if deployment.hbm_bytes <= 0:
        raise KneecapError(
            f"--hbm must be a positive byte count, got {deployment.hbm_bytes!r}", "pass e.g. --hbm 192000000000"
        )
    kvmath.check_tp(deployment.model, deployment.tp)


def _missing_hbm_figure(deployment: Deployment) -> str | None:
    """A note when --hbm asked for a figure the catalog does not have (memory_bytes falls back)."""
    gpu, which = deployment.gpu, deployment.hbm
    if which == "device" and gpu.device_bytes is None:
        return f"{gpu.name}: no driver-reported total in the catalog (UNCONFIRMED); planned with the datasheet figure"
    if which == "framework" and gpu.framework_bytes is None:
        fallback = "driver" if gpu.device_bytes is not None else "datasheet"
        return f"{gpu.name}: no framework-reported total in the catalog; planned with the {fallback} figure"
    return None


def build_plan(
    deployment: Deployment,
    *,
    context: int,
    mean_context: int | None = None,
    compute_batch_cap: int | None = None,
    weights_total: int | None = None,
    weights_source: str | None = None,
    kv_pool_bytes: int | None = None,
    prefix_caching: bool | None = None,
    vllm_version: str = DEFAULT_VLLM_VERSION,
    state_apart: bool | None = None,
) -> Plan:
    """The HBM ledger of `deployment` and what it holds at `context` (max) / `mean_context` (typical) tokens.

    weights_total: whole-model weight bytes to use instead of params x dtype (e.g. a checkpoint's size).
    kv_pool_bytes: a KV pool known from elsewhere (an engine's log, an engine model); the ledger then
    books what the engine kept for itself as overhead and no fragmentation headroom.
    prefix_caching: vLLM's --enable-prefix-caching (None: vllm_version's default), which sets how many state blocks a
    linear-attention hybrid's requests hold.
    state_apart: a linear-attention hybrid's state lives outside this pool (SGLang's Mamba pool), so only the
    attention KV is counted in it; False: in vLLM's KV cache groups beside the KV. None: apart exactly when
    kv_pool_bytes is given (a logged pool read as SGLang logs it).
    Raises KneecapError when the weights and overhead leave no room for a KV pool.
    """
    mean_context = context if mean_context is None else mean_context
    _check_inputs(deployment, context, mean_context, compute_batch_cap)
    m, gpu = deployment.model, deployment.gpu
    dtype_bytes = kvmath.kv_dtype_bytes(deployment.kv_dtype)

    if weights_total is None:
        weights_total = weights_total_bytes(deployment)
        weights_source = weights_source or ("override" if deployment.params_override else "params x dtype")
    weights = weights_bytes_per_gpu(weights_total, deployment)
    hbm = deployment.hbm_bytes
    usable = usable_bytes(deployment)
    reserved = hbm - usable

    if kv_pool_bytes is None:
        rest = usable - weights - deployment.overhead_bytes
        if rest <= 0:
            raise KneecapError(
                f"weights need {weights / GiB:.2f} GiB per GPU (+ {deployment.overhead_bytes / GiB:.2f} GiB overhead), "
                f"HBM has {usable / GiB:.2f} GiB on {gpu.name} at --tp {deployment.tp} --pp {deployment.pp}",
                suggest_fit(deployment, weights_total),
            )
        frag = int(rest * deployment.frag_fraction)
        pool = rest - frag
        ledger = Ledger(hbm, weights, deployment.overhead_bytes, frag, pool, reserved)
        pool_source = "ledger"
    else:
        if kv_pool_bytes <= 0:
            raise KneecapError(
                f"the KV pool must be positive, got {kv_pool_bytes} bytes", "pass e.g. --kv-pool-gib 42.2"
            )
        engine_kept = usable - weights - kv_pool_bytes
        if engine_kept < 0:
            raise KneecapError(
                f"a KV pool of {kv_pool_bytes / GiB:.2f} GiB plus {weights / GiB:.2f} GiB of weights exceeds the "
                f"{usable / GiB:.2f} GiB usable on {gpu.name}",
                "check --kv-pool-gib against the engine's log, or --hbm / --mem-util / --tp",
            )
        ledger = Ledger(hbm, weights, engine_kept, 0, kv_pool_bytes, reserved)
        pool = kv_pool_bytes
        pool_source = "override"

    # DP attention: each of the tp ranks keeps whole-head KV of its own sequences in its own pool, so the
    # deployment holds dp pools' worth (blocks and sequences below are the deployment's, over its dp ranks)
    atp, dp = deployment.attention_tp, deployment.attention_dp
    per_token_gpu = kvmath.kv_bytes_per_token_per_gpu(m, dtype_bytes, atp, deployment.pp)
    if state_apart is None:
        state_apart = kv_pool_bytes is not None
    apart = state_apart and "linear_attention" in m.layer_types
    groups = None if apart else kv_groups(deployment, prefix_caching, vllm_version)
    # a pool holding the attention KV alone (SGLang keeps linear-attention state apart): sequences cost their KV only
    state = kvmath.state_bytes_per_sequence(m, atp, deployment.pp) if apart else 0
    seq_contig = (
        kvmath.sequence_kv_bytes_per_gpu(
            m, context, dtype_bytes, atp, deployment.pp, deployment.block_size, paged=False
        )
        - state
    )
    seq_paged = paged_sequence_bytes(deployment, groups, mean_context, dtype_bytes) - state
    if groups is None:
        bs = deployment.block_size
        num_blocks = dp * (pool // (per_token_gpu * bs)) if per_token_gpu else 0
        capacity_tokens = num_blocks * bs
    else:  # vLLM's blocks (a page in each layer slot of a group) and its "GPU KV cache size"
        bs = groups.block_size
        num_blocks = dp * (pool // groups.block_bytes)
        capacity_tokens = int(num_blocks / groups.blocks_per_request(context) * context)
    max_contig = dp * (pool // seq_contig) if seq_contig else 0
    max_paged = dp * (pool // seq_paged) if seq_paged else 0
    cap = compute_batch_cap
    max_conc = min(max_paged, cap) if cap is not None else max_paged
    binding = "compute" if cap is not None and cap < max_paged else "hbm"
    heads, replicated = kv_layout(deployment)

    notes = list(m.notes)
    if groups is not None:
        notes += prefix_caching_notes(m, groups, num_blocks, context)
    if missing := _missing_hbm_figure(deployment):
        notes.append(missing)
    if dp > 1:
        notes.append(
            f"DP attention: each of the {dp} GPUs keeps the whole attention weights and the KV of its own "
            f"sequences ({per_token_gpu:,} B per token); blocks and sequences are summed over the {dp} pools"
        )
    if deployment.expert_parallel > 1:
        notes.append(
            f"expert parallelism {deployment.expert_parallel}: the routed experts are split whole over "
            f"{deployment.expert_parallel} GPUs (same bytes per GPU as TP sharding)"
        )
    if replicated and "mla" not in m.layer_types and dp == 1:
        notes.append(
            f"--tp {deployment.tp} exceeds the {m.num_key_value_heads} KV heads: each rank keeps a whole head, "
            "so the KV cache is replicated and stops shrinking with TP"
        )
    return Plan(
        deployment=deployment,
        context=context,
        mean_context=mean_context,
        compute_batch_cap=cap,
        weights_total_bytes=weights_total,
        weights_source=weights_source or "params x dtype",
        kv_dtype_bytes=dtype_bytes,
        kv_bytes_per_token=kvmath.kv_bytes_per_token(m, dtype_bytes),
        kv_bytes_per_token_per_gpu=per_token_gpu,
        kv_heads_per_gpu=heads,
        kv_replicated=replicated,
        state_bytes_per_sequence=kvmath.state_bytes_per_sequence(m, atp, deployment.pp),
        ledger=ledger,
        pool_source=pool_source,
        block_size=bs,
        num_kv_blocks=num_blocks,
        kv_capacity_tokens=capacity_tokens,
        seq_bytes_contiguous=seq_contig,
        seq_bytes_paged=seq_paged,
        max_seqs_contiguous=max_contig,
        max_seqs_paged=max_paged,
        max_concurrency=max_conc,
        binding=binding,
        hbm_datasheet_bytes=gpu.datasheet_bytes,
        hbm_device_bytes=gpu.device_bytes,
        hbm_framework_bytes=gpu.framework_bytes,
        notes=tuple(notes),
        kv_groups=groups,
        state_apart=apart,
    )


def sequences_at(plan: Plan, tokens: int, kv_dtype: str | None = None) -> int:
    """Decoding sequences of `tokens` tokens the plan's pool holds, in whole blocks: the one count behind plan's
    paged sequences (section 3, levers, the context sweep) and preflight's fixes. kv_dtype: the same pool with the
    KV cache in that dtype (vLLM's groups re-laid out for it; a linear-attention state keeps its own dtype)."""
    d = plan.deployment
    groups = plan.kv_groups
    if kv_dtype is not None:
        d = dataclasses.replace(d, kv_dtype=kv_dtype)
        if groups is not None:
            groups = kv_groups(d, groups.prefix_caching if groups.state_groups else None, groups.version)
    atp = d.attention_tp
    state = kvmath.state_bytes_per_sequence(d.model, atp, d.pp) if plan.state_apart else 0
    seq = paged_sequence_bytes(d, groups, tokens, kvmath.kv_dtype_bytes(d.kv_dtype)) - state
    return d.attention_dp * (plan.ledger.kv_pool_bytes // seq) if seq > 0 else 0


def rebuild(
    plan: Plan,
    deployment: Deployment,
    *,
    context: int | None = None,
    mean_context: int | None = None,
    keep_weights: bool = True,
    kv_pool_bytes: int | None = None,
) -> Plan:
    """The same plan on a changed deployment (a lever or a sweep point).

    keep_weights: reuse the plan's whole-model weight bytes (checkpoint size) — False when the lever
    changes the weight dtype, so the weights are re-priced from params x the new dtype.
    """
    context = plan.context if context is None else context
    mean = plan.mean_context if mean_context is None else min(mean_context, context)
    by_tp = dict(plan.overhead_by_tp)
    if deployment.tp in by_tp and deployment.overhead_bytes == plan.deployment.overhead_bytes:
        deployment = dataclasses.replace(deployment, overhead_bytes=by_tp[deployment.tp])
    rebuilt = build_plan(
        deployment,
        context=context,
        mean_context=min(mean, context),
        compute_batch_cap=plan.compute_batch_cap,
        weights_total=plan.weights_total_bytes if keep_weights else None,
        weights_source=plan.weights_source if keep_weights else None,
        kv_pool_bytes=kv_pool_bytes,
        state_apart=plan.state_apart,
        prefix_caching=plan.kv_groups.prefix_caching if plan.kv_groups and plan.kv_groups.state_groups else None,
        vllm_version=plan.kv_groups.version if plan.kv_groups else DEFAULT_VLLM_VERSION,
    )
    return dataclasses.replace(rebuilt, overhead_by_tp=plan.overhead_by_tp) if by_tp else rebuilt
