"""`kneecap plan`: flags -> kneecap.plan.build.DeploymentRequest -> plan_deployment -> worksheet or JSON.

Also the one definition of each plan flag (typer options), shared by every command that plans a
deployment; their defaults come from kneecap.plan.build.DEFAULTS. rich is imported only to print.
"""

from __future__ import annotations

import json
import sys
from typing import Annotated, Optional

import typer

from kneecap.cli.app import app
from kneecap.errors import KneecapError
from kneecap.plan.build import DEFAULTS, DeploymentRequest, check_positive, plan_deployment

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
    print(f"{'--gpu':14} {'datasheet':>9}  {'driver reports':>14}  {'HBM bandwidth':>13}  {'link':6}  part")
    for g in gpus:
        dev = f"{g.device_bytes / GiB:.2f} GiB" if g.device_bytes else "n/a"
        print(f"{g.name:14} {g.datasheet_bytes / 1e9:>6.0f} GB  {dev:>14}  {g.hbm_bandwidth_bytes_s / 1e12:>8.2f} TB/s  "
              f"{g.interconnect:6}  {g.label}")
    return 0


@app.command("plan")
def plan_command(
    preset: PresetOpt = None, model: ModelOpt = None, gpu: GpuOpt = None, tp: TpOpt = DEFAULTS.tp, pp: PpOpt = DEFAULTS.pp,
    weight_dtype: WDtypeOpt = None, kv_dtype: KvDtypeOpt = None, params: ParamsOpt = None,
    context: ContextOpt = None, mean_context: MeanOpt = None, block_size: BlockOpt = None,
    compute_batch_cap: CapOpt = None, overhead_gib: OverheadOpt = DEFAULTS.overhead_gib, frag: FragOpt = DEFAULTS.frag,
    mem_util: MemUtilOpt = None, hbm: HbmOpt = DEFAULTS.hbm, kv_pool_gib: PoolOpt = None,
    prefix_tokens: Annotated[Optional[int], typer.Option("--prefix-tokens", help="Shared prompt prefix per request (prices prefix sharing)")] = None,
    engine: EngineOpt = None, mem_fraction: MemFracOpt = None, engine_version: EngineVerOpt = None,
    activation_gib: ActOpt = None, non_torch_gib: NonTorchOpt = DEFAULTS.non_torch_gib,
    cudagraph_gib: GraphOpt = DEFAULTS.cudagraph_gib, mamba_cache_size: MambaOpt = None,
    list_gpus: Annotated[bool, typer.Option("--list-gpus", help="List the GPU catalog and exit")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document")] = False,
) -> int:
    """Capacity ledger for one deployment, with levers, TP sweep and context sweep (the worksheet, step by step)."""
    if list_gpus:
        return _list_gpus(as_json)
    request = DeploymentRequest(preset=preset, model=model, gpu=gpu, tp=tp, pp=pp, weight_dtype=weight_dtype, kv_dtype=kv_dtype,
                      params=params, context=context, mean_context=mean_context, block_size=block_size,
                      compute_batch_cap=compute_batch_cap, overhead_gib=overhead_gib, frag=frag, mem_util=mem_util,
                      hbm=hbm, kv_pool_gib=kv_pool_gib, engine=engine, mem_fraction=mem_fraction,
                      engine_version=engine_version, activation_gib=activation_gib, non_torch_gib=non_torch_gib,
                      cudagraph_gib=cudagraph_gib, mamba_cache_size=mamba_cache_size)
    check_positive("--prefix-tokens", prefix_tokens, int)
    plan, engine_pool = plan_deployment(request)
    doc, levers, tps, contexts = plan_document(plan, engine_pool, prefix_tokens)
    if as_json:
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    from kneecap.plan.render import plan_worksheet, print_renderables

    print_renderables(plan_worksheet(plan, levers, tps, contexts, engine=engine_pool, prefix_tokens=prefix_tokens))
    return 0


__all__ = ["plan_document"]
