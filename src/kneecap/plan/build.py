"""The deployment builder: one typed request (model, GPU, parallelism, dtypes, engine mode, memory knobs)
-> Deployment -> Plan (the HBM ledger), plus the engine's own pool model when an engine mode is asked for.

Every command that plans a deployment (plan, preflight, simulate, serve, calibrate, run candidates,
validation) calls plan_deployment; every default lives in DeploymentRequest. Not flag parsing (cli/) nor
rendering (plan/render.py).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import NamedTuple

from kneecap.deployment import Deployment
from kneecap.errors import KneecapError
from kneecap.hardware import get_gpu
from kneecap.model.kv import check_kv_dtype, check_tp, kv_dtype_bytes
from kneecap.model.resolve import load_model
from kneecap.model.weights import weight_bits, weight_bytes
from kneecap.plan import cudagraph_memory, engines, non_torch, profile_peak, vllm_mxfp4
from kneecap.plan.ledger import (
    Plan,
    build_plan,
    dp_attention_whole_parts,
    weights_bytes_per_gpu,
    weights_total_bytes,
)
from kneecap.units import GB, GiB


@dataclass(frozen=True)
class DeploymentRequest:
    """One deployment as a user states it: model spec, GPU, parallelism, dtypes, engine mode, memory knobs.

    Every default of every command that plans a deployment is here (the CLI reads them from DEFAULTS)."""

    preset: str | None = None
    model: str | None = None
    gpu: str | None = None
    tp: int = 1
    pp: int = 1
    ep: int = 1  # expert parallelism over the tp GPUs (MoE models)
    dp_attention: bool = False  # attention data parallelism over the tp GPUs (MoE models)
    # the engine whose DP-attention layout of the weights to count: "sglang", "tensorrt-llm" or "vllm" (None: the
    # parts every engine keeps whole on each rank; kneecap.plan.ledger.DP_ATTENTION_WHOLE_PARTS)
    dp_attention_engine: str | None = None
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    params: float | None = None
    context: int | None = None
    mean_context: int | None = None
    # None: 16 (vLLM's default; with --engine vllm the block its MLA backend needs), or SGLang's page size 1
    block_size: int | None = None
    compute_batch_cap: int | None = None
    overhead_gib: float = 4.0
    frag: float = 0.05
    mem_util: float | None = None
    hbm: str = "datasheet"
    kv_pool_gib: float | None = None  # a pool the engine logged; with --engine, counted as that engine lays it out
    engine: str | None = None
    mem_fraction: float | None = None
    engine_version: str | None = None
    activation_gib: float | None = None
    non_torch_gib: float = 0.0
    cudagraph_gib: float | None = None
    mamba_cache_size: int | None = None  # SGLang --max-mamba-cache-size (linear-attention hybrids)
    cpu_kvcache_space_gib: int | None = None  # vLLM CPU build's VLLM_CPU_KVCACHE_SPACE (whole GiB): plan_vllm_cpu
    # vLLM's --enable-prefix-caching (None: the release's default): how many state blocks a linear-attention
    # hybrid's requests hold (engines.vllm_state_blocks); with --engine sglang its radix cache (--disable-radix-cache:
    # False), which sets how many requests a hybrid's Mamba state pool lets run at once
    prefix_caching: bool | None = None
    # vLLM's --max-num-batched-tokens (None: the release's default for the GPU): what its sliding-window and
    # chunked-local groups reserve per request in the maximum concurrency it logs (engines.vllm_in_flight_tokens)
    max_num_batched_tokens: int | None = None
    # vLLM's --max-num-seqs (None: the release's default for the GPU): the rows of logits its profile run samples,
    # which set the activation peak kneecap predicts (profile_peak)
    max_num_seqs: int | None = None
    language_only: bool = False  # serve a multimodal checkpoint's language model only (vLLM --language-model-only)
    # the kernel vLLM runs MXFP4 MoE experts with (gpt-oss): None, the release's default for the GPU (vllm_mxfp4);
    # "marlin" or "triton" for a server that ran the other one (Hopper with triton_kernels installed at 0.10 / 0.11)
    moe_backend: str | None = None
    # vLLM 0.10 / 0.11's sampler in the profile run: None or "pytorch", its top-k/top-p sort (the pip wheel, which
    # does not install FlashInfer); "flashinfer" for a server with FlashInfer installed, whose sampler does not sort
    vllm_sampler: str | None = None


DEFAULTS = DeploymentRequest()


class PlannedDeployment(NamedTuple):
    plan: Plan
    engine_pool: "engines.EnginePool | None"  # the engine's own pool arithmetic (--engine vllm|sglang), else None


def parse_hbm(value: str) -> str | int:
    """'datasheet' | 'device' | 'framework' | bytes ('192000000000', '192e9', '192GB', '178.81GiB')."""
    v = (value or "").strip().lower().replace("_", "").replace(",", "")
    if v in ("datasheet", "device", "framework"):
        return v
    factor = 1
    for suffix, f in (("gib", GiB), ("gb", GB), ("b", 1)):
        if v.endswith(suffix):
            v, factor = v[: -len(suffix)], f
            break
    try:
        n = int(float(v) * factor)
    except ValueError:
        raise KneecapError(
            f"--hbm {value!r} is not datasheet, device, framework or a byte count",
            "pass e.g. --hbm device or --hbm 192000000000",
        ) from None
    if n <= 0:
        raise KneecapError(f"--hbm must be positive, got {value!r}", "pass e.g. --hbm 192000000000")
    return n


EXAMPLES = {
    "--tp": 8,
    "--pp": 2,
    "--block-size": 16,
    "--context": 8192,
    "--mean-context": 2048,
    "--compute-batch-cap": 128,
    "--params": "70e9",
    "--kv-pool-gib": 42.2,
    "--prefix-tokens": 1000,
}


def check_positive(flag: str, value, kind=int) -> None:
    if value is None:
        return
    if value <= 0 or (kind is int and int(value) != value):
        what = "a positive whole number" if kind is int else "positive"
        raise KneecapError(f"{flag} must be {what}, got {value!r}", f"pass e.g. {flag} {EXAMPLES.get(flag, 1)}")


def checkpoint_weights(model) -> tuple[int, str, str] | None:
    """(whole-model weight bytes as the checkpoint ships, main dtype, source label) when the model knows its parts."""
    from kneecap.model.params import main_dtype, param_breakdown, part_dtypes, total_weight_bytes

    try:
        total = total_weight_bytes(model, None)
        dtypes = part_dtypes(model)
    except (AttributeError, TypeError, KeyError):
        return None
    if model.checkpoint_bytes:
        total = model.checkpoint_bytes
    kinds = set(dtypes.values())
    if len(kinds) == 1:
        return total, kinds.pop(), "checkpoint"
    # a part whose checkpoint bytes are not its parameters at one dtype mixes them (ModelOpt exclude_modules read
    # per projection: DeepSeek-V3.1-NVFP4's attention o_proj at nvfp4, its other projections bf16)
    counts, stored = dict(model.param_parts), dict(model.part_bytes or ())

    def dtype_of(p: str) -> str:
        mixed = p in stored and p in counts and stored[p] != weight_bytes(counts[p], dtypes.get(p, "bf16"))
        return "mixed (see notes)" if mixed else dtypes.get(p, "?")

    return (
        total,
        main_dtype(model),
        "checkpoint (mixed dtypes: " + ", ".join(f"{p} {dtype_of(p)}" for p in param_breakdown(model)) + ")",
    )


MAX_GIB_FLAG = 1024.0**2  # 1 PiB per GPU: far beyond any device, small enough for exact integer bytes
MAX_PARAMS = 1e16


def _finite_floats(f: DeploymentRequest) -> None:
    """Every float flag is a finite number in range (nan, inf and 1e300 would reach int() otherwise)."""

    for field in dataclasses.fields(f):
        value = getattr(f, field.name)
        if not isinstance(value, float):
            continue
        flag = "--" + field.name.replace("_", "-")
        limit = MAX_PARAMS if field.name == "params" else MAX_GIB_FLAG if field.name.endswith("_gib") else None
        if not math.isfinite(value) or (limit is not None and abs(value) > limit):
            bound = f" up to {limit:g}" if limit is not None else ""
            raise KneecapError(
                f"{flag} must be a finite number{bound}, got {value!r}", f"pass a plain number to {flag}"
            )


# what the vLLM CPU pool is computed from; every other flag describes a GPU deployment and must stay at its default
CPU_POOL_FLAGS = (
    "preset",
    "model",
    "kv_dtype",
    "context",
    "block_size",
    "cpu_kvcache_space_gib",
    "prefix_caching",
    "max_num_batched_tokens",
)


def plan_vllm_cpu(f: DeploymentRequest) -> "engines.EnginePool":
    """The KV pool vLLM's CPU build allocates for VLLM_CPU_KVCACHE_SPACE=f.cpu_kvcache_space_gib (one worker)."""
    for field in dataclasses.fields(f):
        if field.name not in CPU_POOL_FLAGS and getattr(f, field.name) != getattr(DEFAULTS, field.name):
            flag = "--" + field.name.replace("_", "-")
            raise KneecapError(
                f"{flag} describes a GPU deployment; --cpu-kvcache-space-gib plans vLLM's CPU build (one worker)",
                f"drop {flag}, or drop --cpu-kvcache-space-gib to plan a GPU",
            )
    if f.preset and f.model:
        raise KneecapError("--preset and --model both given", "pass one of them")
    if not (f.preset or f.model):
        raise KneecapError("no model given", "pass --model PATH/config.json (or --preset NAME)")
    for flag, value in (
        ("--block-size", f.block_size),
        ("--context", f.context),
        ("--max-num-batched-tokens", f.max_num_batched_tokens),
    ):
        check_positive(flag, value, int)
    if f.kv_dtype:
        kv_dtype_bytes(f.kv_dtype)
    model = load_model(f.preset or f.model)
    context = f.context or model.max_position_embeddings
    if not context:
        raise KneecapError(
            f"model {model.name} does not state its max context", "pass --context N (vLLM's --max-model-len)"
        )
    return engines.vllm_cpu_pool(
        model,
        kv_cache_space_gib=f.cpu_kvcache_space_gib,
        max_model_len=context,
        kv_dtype=f.kv_dtype,
        block_size=f.block_size or engines.vllm_cpu_block_size(model),
        prefix_caching=f.prefix_caching,
        max_num_batched_tokens=f.max_num_batched_tokens,
    )


