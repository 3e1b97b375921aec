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
from kneecap.plan.build import DEFAULTS, DeploymentRequest, check_positive, plan_deployment

# Every plan flag: its typer option; the default is DEFAULTS' (kneecap.plan.build), never written here again.
FLAG_OPTIONS = {
    "preset": Annotated[Optional[str], typer.Option("--preset", help="Model preset name, e.g. gqa-70b")],
    "model": Annotated[Optional[str], typer.Option("--model", help="Preset, config.json, folder, .gguf or org/name")],
    "gpu": Annotated[Optional[str], typer.Option("--gpu", help="GPU name, e.g. h100-sxm, mi300x (see --list-gpus)")],
    "tp": Annotated[int, typer.Option("--tp", help="Tensor-parallel degree")],
    "pp": Annotated[int, typer.Option("--pp", help="Pipeline stages (layers split over stages)")],
    "ep": Annotated[
        int,
        typer.Option("--ep", help="Expert-parallel degree over the --tp GPUs (MoE models; 1 = experts sharded by TP)"),
    ],
    "dp_attention": Annotated[
        bool,
        typer.Option(
            "--dp-attention",
            help="Attention data-parallel over the --tp GPUs: whole attention weights and a KV pool per GPU (MoE models)",
        ),
    ],
    "dp_attention_engine": Annotated[
        Optional[str],
        typer.Option(
            "--dp-attention-engine",
            help="With --dp-attention: whose layout of the other weights to count, sglang, tensorrt-llm or vllm "
            "(which hold the embedding, LM head and dense MLPs whole on each GPU; default: --engine's, else the parts "
            "all three do)",
        ),
    ],
    "weight_dtype": Annotated[
        Optional[str],
        typer.Option(
            "--weight-dtype",
            help="bf16, fp16, fp8, int8, int4/awq/gptq, nvfp4, mxfp4 (default: as the checkpoint ships)",
        ),
    ],
    "kv_dtype": Annotated[
        Optional[str],
        typer.Option("--kv-dtype", help="bf16, fp16 or fp8 (default: the model's 16-bit dtype, as vLLM's 'auto')"),
    ],
    "params": Annotated[
        Optional[float], typer.Option("--params", help="Total parameters to price (overrides the model's count)")
    ],
    "context": Annotated[
        Optional[int], typer.Option("--context", help="Advertised max tokens per sequence (default: the model's max)")
    ],
    "mean_context": Annotated[
        Optional[int], typer.Option("--mean-context", help="Typical tokens per sequence (default: --context)")
    ],
    "block_size": Annotated[
        Optional[int],
        typer.Option(
            "--block-size",
            help="Tokens per KV block (paged allocation; 16, vLLM's MLA backend's block with --engine vllm, SGLang page size "
            "1); vLLM 0.8-0.17 replaces a block its MLA backend cannot use, and the plan counts the engine's",
        ),
    ],
    "compute_batch_cap": Annotated[
        Optional[int], typer.Option("--compute-batch-cap", help="Latency/SLO cap on concurrent sequences")
    ],
    "overhead_gib": Annotated[
        float, typer.Option("--overhead-gib", help="Activations + workspace + CUDA graphs per GPU, GiB")
    ],
    "frag": Annotated[
        float,
        typer.Option("--frag", help="Fragmentation headroom: fraction of what is left after weights and overhead"),
    ],
    "mem_util": Annotated[
        Optional[float],
        typer.Option(
            "--mem-util",
            help="Fraction of HBM the engine may use (1.0; vLLM engine mode 0.9, 1.0 from --engine-version 0.34)",
        ),
    ],
    "hbm": Annotated[
        str,
        typer.Option(
            "--hbm",
            help="HBM per GPU: datasheet (vendor GB x 10^9, default), device (nvidia-smi/rocm-smi), framework (PyTorch), or bytes (e.g. 192000000000, 180GiB)",
        ),
    ],
    "kv_pool_gib": Annotated[
        Optional[float],
        typer.Option(
            "--kv-pool-gib",
            help="A KV pool an engine logged (GiB per GPU): plan tokens and sequences from it; with --engine vllm counted with the state blocks of a Mamba / linear-attention hybrid (vLLM keeps them in the pool), else as SGLang logs it (attention KV only)",
        ),
    ],
    "engine": Annotated[
        Optional[str], typer.Option("--engine", help="Model how an engine sizes its pool: vllm or sglang")
    ],
    "mem_fraction": Annotated[
        Optional[float],
        typer.Option(
            "--mem-fraction",
            help="SGLang --mem-fraction-static (default: the one SGLang picks itself at --engine-version for the "
            "GPU's memory, TP and DP attention)",
        ),
    ],
    "moe_backend": Annotated[
        Optional[str],
        typer.Option(
            "--moe-backend",
            help="vLLM: the kernel that ran MXFP4 experts (gpt-oss): marlin (pads the experts' weights) or triton "
            "(default: the release's choice for the GPU; at 0.10-0.11 Hopper runs triton only where the server has "
            "the triton_kernels package)",
        ),
    ],
    "vllm_sampler": Annotated[
        Optional[str],
        typer.Option(
            "--vllm-sampler",
            help="vLLM 0.10-0.11: the sampler its start-up profile run took, which sets the activation peak: pytorch "
            "(sorts the logits; the default, as pip install vllm has no FlashInfer) or flashinfer (a server with "
            "FlashInfer installed samples without sorting)",
        ),
    ],
    "engine_version": Annotated[
        Optional[str],
        typer.Option(
            "--engine-version",
            help="Engine version the pool model follows (default vLLM 0.32, SGLang 0.5); for vLLM also the hybrid state-block rule of that release",
        ),
    ],
    "activation_gib": Annotated[
        Optional[float],
        typer.Option(
            "--activation-gib",
            help="vLLM: activation peak of its profile run, GiB: its DEBUG line's 'torch peak memory increase' (the "
            "'peak activation' 0.27+ print at INFO leaves out what the run keeps and adds the CUDA-graph estimate) "
            "(default: predicted for dense Llama, Mistral and Qwen2 models on vLLM 0.6-0.7; for those, Qwen3 and Gemma "
            "1-3 on 0.10-0.33; for gpt-oss, Qwen3-MoE, Mixtral and DeepSeek-V2/V3 at the releases whose MoE kernels were "
            "read, with vLLM's first model runner (from 0.17 on GPUs whose SM count the catalog holds; Model Runner V2, "
            "vLLM's default from 0.22-0.29 by model, needs none); else --overhead-gib, and the plan's activation line "
            "says why)",
        ),
    ],
    "non_torch_gib": Annotated[
        float,
        typer.Option(
            "--non-torch-gib",
            help="Engine mode: non-torch memory the engine logs (NCCL buffers, kernels loaded on first use), GiB "
            "(vLLM 0.11-0.34 on an H100: what the nearest earlier measured release, 0.11.0 or 0.19.0, logged at that "
            "TP where it was measured; else 0, and the plan says which); SGLang: the memory in use before the "
            "weights load (CUDA context, NCCL), which costs its pool mem_fraction_static x that amount (default 0)",
        ),
    ],
    "cudagraph_gib": Annotated[
        Optional[float],
        typer.Option(
            "--cudagraph-gib",
            help="vLLM >= 0.20: the CUDA-graph memory estimate it logs ('Estimated CUDA graph memory'), GiB "
            "(default: vLLM's sum for the graphs the server captures, with the median per-mode figures of 57 "
            "published vLLM 0.19.0 H100 logs, 0.84 GiB for an H100 with vLLM's defaults; 0 subtracts none; not subtracted "
            "on AMD GPUs by 0.20-0.25, which make no estimate there)",
        ),
    ],
    "mamba_cache_size": Annotated[
        Optional[int],
        typer.Option("--mamba-cache-size", help="SGLang --max-mamba-cache-size (hybrid linear-attention models)"),
    ],
    "cpu_kvcache_space_gib": Annotated[
        Optional[int],
        typer.Option(
            "--cpu-kvcache-space-gib",
            help="vLLM CPU build: its VLLM_CPU_KVCACHE_SPACE (whole GiB); prints the KV pool in tokens it logs (no --gpu)",
        ),
    ],
    "max_num_batched_tokens": Annotated[
        Optional[int],
        typer.Option(
            "--max-num-batched-tokens",
            help="vLLM's --max-num-batched-tokens, which its sliding-window groups reserve per request in the logged "
            "maximum concurrency, and for 0.6-0.7 and 0.10-0.33 the batch of the profile run whose activation peak "
            "kneecap predicts (default: the release's)",
        ),
    ],
    "max_num_seqs": Annotated[
        Optional[int],
        typer.Option(
            "--max-num-seqs",
            help="vLLM's --max-num-seqs: the rows of logits its start-up profile run samples, which set the activation "
            "peak kneecap predicts in engine mode (default: the release's for the GPU)",
        ),
    ],
    "language_only": Annotated[
        bool,
        typer.Option(
            "--language-only",
            help="Serve a multimodal checkpoint's language model only (vLLM --language-model-only): its vision encoder is not loaded",
        ),
    ],
    "prefix_caching": Annotated[
        Optional[bool],
        typer.Option(
            "--prefix-caching/--no-prefix-caching",
            help="vLLM prefix caching (default: the release's; on for hybrids from 0.26): with it, Mamba / linear-attention hybrids hold 2-3 state blocks per request instead of 1. With --engine sglang: its radix cache (--no-prefix-caching = --disable-radix-cache), which sets how many requests a hybrid's Mamba pool lets run",
        ),
    ],
}
PLAN_ONLY = ("cpu_kvcache_space_gib", "max_num_seqs")  # the CPU pool, the profile run's rows: `plan` only
ALL_FLAGS = tuple(n for n in FLAG_OPTIONS if n not in PLAN_ONLY)
PLAN_FLAGS = ALL_FLAGS + PLAN_ONLY
# what simulate, serve and calibrate take: a deployment without an engine's own pool model or a serving target
SIM_FLAGS = (
    "preset",
    "model",
    "gpu",
    "tp",
    "pp",
    "ep",
    "dp_attention",
    "dp_attention_engine",
    "weight_dtype",
    "kv_dtype",
    "params",
    "context",
    "block_size",
    "overhead_gib",
    "frag",
    "mem_util",
    "hbm",
    "kv_pool_gib",
)
# `kneecap simulate` also takes the engine pool models of `kneecap plan` (--engine, --mem-fraction)
SIMULATE_FLAGS = SIM_FLAGS + ("engine", "mem_fraction", "moe_backend", "vllm_sampler")
# without --engine, a pool the simulated engine is given is read one way, as SGLang logs it
SIM_OPTIONS = {
    **FLAG_OPTIONS,
    "kv_pool_gib": Annotated[
        Optional[float],
        typer.Option(
            "--kv-pool-gib",
            help="A KV pool an engine logged (GiB per GPU) for the simulated engine: counted as attention KV only, as "
            "SGLang logs it (a Mamba / linear-attention hybrid's state is kept apart); with --engine vllm as vLLM lays "
            "it out",
        ),
    ],
    "engine": Annotated[
        Optional[str],
        typer.Option(
            "--engine",
            help="Size the KV pool by this engine's own memory accounting, as `kneecap plan --engine` does: vllm "
            "(--mem-util is its gpu_memory_utilization, default 0.9 through 0.19, 0.92 from 0.20, 1.0 from 0.34) or sglang (--mem-fraction, default the one "
            "SGLang picks itself for the GPU and TP), at --engine-version's release; the scheduler defaults are that engine's too",
        ),
    ],
}

