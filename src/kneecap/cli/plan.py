"""`kneecap plan`: flags -> Model, Gpu, Deployment -> ledger, levers, sweeps -> worksheet or JSON.

Thin: resolves flags (shared with `kneecap preflight`, which imports PlanFlags and build_from_flags)
and calls kneecap.plan. rich is imported only when the worksheet is printed.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from dataclasses import dataclass
from typing import Annotated, Optional

import typer

from kneecap.cli.app import app
from kneecap.errors import KneecapError

HELP_HBM = "HBM per GPU: datasheet (vendor GB x 10^9, default), device (nvidia-smi/rocm-smi), framework (PyTorch), or bytes (e.g. 192000000000, 180GiB)"

PresetOpt = Annotated[Optional[str], typer.Option("--preset", help="Model preset name, e.g. gqa-70b")]
ModelOpt = Annotated[Optional[str], typer.Option("--model", help="Preset, config.json, folder, .gguf or org/name")]
GpuOpt = Annotated[Optional[str], typer.Option("--gpu", help="GPU name, e.g. h100-sxm, mi300x (see --list-gpus)")]
TpOpt = Annotated[int, typer.Option("--tp", help="Tensor-parallel degree")]
PpOpt = Annotated[int, typer.Option("--pp", help="Pipeline stages (layers split over stages)")]
WDtypeOpt = Annotated[Optional[str], typer.Option("--weight-dtype", help="bf16, fp16, fp8, int8, int4/awq/gptq, nvfp4, mxfp4 (default: as the checkpoint ships)")]
KvDtypeOpt = Annotated[Optional[str], typer.Option("--kv-dtype", help="bf16, fp16 or fp8 (default: the model's 16-bit dtype, as vLLM's 'auto')")]
ParamsOpt = Annotated[Optional[float], typer.Option("--params", help="Total parameters to price (overrides the model's count)")]
ContextOpt = Annotated[Optional[int], typer.Option("--context", help="Advertised max tokens per sequence (default: the model's max)")]
MeanOpt = Annotated[Optional[int], typer.Option("--mean-context", help="Typical tokens per sequence (default: --context)")]
BlockOpt = Annotated[Optional[int], typer.Option("--block-size", help="Tokens per KV block (paged allocation; 16, SGLang page size 1)")]
CapOpt = Annotated[Optional[int], typer.Option("--compute-batch-cap", help="Latency/SLO cap on concurrent sequences")]
OverheadOpt = Annotated[float, typer.Option("--overhead-gib", help="Activations + workspace + CUDA graphs per GPU, GiB")]
FragOpt = Annotated[float, typer.Option("--frag", help="Fragmentation headroom: fraction of what is left after weights and overhead")]
MemUtilOpt = Annotated[Optional[float], typer.Option("--mem-util", help="Fraction of HBM the engine may use (1.0; vLLM engine mode 0.9)")]
HbmOpt = Annotated[str, typer.Option("--hbm", help=HELP_HBM)]
PoolOpt = Annotated[Optional[float], typer.Option("--kv-pool-gib", help="A KV pool an engine logged (GiB per GPU): plan tokens and sequences from it")]
EngineOpt = Annotated[Optional[str], typer.Option("--engine", help="Model how an engine sizes its pool: vllm or sglang")]
MemFracOpt = Annotated[Optional[float], typer.Option("--mem-fraction", help="SGLang --mem-fraction-static (default 0.88)")]
EngineVerOpt = Annotated[Optional[str], typer.Option("--engine-version", help="Engine version the pool model follows (vLLM 0.21, SGLang 0.5)")]
ActOpt = Annotated[Optional[float], typer.Option("--activation-gib", help="vLLM: activation peak of its profile run, GiB (default: --overhead-gib)")]
NonTorchOpt = Annotated[float, typer.Option("--non-torch-gib", help="Engine mode: non-torch memory (CUDA context, NCCL), GiB")]
GraphOpt = Annotated[float, typer.Option("--cudagraph-gib", help="vLLM >= 0.21: CUDA-graph memory estimate, GiB")]
MambaOpt = Annotated[Optional[int], typer.Option("--mamba-cache-size", help="SGLang --max-mamba-cache-size (hybrid linear-attention models)")]


@dataclass(frozen=True)
class PlanFlags:
    """The plan flags as plain values (what `plan` and `preflight` both accept)."""

    preset: str | None = None
    model: str | None = None
    gpu: str | None = None
    tp: int = 1
    pp: int = 1
    weight_dtype: str | None = None
    kv_dtype: str | None = None
    params: float | None = None
    context: int | None = None
    mean_context: int | None = None
    block_size: int | None = None  # None: 16 (vLLM's default), or SGLang's page size 1 with --engine sglang
    compute_batch_cap: int | None = None
    overhead_gib: float = 4.0
    frag: float = 0.05
    mem_util: float | None = None
    hbm: str = "datasheet"
    kv_pool_gib: float | None = None
    engine: str | None = None
    mem_fraction: float | None = None
    engine_version: str | None = None
    activation_gib: float | None = None
    non_torch_gib: float = 0.0
    cudagraph_gib: float = 0.0
    mamba_cache_size: int | None = None  # SGLang --max-mamba-cache-size (linear-attention hybrids)


def parse_hbm(value: str) -> str | int:
    """'datasheet' | 'device' | 'framework' | bytes ('192000000000', '192e9', '192GB', '178.81GiB')."""
    from kneecap.units import GB, GiB

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
        raise KneecapError(f"--hbm {value!r} is not datasheet, device, framework or a byte count",
                           "pass e.g. --hbm device or --hbm 192000000000") from None
    if n <= 0:
        raise KneecapError(f"--hbm must be positive, got {value!r}", "pass e.g. --hbm 192000000000")
    return n


EXAMPLES = {"--tp": 8, "--pp": 2, "--block-size": 16, "--context": 8192, "--mean-context": 2048,
            "--compute-batch-cap": 128, "--params": "70e9", "--kv-pool-gib": 42.2, "--prefix-tokens": 1000}


def _positive(flag: str, value, kind=int) -> None:
    if value is None:
        return
    if value <= 0 or (kind is int and int(value) != value):
        what = "a positive whole number" if kind is int else "positive"
        raise KneecapError(f"{flag} must be {what}, got {value!r}", f"pass e.g. {flag} {EXAMPLES.get(flag, 1)}")


def load_model_spec(spec: str):
    """A Model from a preset / path / org/name via the model loader."""
    try:
        from kneecap.model import load_model  # type: ignore[attr-defined]
    except ImportError:
        try:
            from kneecap.model.resolve import load_model
        except ImportError:  # pragma: no cover - only while the loader is being written
            raise KneecapError("model loading is not available in this build", "reinstall kneecap") from None
    return load_model(spec)


def checkpoint_weights(model) -> tuple[int, str, str] | None:
    """(whole-model weight bytes as the checkpoint ships, main dtype, source label) when the model knows its parts."""
    try:
        from kneecap.model.params import part_dtypes, total_weight_bytes
    except ImportError:  # pragma: no cover
        return None
    try:
        total = total_weight_bytes(model, None)
        dtypes = part_dtypes(model)
    except (AttributeError, TypeError, KeyError):
        return None
    if model.checkpoint_bytes:
        total = model.checkpoint_bytes
    kinds = sorted(set(dtypes.values()))
    if len(kinds) == 1:
        return total, kinds[0], "checkpoint"
    from kneecap.model.params import param_breakdown

    parts = param_breakdown(model)
    biggest = max(parts, key=parts.get)
    return total, dtypes.get(biggest, kinds[0]), "checkpoint (mixed dtypes: " + ", ".join(
        f"{p} {dtypes.get(p, '?')}" for p in parts) + ")"


MAX_GIB_FLAG = 1024.0**2  # 1 PiB per GPU: far beyond any device, small enough for exact integer bytes
MAX_PARAMS = 1e16


def _finite_floats(f: PlanFlags) -> None:
    """Every float flag is a finite number in range (nan, inf and 1e300 would reach int() otherwise)."""
    import dataclasses
    import math

    for field in dataclasses.fields(f):
        value = getattr(f, field.name)
        if not isinstance(value, float):
            continue
        flag = "--" + field.name.replace("_", "-")
        limit = MAX_PARAMS if field.name == "params" else MAX_GIB_FLAG if field.name.endswith("_gib") else None
        if not math.isfinite(value) or (limit is not None and abs(value) > limit):
            bound = f" up to {limit:g}" if limit is not None else ""
            raise KneecapError(f"{flag} must be a finite number{bound}, got {value!r}", f"pass a plain number to {flag}")


def build_from_flags(f: PlanFlags):
    """Flags -> (Plan, EnginePool | None). Every bad flag becomes a one-line KneecapError."""
    from kneecap.deployment import Deployment
    from kneecap.hardware import get_gpu
    from kneecap.model.kv import check_tp, kv_dtype_bytes
    from kneecap.model.weights import weight_bits
    from kneecap.plan import engines
    from kneecap.plan.ledger import build_plan, weights_bytes_per_gpu, weights_total_bytes
    from kneecap.units import GiB

    if f.preset and f.model:
        raise KneecapError("--preset and --model both given", "pass one of them")
    spec = f.preset or f.model
    if not spec:
        raise KneecapError("no model given", "pass --preset NAME (e.g. gqa-70b) or --model PATH|org/name")
    if not f.gpu:
        raise KneecapError("no GPU given", "pass --gpu NAME, e.g. --gpu h100-sxm (see `kneecap plan --list-gpus`)")
    for flag, value in (("--tp", f.tp), ("--pp", f.pp), ("--block-size", f.block_size), ("--context", f.context),
                        ("--mean-context", f.mean_context), ("--compute-batch-cap", f.compute_batch_cap)):
        _positive(flag, value, int)
    _finite_floats(f)
    for flag, value in (("--params", f.params), ("--kv-pool-gib", f.kv_pool_gib)):
        _positive(flag, value, float)
    if f.overhead_gib < 0:
        raise KneecapError(f"--overhead-gib must be >= 0, got {f.overhead_gib!r}", "pass e.g. --overhead-gib 4")
    if f.engine is not None and f.engine not in engines.ENGINES:
        raise KneecapError(f"unknown engine {f.engine!r}", f"use --engine {' or --engine '.join(engines.ENGINES)}")
    if f.engine and f.kv_pool_gib:
        raise KneecapError("--engine and --kv-pool-gib both given", "an engine model computes the pool; pass one of them")
    if f.mem_fraction is not None and f.engine != "sglang":
        raise KneecapError("--mem-fraction is SGLang's mem_fraction_static", "add --engine sglang, or use --mem-util")
    if f.mamba_cache_size is not None and f.engine != "sglang":
        raise KneecapError("--mamba-cache-size is SGLang's --max-mamba-cache-size", "add --engine sglang")
    if f.activation_gib is not None and f.engine != "vllm":
        raise KneecapError("--activation-gib is an input of the vLLM engine model", "add --engine vllm, or use --overhead-gib")

    gpu = get_gpu(f.gpu)
    if f.kv_dtype:
        kv_dtype_bytes(f.kv_dtype)  # validates the name
    if f.weight_dtype:
        weight_bits(f.weight_dtype)
    model = load_model_spec(spec)
    check_tp(model, f.tp)  # before any engine arithmetic, so the message is about the heads
    weights_total = source = None
    weight_dtype = f.weight_dtype
    if not f.weight_dtype and not f.params:
        shipped = checkpoint_weights(model)
        if shipped:
            weights_total, weight_dtype, source = shipped
    weight_dtype = (weight_dtype or model.weight_dtype or "bf16").lower()
    kv_dtype = (f.kv_dtype or (model.weight_dtype if model.weight_dtype in ("bf16", "fp16") else "bf16")).lower()
    hbm = parse_hbm(f.hbm)
    if f.engine and f.hbm == "datasheet":
        hbm = "framework"  # an engine reads the total the framework sees, not the datasheet
    mem_util = f.mem_util
    if f.engine == "vllm" and mem_util is None:
        mem_util = engines.VLLM_DEFAULT_MEM_UTIL
    if f.engine == "sglang":
        if mem_util is not None:
            raise KneecapError("--mem-util is vLLM's knob", "use --mem-fraction for --engine sglang")
        mem_util = f.mem_fraction if f.mem_fraction is not None else engines.SGLANG_EXAMPLE_MEM_FRACTION
    deployment = Deployment(
        model=model, gpu=gpu, tp=f.tp, pp=f.pp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
        block_size=f.block_size or (1 if f.engine == "sglang" else 16), hbm=hbm, overhead_bytes=int(f.overhead_gib * GiB), frag_fraction=f.frag,
        mem_util=1.0 if mem_util is None else mem_util,
        params_override=int(f.params) if f.params else None,
    )
    context = f.context or model.max_position_embeddings
    if not context:
        raise KneecapError(f"model {model.name} does not state its max context", "pass --context N")
    mean = f.mean_context or context
    if mean > context:
        raise KneecapError(f"--mean-context {mean} exceeds --context {context}",
                           "lower --mean-context or raise --context")

    pool_bytes = int(f.kv_pool_gib * GiB) if f.kv_pool_gib else None
    engine_pool = None
    if f.engine:  # the engine's own formula; then the ledger re-expressed in its terms (no fragmentation term)
        total = deployment.hbm_bytes
        wt = weights_total if weights_total is not None else weights_total_bytes(deployment)
        w_gpu = weights_bytes_per_gpu(wt, deployment)
        if f.engine == "vllm":
            act = int((f.activation_gib if f.activation_gib is not None else f.overhead_gib) * GiB)
            engine_pool = engines.vllm_pool(
                deployment, total_bytes=total, weights_bytes=w_gpu, mem_util=deployment.mem_util, max_model_len=context,
                activation_bytes=act, non_torch_bytes=int(f.non_torch_gib * GiB),
                cudagraph_bytes=int(f.cudagraph_gib * GiB), version=f.engine_version or engines.DEFAULT_VLLM_VERSION)
        else:
            engine_pool = engines.sglang_pool(
                deployment, total_bytes=total, weights_bytes=w_gpu, mem_fraction=deployment.mem_util,
                max_model_len=context, non_torch_bytes=int(f.non_torch_gib * GiB), page_size=deployment.block_size,
                mamba_cache_size=f.mamba_cache_size,
                version=f.engine_version or engines.DEFAULT_SGLANG_VERSION)
        kept = (engine_pool.activation_bytes + engine_pool.non_torch_bytes + engine_pool.cudagraph_bytes
                + engine_pool.state_pool_bytes)
        deployment = dataclasses.replace(deployment, overhead_bytes=kept, frag_fraction=0.0)
    plan = build_plan(deployment, context=context, mean_context=mean, compute_batch_cap=f.compute_batch_cap,
                      weights_total=weights_total, weights_source=source, kv_pool_bytes=pool_bytes)
    return plan, engine_pool


def plan_document(plan, engine_pool, prefix_tokens: int | None) -> tuple[dict, list, list, list]:
    """The --json document and the lever / sweep lists it was built from."""
    from kneecap.plan.levers import compute_levers
    from kneecap.plan.sweeps import context_sweep, tp_sweep

    levers = compute_levers(plan, prefix_tokens=prefix_tokens)
    tps = tp_sweep(plan)
    contexts = context_sweep(plan)
    doc = plan.to_json()
    doc["levers"] = [lv.to_json() for lv in levers]
    doc["tp_sweep"] = [p.to_json() for p in tps]
    doc["context_sweep"] = [c.to_json() for c in contexts]
    doc["engine"] = engine_pool.to_json() if engine_pool else None
    return doc, levers, tps, contexts


def _list_gpus(as_json: bool) -> int:
    from kneecap.hardware import list_gpus
    from kneecap.units import GiB

    gpus = list_gpus()
    if as_json:
        print(json.dumps({"gpus": [g.to_json() for g in gpus]}))
        return 0
    for g in gpus:
        dev = f"{g.device_bytes / GiB:7.2f} GiB" if g.device_bytes else "      n/a"
        print(f"{g.name:14} {g.datasheet_bytes / 1e9:5.0f} GB  device {dev}  {g.hbm_bandwidth_bytes_s / 1e12:5.2f} TB/s  "
              f"{g.interconnect:6}  {g.label}")
    return 0


@app.command("plan")
def plan_command(
    preset: PresetOpt = None, model: ModelOpt = None, gpu: GpuOpt = None, tp: TpOpt = 1, pp: PpOpt = 1,
    weight_dtype: WDtypeOpt = None, kv_dtype: KvDtypeOpt = None, params: ParamsOpt = None,
    context: ContextOpt = None, mean_context: MeanOpt = None, block_size: BlockOpt = None,
    compute_batch_cap: CapOpt = None, overhead_gib: OverheadOpt = 4.0, frag: FragOpt = 0.05,
    mem_util: MemUtilOpt = None, hbm: HbmOpt = "datasheet", kv_pool_gib: PoolOpt = None,
    prefix_tokens: Annotated[Optional[int], typer.Option("--prefix-tokens", help="Shared prompt prefix per request (prices prefix sharing)")] = None,
    engine: EngineOpt = None, mem_fraction: MemFracOpt = None, engine_version: EngineVerOpt = None,
    activation_gib: ActOpt = None, non_torch_gib: NonTorchOpt = 0.0, cudagraph_gib: GraphOpt = 0.0,
    mamba_cache_size: MambaOpt = None,
    list_gpus: Annotated[bool, typer.Option("--list-gpus", help="List the GPU catalog and exit")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document")] = False,
) -> int:
    """Capacity ledger for one deployment, with levers, TP sweep and context sweep (seed 003's worksheet)."""
    if list_gpus:
        return _list_gpus(as_json)
    flags = PlanFlags(preset=preset, model=model, gpu=gpu, tp=tp, pp=pp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                      params=params, context=context, mean_context=mean_context, block_size=block_size,
                      compute_batch_cap=compute_batch_cap, overhead_gib=overhead_gib, frag=frag, mem_util=mem_util,
                      hbm=hbm, kv_pool_gib=kv_pool_gib, engine=engine, mem_fraction=mem_fraction,
                      engine_version=engine_version, activation_gib=activation_gib, non_torch_gib=non_torch_gib,
                      cudagraph_gib=cudagraph_gib, mamba_cache_size=mamba_cache_size)
    _positive("--prefix-tokens", prefix_tokens, int)
    plan, engine_pool = build_from_flags(flags)
    doc, levers, tps, contexts = plan_document(plan, engine_pool, prefix_tokens)
    if as_json:
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    from kneecap.plan.render import plan_worksheet, print_renderables

    print_renderables(plan_worksheet(plan, levers, tps, contexts, engine=engine_pool, prefix_tokens=prefix_tokens))
    return 0


__all__ = ["PlanFlags", "build_from_flags", "parse_hbm", "plan_document"]