def plan_deployment(f: DeploymentRequest) -> PlannedDeployment:
    """Request -> (Plan, EnginePool | None). Every bad value becomes a one-line KneecapError naming its flag."""
    if f.cpu_kvcache_space_gib is not None:
        raise KneecapError(
            "--cpu-kvcache-space-gib plans vLLM's CPU build, not a GPU deployment",
            "run `kneecap plan --model ... --cpu-kvcache-space-gib N` without GPU flags",
        )
    if f.preset and f.model:
        raise KneecapError("--preset and --model both given", "pass one of them")
    spec = f.preset or f.model
    if not spec:
        raise KneecapError("no model given", "pass --preset NAME (e.g. gqa-70b) or --model PATH|org/name")
    if not f.gpu:
        raise KneecapError("no GPU given", "pass --gpu NAME, e.g. --gpu h100-sxm (see `kneecap plan --list-gpus`)")
    for flag, value in (
        ("--tp", f.tp),
        ("--pp", f.pp),
        ("--ep", f.ep),
        ("--block-size", f.block_size),
        ("--context", f.context),
        ("--mean-context", f.mean_context),
        ("--compute-batch-cap", f.compute_batch_cap),
        ("--max-num-batched-tokens", f.max_num_batched_tokens),
        ("--max-num-seqs", f.max_num_seqs),
    ):
        check_positive(flag, value, int)
    _finite_floats(f)
    for flag, value in (("--params", f.params), ("--kv-pool-gib", f.kv_pool_gib)):
        check_positive(flag, value, float)
    if f.overhead_gib < 0:
        raise KneecapError(f"--overhead-gib must be >= 0, got {f.overhead_gib!r}", "pass e.g. --overhead-gib 4")
    if f.engine is not None and f.engine not in engines.ENGINES:
        raise KneecapError(f"unknown engine {f.engine!r}", f"use --engine {' or --engine '.join(engines.ENGINES)}")
    if f.engine_version is not None and not f.engine:
        raise KneecapError(
            "--engine-version is the version of the --engine pool model", "add --engine vllm or --engine sglang"
        )
    if f.engine and f.kv_pool_gib:  # the pool the engine logged: none of its formula's inputs applies
        for flag, value, default in (
            ("--activation-gib", f.activation_gib, None),
            ("--non-torch-gib", f.non_torch_gib, 0.0),
            ("--cudagraph-gib", f.cudagraph_gib, None),
            ("--mamba-cache-size", f.mamba_cache_size, None),
            ("--vllm-sampler", f.vllm_sampler, None),
        ):
            if value != default:
                raise KneecapError(
                    f"{flag} is an input of the engine's pool formula; --kv-pool-gib gives the pool it logged",
                    f"drop {flag}, or drop --kv-pool-gib to compute the pool",
                )
    if f.mem_fraction is not None and f.engine != "sglang":
        raise KneecapError("--mem-fraction is SGLang's mem_fraction_static", "add --engine sglang, or use --mem-util")
    if f.moe_backend is not None and f.engine != "vllm":
        raise KneecapError(
            "--moe-backend is the kernel vLLM ran MXFP4 experts with (its padding enters vLLM's pool model only)",
            "add --engine vllm, or drop --moe-backend",
        )
    if f.moe_backend is not None:
        vllm_mxfp4.check_backend(f.moe_backend)
    if f.vllm_sampler is not None:
        _check_vllm_sampler(f)
    if f.mamba_cache_size is not None and f.engine != "sglang":
        raise KneecapError("--mamba-cache-size is SGLang's --max-mamba-cache-size", "add --engine sglang")
    if f.ep > 1 and f.tp % f.ep:
        raise KneecapError(
            f"--ep {f.ep} must divide --tp {f.tp} (the experts are split over the TP GPUs)",
            f"pass --ep {f.tp} or another divisor of --tp",
        )
    if f.dp_attention and f.tp < 2:
        raise KneecapError("--dp-attention splits the sequences over the --tp GPUs; --tp is 1", "pass --tp 2 or more")
    if f.dp_attention_engine is not None:
        if not f.dp_attention:
            raise KneecapError(
                "an engine's DP-attention weight layout was given without DP attention", "add --dp-attention"
            )
        dp_attention_whole_parts(f.dp_attention_engine)  # names the engines it knows when it does not know this one
    if f.dp_attention and f.engine:
        if f.dp_attention_engine not in (None, f.engine):
            raise KneecapError(
                f"--dp-attention-engine {f.dp_attention_engine} with --engine {f.engine}: the engine's pool is "
                "computed from the weights it loads itself",
                "drop --dp-attention-engine (it follows --engine)",
            )
    if f.max_num_batched_tokens is not None and f.engine != "vllm":
        raise KneecapError(
            "--max-num-batched-tokens here is an input of vLLM's logged maximum concurrency",
            "add --engine vllm (or --cpu-kvcache-space-gib N for the CPU build)",
        )
    if f.max_num_seqs is not None and (f.engine != "vllm" or f.kv_pool_gib):
        raise KneecapError(
            "--max-num-seqs here is an input of vLLM's profile run, whose activation peak engine mode predicts",
            "add --engine vllm (without --kv-pool-gib), or drop --max-num-seqs",
        )
    if f.activation_gib is not None and f.engine != "vllm":
        raise KneecapError(
            "--activation-gib is an input of the vLLM engine model", "add --engine vllm, or use --overhead-gib"
        )

    if f.dp_attention and f.engine:  # the engine's own layout of the weights each DP rank holds whole
        f = dataclasses.replace(f, dp_attention_engine=f.engine)
    gpu = get_gpu(f.gpu)
    if f.kv_dtype:
        kv_dtype_bytes(f.kv_dtype)  # validates the name
    if f.weight_dtype:
        weight_bits(f.weight_dtype)
    model = load_model(spec)
    check_tp(model, f.tp)  # before any engine arithmetic, so the message is about the heads
    if f.dp_attention and f.engine and "linear_attention" in model.layer_types:
        raise KneecapError(
            f"--dp-attention with --engine {f.engine}: how {model.name}'s Mamba / linear-attention state is laid "
            "out per DP rank is not modelled",
            "drop --engine (the ledger keeps a pool per DP rank), or drop --dp-attention",
        )
    weights_total = source = None
    weight_dtype = f.weight_dtype
    if not f.weight_dtype and not f.params:
        shipped = checkpoint_weights(model)
        if shipped:
            weights_total, weight_dtype, source = shipped
    weight_dtype = (weight_dtype or model.weight_dtype or "bf16").lower()
    # KV dtype: the flag; else what the checkpoint's quantization config says it quantizes the cache to (ModelOpt,
    # compressed-tensors); else the model's 16-bit dtype, as vLLM's kv_cache_dtype "auto" does.
    checkpoint_kv = getattr(model, "kv_dtype", None)
    kv_dtype = (
        f.kv_dtype or checkpoint_kv or (model.weight_dtype if model.weight_dtype in ("bf16", "fp16") else "bf16")
    ).lower()
    check_kv_dtype(model, kv_dtype)  # a block-quantized cache type must tile head_dim (llama.cpp refuses otherwise)
    hbm = parse_hbm(f.hbm)
    if f.engine and f.hbm == "datasheet":
        hbm = "framework"  # an engine reads the total the framework sees, not the datasheet
    mem_util = f.mem_util
    own_fraction = None
    if f.engine == "vllm" and mem_util is None:
        mem_util = engines.vllm_default_mem_util(f.engine_version or engines.DEFAULT_VLLM_VERSION)
    if f.engine == "sglang":
        if mem_util is not None:
            raise KneecapError("--mem-util is vLLM's knob", "use --mem-fraction for --engine sglang")
        if f.mem_fraction is not None:
            if not 0 < f.mem_fraction <= 1:  # checked here: past this line the pool rules know it as mem_util
                raise KneecapError(
                    f"--mem-fraction must be in (0, 1], got {f.mem_fraction!r}",
                    "pass SGLang's --mem-fraction-static, e.g. --mem-fraction 0.88",
                )
            mem_util = f.mem_fraction
        else:  # SGLang's own choice when --mem-fraction-static is not given, by release, GPU size, TP and DP
            own_fraction = engines.sglang_default_mem_fraction(
                _nvidia_smi_mib(gpu, hbm),
                f.tp,
                f.pp,
                f.tp if f.dp_attention else 1,
                dp_attention=f.dp_attention,
                version=f.engine_version or engines.DEFAULT_SGLANG_VERSION,
            )
            mem_util = own_fraction.fraction
    block_size, block_override = _block_size(f, model, gpu, kv_dtype)
    deployment = Deployment(
        model=model,
        gpu=gpu,
        tp=f.tp,
        pp=f.pp,
        ep=f.ep,
        dp_attention=f.dp_attention,
        dp_attention_engine=f.dp_attention_engine,
        weight_dtype=weight_dtype,
        kv_dtype=kv_dtype,
        block_size=block_size,
        hbm=hbm,
        overhead_bytes=int(f.overhead_gib * GiB),
        frag_fraction=f.frag,
        mem_util=1.0 if mem_util is None else mem_util,
        params_override=int(f.params) if f.params else None,
        language_only=f.language_only,
    )
    if model.vision_tower is not None and not f.language_only and f.engine != "sglang":
        deployment = _with_vision_profile(deployment, f, context_hint=f.context or model.max_position_embeddings)
    if weights_total is not None:  # the checkpoint's bytes: the encoder is in them (or priced here when not)
        from kneecap.plan.ledger import encoder_bytes

        encoder = weight_bytes(model.encoder_params, "bf16") if model.encoder_params else 0
        weights_total += encoder_bytes(deployment) - (encoder if model.checkpoint_bytes else 0)
    context = f.context or model.max_position_embeddings
    if not context:
        raise KneecapError(f"model {model.name} does not state its max context", "pass --context N")
    mean = f.mean_context or context
    if mean > context:
        raise KneecapError(
            f"--mean-context {mean} exceeds --context {context}", "lower --mean-context or raise --context"
        )

    pool_bytes = int(f.kv_pool_gib * GiB) if f.kv_pool_gib else None
    engine_pool = None
    version = f.engine_version or (
        engines.DEFAULT_SGLANG_VERSION if f.engine == "sglang" else engines.DEFAULT_VLLM_VERSION
    )
    engines.parse_version(version)  # a bad --engine-version fails here, whatever the model
    if f.engine:  # the engine's own formula (or the pool it logged); then the ledger re-expressed in its terms
        wt = weights_total if weights_total is not None else weights_total_bytes(deployment)
        common = dict(
            total_bytes=deployment.hbm_bytes,
            weights_bytes=weights_bytes_per_gpu(wt, deployment),
            max_model_len=context,
            version=version,
        )
        vllm = dict(
            common,
            mem_util=deployment.mem_util,
            prefix_caching=f.prefix_caching,
            max_num_batched_tokens=f.max_num_batched_tokens,
        )
        sglang = dict(
            common, mem_fraction=deployment.mem_util, page_size=deployment.block_size, radix_cache=f.prefix_caching
        )
        if f.engine == "vllm" and pool_bytes is not None:
            engine_pool = engines.vllm_logged_pool(deployment, pool_bytes, **vllm)
        elif f.engine == "vllm":
            graphs = _vllm_cudagraph(f, deployment, version, context)
            act, act_source, profile = _vllm_activation(f, deployment, version, context, graphs.bytes)
            non_torch_bytes, non_torch_source = _vllm_non_torch(f, deployment, version)
            engine_pool = engines.vllm_pool(
                deployment,
                moe_backend=f.moe_backend,
                activation_bytes=act,
                non_torch_bytes=non_torch_bytes,
                cudagraph_bytes=graphs.bytes,
                **vllm,
            )
            engine_pool = dataclasses.replace(
                engine_pool,
                activation_source=act_source,
                activation_profile=profile,
                non_torch_source=non_torch_source,
                cudagraph_source=graphs.source,
                cudagraph_from=graphs.basis,
            )
        elif pool_bytes is not None:
            engine_pool = engines.sglang_logged_pool(deployment, pool_bytes, **sglang)
        else:
            engine_pool = engines.sglang_pool(
                deployment, non_torch_bytes=int(f.non_torch_gib * GiB), mamba_cache_size=f.mamba_cache_size, **sglang
            )
        if f.engine == "sglang":
            engine_pool = dataclasses.replace(engine_pool, **_sglang_fraction_source(f, deployment, own_fraction))
        if pool_bytes is None:
            # SGLang reserves 1 - mem_fraction_static of what is free before the weights load, so the memory in use
            # before them (--non-torch-gib) costs its pool only mem_fraction_static x that (engines.sglang_pool)
            before = int(engine_pool.total_bytes * engine_pool.fraction) - engine_pool.budget_bytes
            kept = (
                engine_pool.activation_bytes
                + (before if f.engine == "sglang" else engine_pool.non_torch_bytes)
                + engine_pool.cudagraph_bytes
                + engine_pool.state_pool_bytes
                + engine_pool.rope_cache_bytes  # the engine's RoPE buffer, loaded beside the weights
                + engine_pool.expert_pad_bytes  # vLLM's Marlin padding of MXFP4 experts, loaded with them
                + engine_pool.load_extra_bytes  # the load as PyTorch's caching allocator holds it, beyond the tensors
                + engine_pool.sizing_margin_bytes  # vLLM 0.34+: what its post-warm-up sizing keeps free besides
            )
            deployment = dataclasses.replace(deployment, overhead_bytes=kept, frag_fraction=0.0)
    # where a linear-attention hybrid's state lives: in vLLM's block pool beside the KV (its hybrid allocator), or in
    # a pool of its own (SGLang's Mamba pool; a logged pool without --engine is read as SGLang logs it)
    state_apart = f.engine == "sglang" or (f.engine is None and pool_bytes is not None)
    plan = build_plan(
        deployment,
        context=context,
        mean_context=mean,
        compute_batch_cap=f.compute_batch_cap,
        weights_total=weights_total,
        weights_source=source,
        kv_pool_bytes=pool_bytes,
        prefix_caching=f.prefix_caching if f.engine != "sglang" else None,
        vllm_version=version if f.engine == "vllm" else engines.DEFAULT_VLLM_VERSION,
        state_apart=state_apart,
    )
    if engine_pool is not None and f.engine == "vllm" and pool_bytes is None:
        wt = weights_total if weights_total is not None else weights_total_bytes(deployment)
        plan = dataclasses.replace(
            plan, overhead_by_tp=_overhead_by_tp(f, deployment, version, context, engine_pool, wt)
        )
    if (
        f.engine == "vllm" and not f.block_size
    ):  # vLLM picks an MLA model's block by its backend, which the KV dtype moves
        fp8_block = engines.vllm_block_size(model, gpu.name, version, "fp8")
        if fp8_block != deployment.block_size:
            plan = dataclasses.replace(plan, fp8_kv_block_size=fp8_block)
    if block_override:  # the engine forces its attention backend's block over the user's --block-size
        plan = dataclasses.replace(plan, block_size_requested=f.block_size, notes=plan.notes + (block_override,))
    if engine_pool is not None and engine_pool.max_running_requests is not None:  # SGLang: its Mamba pool's cap
        running = engine_pool.max_running_requests * max(1, engine_pool.dp_attention_ranks)  # each rank's cap
        plan = dataclasses.replace(plan, max_concurrency=min(plan.max_concurrency, running))
    if f.engine is None and pool_bytes is not None and plan.state_bytes_per_sequence:
        plan = dataclasses.replace(
            plan,
            notes=plan.notes
            + (
                "--kv-pool-gib without --engine is counted as SGLang logs its pool: the attention KV alone, the Mamba / "
                "linear-attention state in a pool of its own; a pool vLLM logged ('Available KV cache memory') also holds "
                "the state blocks: add --engine vllm",
            ),
        )
    return PlannedDeployment(plan, engine_pool)