# the simulated engine's scheduler knobs, for the commands that run it (simulate, serve, calibrate)
ENGINE_DEFAULTS = "vllm"
ENGINE_DEFAULTS_HELP = (
    "Whose scheduler defaults to mimic: vllm, sglang, trtllm (TensorRT-LLM), nim (NVIDIA NIM's TensorRT-LLM "
    "profiles: TensorRT-LLM's defaults on its C++ runtime) or llamacpp (llama.cpp as llama-bench runs it: one sequence "
    "at a time, 2048-token batches); trtllm and nim also size the KV pool as TensorRT-LLM does (0.9 of the memory free "
    "once the model is loaded) unless --hbm, --frag or --kv-pool-gib say otherwise"
)
EngineDefaultsOpt = Annotated[str, typer.Option("--engine-defaults", help=ENGINE_DEFAULTS_HELP)]
# simulate's: default --engine's engine, else vllm
SimEngineDefaultsOpt = Annotated[
    Optional[str],
    typer.Option("--engine-defaults", help=ENGINE_DEFAULTS_HELP + " (default: --engine's engine, else vllm)"),
]
MaxSeqsOpt = Annotated[
    Optional[int],
    typer.Option(
        "--max-num-seqs",
        help="Sequences running at once (default: the engine's); with --dp-attention under SGLang, the total, each "
        "DP rank running its share",
    ),
]
MaxBatchedOpt = Annotated[
    Optional[int], typer.Option("--max-num-batched-tokens", help="Tokens per step (default: the engine's)")
]