def _block_size(f: DeploymentRequest, model, gpu, kv_dtype: str) -> tuple[int, str | None]:
    """Tokens per KV block the plan counts, and the words on it where the engine overrides the user's --block-size
    (vLLM 0.8-0.17's MLA backends: engines.vllm_engine_block_size)."""
    if not f.block_size:
        return _default_block_size(f, model, gpu, kv_dtype), None
    if f.engine == "vllm":
        version = f.engine_version or engines.DEFAULT_VLLM_VERSION
        return engines.vllm_engine_block_size(model, gpu.name, version, f.block_size)
    return f.block_size, None


def _nvidia_smi_mib(gpu, hbm: str | int) -> float:
    """The GPU's memory as SGLang reads it to pick its mem_fraction_static (nvidia-smi's memory.total, MiB): a total
    given in bytes (--hbm N), else the driver's figure, else the datasheet's."""
    total = hbm if isinstance(hbm, int) else (gpu.device_bytes or gpu.datasheet_bytes)
    return total / 2**20


def _sglang_fraction_source(f: DeploymentRequest, deployment: Deployment, own) -> dict:
    """EnginePool fields saying where SGLang's mem_fraction_static came from, and a note for the release's own one."""
    if own is None:
        return {"fraction_source": "given", "fraction_note": "--mem-fraction as given"}
    dp = f" and {deployment.tp} DP-attention ranks" if f.dp_attention else ""
    version = f.engine_version or engines.DEFAULT_SGLANG_VERSION
    note = (
        f"SGLang {version}'s own choice without --mem-fraction-static for this GPU, TP {deployment.tp}"
        f"{f' x PP {deployment.pp}' if deployment.pp > 1 else ''}{dp} (server_args.py of {own.releases}): "
        f"{own.how}; pass --mem-fraction with the mem_fraction_static your server's log prints to use that instead"
    )
    if (deployment.model.vision_tower is not None or deployment.model.encoder_params) and not f.language_only:
        note += (
            "; SGLang lowers it further for a multimodal model by its vision encoder's size, which kneecap does not "
            "model"
        )
    return {"fraction_source": "sglang default", "fraction_note": note}


def _default_block_size(f: DeploymentRequest, model, gpu, kv_dtype: str) -> int:
    """Tokens per KV block when --block-size is not given: SGLang's page size 1; vLLM's own pick (16, or the block
    its MLA attention backend needs: engines.vllm_block_size); 16 for the engine-neutral ledger."""
    if f.engine == "sglang":
        return 1
    if f.engine == "vllm":
        return engines.vllm_block_size(model, gpu.name, f.engine_version or engines.DEFAULT_VLLM_VERSION, kv_dtype)
    return engines.VLLM_DEFAULT_BLOCK_SIZE


def _vllm_activation(
    f: DeploymentRequest, deployment: Deployment, version: str, context: int, cudagraph_bytes: int = 0
) -> tuple[int, str, dict | None]:
    """vLLM's activation peak in engine mode: --activation-gib when given; else the release's profile run as
    profile_peak derives it; else --overhead-gib (with the vision tower's profile), saying why. cudagraph_bytes: the
    CUDA-graph estimate the plan subtracts, which vLLM 0.27+ prints inside its "peak activation"."""
    if f.activation_gib is not None:
        return int(f.activation_gib * GiB), "--activation-gib", None
    v = engines.parse_version(version)
    tokens, seqs = f.max_num_batched_tokens, f.max_num_seqs
    if profile_peak.is_v1_rule(v):  # V1 profiles the batch the server runs: the release's GPU defaults
        tokens = tokens or engines.vllm_default_batch(version, deployment.hbm_bytes, deployment.gpu.name, context)
        seqs = seqs or engines.vllm_default_seqs(version, deployment.hbm_bytes, deployment.gpu.name, tokens)
    sm_count = deployment.gpu.sm_count
    amd = deployment.gpu.is_amd  # which runner vLLM builds
    peak = profile_peak.vllm_profile_peak(
        deployment.model,
        tp=deployment.attention_tp,  # --data-parallel-size: each DP rank's engine runs the dense layers whole
        gpu_name=deployment.gpu.name,
        version=v,
        max_model_len=context,
        max_num_batched_tokens=tokens,
        max_num_seqs=seqs,
        sm_count=sm_count,
        encoder=not deployment.language_only,
        flashinfer_sampler=f.vllm_sampler == "flashinfer",
        weight_dtype=deployment.weight_dtype,
        ep=deployment.ep,
        dp_attention=deployment.dp_attention,
        amd=amd,
    )
    if peak is not None:
        return (
            peak.charged_bytes,
            f"predicted: {peak.describe(cudagraph_bytes)}",
            {**dataclasses.asdict(peak), "phase": peak.phase},
        )
    from kneecap.plan.ledger import with_vision_profile

    act = with_vision_profile(int(f.overhead_gib * GiB), deployment.vision_profile)
    why = (
        profile_peak.unmodelled_reason(
            deployment.model,
            v,
            sm_count=sm_count,
            gpu_name=deployment.gpu.name,
            encoder=not deployment.language_only,
            weight_dtype=deployment.weight_dtype,
            dp_attention=deployment.dp_attention,
            tp=deployment.attention_tp,
            ep=deployment.ep,
            amd=amd,
        )
        or f"vLLM {version}'s profile run is not modelled"
    )
    return act, f"--overhead-gib ({f.overhead_gib:g} GiB; no prediction: {why})", None