def deployment_flags(names: tuple[str, ...] = ALL_FLAGS, options: dict = FLAG_OPTIONS):
    """Give a command the plan flags `names`, defined once (their typer options from `options`), and hand it
    `request=DeploymentRequest(...)` built from them (typer reads the signature this decorator writes)."""
    import functools
    import inspect

    def decorate(fn):
        sig = inspect.signature(fn, eval_str=True)  # typer needs the annotations themselves, not their text
        kw = inspect.Parameter.KEYWORD_ONLY
        flags = [inspect.Parameter(n, kw, default=getattr(DEFAULTS, n), annotation=options[n]) for n in names]
        own = [p.replace(kind=kw) for p in sig.parameters.values() if p.name != "request"]

        @functools.wraps(fn)
        def command(**kwargs):
            values = {n: kwargs.pop(n) for n in names}
            return fn(request=DeploymentRequest(**values), **kwargs)

        command.__signature__ = sig.replace(parameters=flags + own)
        command.__annotations__ = {k: v for k, v in fn.__annotations__.items() if k != "request"}
        return command

    return decorate


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
        print(
            f"{g.name:14} {g.datasheet_bytes / 1e9:>6.0f} GB  {dev:>14}  {g.hbm_bandwidth_bytes_s / 1e12:>8.2f} TB/s  "
            f"{g.interconnect:6}  {g.label}"
        )
    return 0