VLLM_SAMPLERS = ("pytorch", "flashinfer")


def _check_vllm_sampler(f: DeploymentRequest) -> None:
    """--vllm-sampler: vLLM's engine mode only, one of VLLM_SAMPLERS, at the releases whose choice is modelled."""
    if f.engine != "vllm":
        raise KneecapError(
            "--vllm-sampler is the sampler of vLLM's start-up profile run (it enters vLLM's pool model only)",
            "add --engine vllm, or drop --vllm-sampler",
        )
    if f.vllm_sampler not in VLLM_SAMPLERS:
        raise KneecapError(
            f"--vllm-sampler {f.vllm_sampler} is not a sampler kneecap knows", "pass pytorch or flashinfer"
        )
    version = f.engine_version or engines.DEFAULT_VLLM_VERSION
    if not profile_peak.is_flashinfer_sampler_rule(engines.parse_version(version)):
        raise KneecapError(
            f"--vllm-sampler applies to vLLM 0.10 and 0.11 only (not {version}): later releases' samplers are "
            "modelled as their defaults",
            "drop --vllm-sampler, or pass --activation-gib with the torch peak increase your server logged",
        )


def _vllm_non_torch(f: DeploymentRequest, deployment: Deployment, version: str) -> tuple[int, str]:
    """vLLM's non-torch memory in engine mode: --non-torch-gib when given, else the published measurement for the
    GPU, TP and release (plan/non_torch.py), else 0, saying which."""
    if f.non_torch_gib:
        return int(f.non_torch_gib * GiB), "--non-torch-gib"
    if deployment.dp_attention:  # the measurements are of TP groups; a DP rank's communicators span all the GPUs
        return 0, (
            "no published measurement under --data-parallel-size: 0 taken; pass --non-torch-gib with the "
            "non-torch memory your log reports"
        )
    return non_torch.vllm_non_torch(
        deployment.gpu.name, deployment.tp, engines.parse_version(version), pp=deployment.pp
    )


def _vllm_cudagraph(
    f: DeploymentRequest, deployment: Deployment, version: str, context: int
) -> cudagraph_memory.CudaGraphTerm:
    """vLLM's CUDA-graph estimate in engine mode and where it came from (plan/cudagraph_memory.py): whether the
    release subtracts one on this GPU, --cudagraph-gib where given, else the default for the graphs the server
    would capture."""
    v = engines.parse_version(version)
    amd = deployment.gpu.is_amd
    tokens = seqs = 0  # the server's batch sizes its graphs: only read where the release subtracts them
    if v[:2] >= cudagraph_memory.SUBTRACTED_FROM:
        tokens = f.max_num_batched_tokens or engines.vllm_default_batch(
            version, deployment.hbm_bytes, deployment.gpu.name, context
        )
        seqs = f.max_num_seqs or engines.vllm_default_seqs(version, deployment.hbm_bytes, deployment.gpu.name, tokens)
    return cudagraph_memory.vllm_cudagraph(
        v,
        gpu_name=deployment.gpu.name,
        amd=amd,
        max_num_seqs=seqs,
        max_num_batched_tokens=tokens,
        architecture=deployment.model.architecture,
        given_bytes=None if f.cudagraph_gib is None else int(f.cudagraph_gib * GiB),
        mla="mla" in deployment.model.layer_types,
        chunked_local=deployment.model.attention_chunked,
        runner=profile_peak.model_runner(deployment.model, v, amd),
    )