def _cpu_pool(request, as_json: bool) -> int:
    """`plan --cpu-kvcache-space-gib N`: the pool vLLM's CPU build allocates, and the line it logs."""
    from kneecap.plan.build import plan_vllm_cpu

    pool = plan_vllm_cpu(request)
    if as_json:
        sys.stdout.write(json.dumps({"engine": pool.to_json(), "kv_capacity_tokens": pool.kv_capacity_tokens}) + "\n")
        return 0
    print(
        f"vLLM CPU build {pool.version}: VLLM_CPU_KVCACHE_SPACE={request.cpu_kvcache_space_gib} = "
        f"{pool.budget_bytes:,} B -> {pool.num_blocks:,} blocks ({pool.layout})"
    )
    print("the server would log:")
    for line in pool.log_lines:
        print(f"  {line}")
    print(f"kneecap's capacity (its own count, not a line the server prints): {pool.kv_capacity_tokens:,} tokens")
    if pool.capacity_explained:
        print(f"  why they differ: {pool.capacity_explained}")
    for note in pool.notes:
        print(f"note: {note}")
    return 0


@app.command("plan")
@deployment_flags(PLAN_FLAGS)
def plan_command(
    request=None,
    prefix_tokens: Annotated[
        Optional[int], typer.Option("--prefix-tokens", help="Shared prompt prefix per request (prices prefix sharing)")
    ] = None,
    list_gpus: Annotated[bool, typer.Option("--list-gpus", help="List the GPU catalog and exit")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document")] = False,
) -> int:
    """Capacity ledger for one deployment, with levers, TP sweep and context sweep (the worksheet, step by step)."""
    if list_gpus:
        return _list_gpus(as_json)
    check_positive("--prefix-tokens", prefix_tokens, int)
    if request.cpu_kvcache_space_gib is not None:
        return _cpu_pool(request, as_json)
    plan, engine_pool = plan_deployment(request)
    doc, levers, tps, contexts = plan_document(plan, engine_pool, prefix_tokens)
    if as_json:
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    from kneecap.plan.render import plan_worksheet, print_renderables

    print_renderables(plan_worksheet(plan, levers, tps, contexts, engine=engine_pool, prefix_tokens=prefix_tokens))
    return 0


__all__ = ["plan_document"]