def _overhead_by_tp(
    f: DeploymentRequest, deployment: Deployment, version: str, context: int, pool, weights_total: int
) -> tuple[tuple[int, int], ...]:
    """The engine's kept memory at each power-of-two TP up to 64: where the profile-run peak is predicted, the
    forward phase is per rank (the MLP's intermediate width splits over TP), so levers and the TP sweep re-plan
    with the peak vLLM would profile there; what vLLM's load holds beyond the weights (engines.vllm_load_extra:
    padding, whole-on-every-rank tensors, allocator blocks) is per rank too; the rest (graphs, RoPE) unchanged."""
    here = _vllm_non_torch(f, deployment, version)[0]
    rest = deployment.overhead_bytes - pool.activation_bytes - here - pool.load_extra_bytes
    out = []
    for tp in (1 << i for i in range(7)):
        at_tp = dataclasses.replace(deployment, tp=tp)
        act, non_torch = pool.activation_bytes, here
        if pool.activation_profile is not None:
            act, _, profile = _vllm_activation(f, at_tp, version, context)
            if profile is None:
                continue
            non_torch = _vllm_non_torch(f, at_tp, version)[0]
        weights = weights_bytes_per_gpu(weights_total, at_tp)
        extra = engines.vllm_load_extra(at_tp, version, weights, pool.rope_cache_bytes, pool.expert_pad_bytes)[0]
        out.append((tp, rest + act + non_torch + extra))
    return tuple(out)


def _with_vision_profile(deployment: Deployment, f: DeploymentRequest, context_hint: int | None) -> Deployment:
    """The deployment with vLLM's start-up profile of its vision tower in overhead_bytes (kneecap.plan.ledger
    with_vision_profile), at --max-num-batched-tokens or vLLM's default for the GPU."""
    from kneecap.plan.ledger import vision_profile, with_vision_profile

    tokens = f.max_num_batched_tokens or engines.vllm_default_batch(
        f.engine_version or engines.DEFAULT_VLLM_VERSION,
        deployment.hbm_bytes,
        deployment.gpu.name,
        context_hint or 1 << 20,
    )
    profile = vision_profile(deployment, tokens)
    return dataclasses.replace(
        deployment,
        overhead_bytes=with_vision_profile(deployment.overhead_bytes, profile),
        vision_profile=profile,
    )
