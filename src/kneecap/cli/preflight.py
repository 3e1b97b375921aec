"""`kneecap preflight`: a KV capacity (a number, plan flags, or a live server) -> verdict per concurrency level.

Thin: resolves where the capacity comes from and calls kneecap.plan.preflight.preflight.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import sys
from typing import Annotated, Optional

import typer

from kneecap.cli.app import app
from kneecap.cli.plan import ALL_FLAGS, deployment_flags
from kneecap.errors import KneecapError
from kneecap.plan.build import plan_deployment


def capacity_from_server(url: str, api_key: str | None, timeout_s: float) -> tuple[int, int | None, str, dict]:
    """(kv_capacity_tokens, block_size or None, description, what the server said) as a live engine reports it."""
    from kneecap.client.server_info import fetch_server_info

    info = fetch_server_info(url, api_key=api_key, timeout_s=timeout_s)
    if not info.kv_capacity_tokens:
        raise KneecapError(
            f"{info.engine or 'the server'} at {url} does not report its KV capacity",
            "pass --kv-tokens N from its startup log (vLLM 'GPU KV cache size: N tokens')",
        )
    block = info.block_size
    return (
        int(info.kv_capacity_tokens),
        int(block) if block else None,
        f"{info.engine or 'server'} at {url}",
        info.to_dict(),
    )


@app.command("preflight")
@deployment_flags(tuple(n for n in ALL_FLAGS if n != "mean_context"))
def preflight_command(
    request=None,
    isl: Annotated[int, typer.Option("--isl", help="Input tokens per request")] = 1000,
    osl: Annotated[int, typer.Option("--osl", help="Output tokens per request")] = 1000,
    concurrency: Annotated[
        str, typer.Option("--concurrency", help="Levels, e.g. 64,128,256,512,1024")
    ] = "1,8,64,128,256,512,1024",
    kv_tokens: Annotated[
        Optional[int], typer.Option("--kv-tokens", help="KV capacity in tokens (an engine's log figure)")
    ] = None,
    server: Annotated[
        Optional[str],
        typer.Option("--server", help="Read the capacity a live engine reports (vLLM, SGLang, llama.cpp)"),
    ] = None,
    api_key_env: Annotated[
        Optional[str],
        typer.Option(
            "--api-key-env",
            help="Environment variable holding the --server API key (default KNEECAP_API_KEY, then OPENAI_API_KEY)",
        ),
    ] = None,
    api_key_file: Annotated[
        Optional[str], typer.Option("--api-key-file", help="File holding the --server API key")
    ] = None,
    timeout_s: Annotated[float, typer.Option("--timeout-s", help="--server probe timeout, seconds")] = 5.0,
    as_json: Annotated[bool, typer.Option("--json", help="Print one JSON document")] = False,
) -> int:
    """Which levels of a planned sweep fit the KV pool (from --kv-tokens, plan flags, or --server URL)."""
    from kneecap.plan.preflight import plan_capacity, preflight
    from kneecap.workload import concurrency_levels

    preset, model, gpu, kv_dtype, block_size = (
        request.preset,
        request.model,
        request.gpu,
        request.kv_dtype,
        request.block_size,
    )
    levels = concurrency_levels(concurrency)
    for flag, value in (("--isl", isl), ("--osl", osl)):
        if value <= 0:
            raise KneecapError(f"{flag} must be a positive whole number, got {value}", f"pass e.g. {flag} 1000")
    sources = [
        name
        for name, v in (("--kv-tokens", kv_tokens), ("--server", server), ("plan flags", preset or model or gpu))
        if v is not None
    ]
    if len(sources) != 1:
        raise KneecapError(
            "preflight needs exactly one capacity source" + (f", got {', '.join(sources)}" if sources else ""),
            "pass --kv-tokens N, or --server URL, or plan flags (--preset/--model and --gpu)",
        )
    bs = block_size or 16
    if bs <= 0:
        raise KneecapError(f"--block-size must be a positive whole number, got {bs}", "pass e.g. --block-size 16")
    plan_doc = server_doc = None
    notes: list[str] = []
    kv_bytes = 2
    gpus_per_replica = tp_caps = seqs_at = fp8_seqs_at = None
    if kv_tokens is not None:
        if kv_tokens <= 0:
            raise KneecapError(
                f"--kv-tokens must be a positive whole number, got {kv_tokens}", "pass e.g. --kv-tokens 1573854"
            )
        capacity, source = kv_tokens, "--kv-tokens"
        if kv_dtype:
            from kneecap.model.kv import kv_dtype_bytes

            kv_bytes = kv_dtype_bytes(kv_dtype)
    elif server:
        from kneecap.sweep.credentials import resolve_api_key

        api_key = resolve_api_key(api_key_env, api_key_file)  # never a flag value: it would land in shell history
        capacity, server_block, source, server_doc = capacity_from_server(server, api_key, timeout_s)
        bs = block_size or server_block or 16
        slots = (server_doc or {}).get("num_slots")
        over = [c for c in levels if slots and c > slots]
        if over:  # llama.cpp slots / SGLang max_running_requests: beyond them requests queue, whatever the KV says
            notes.append(
                f"the server runs at most {slots} requests at once: at C={', '.join(map(str, over))} the rest "
                f"queue, so TTFT includes waiting for a slot even where the KV pool fits"
            )
        kv_bytes = None if kv_dtype and kv_dtype.startswith("fp8") else 2
    else:
        plan, engine_pool = plan_deployment(request)
        d = plan.deployment
        source = f"plan: {d.model.name} on {d.num_gpus}x {d.gpu.name}"
        cap = plan_capacity(plan, engine_pool, isl + osl)
        capacity, bs, uniform, tp_caps = cap.kv_capacity_tokens, cap.block_size, cap.uniform, cap.tp_capacities
        running = engine_pool.max_running_requests if engine_pool else None
        if over := [c for c in levels if running and c > running]:  # SGLang: its Mamba state pool's running cap
            notes.append(
                f"SGLang runs at most {running:,} requests at once here (its Mamba state slots; see `kneecap "
                f"plan`): at C={', '.join(map(str, over))} the rest queue, so TTFT includes waiting for a slot "
                "even where the KV pool fits"
            )
        if not uniform:
            notes.append(
                f"{d.model.name} mixes layer kinds: capacity is the pool's tokens when every sequence holds "
                f"{isl + osl:,} tokens (sliding layers capped at their window, linear layers a fixed state)"
            )
        kv_bytes = plan.kv_dtype_bytes
        if not uniform and not (engine_pool and engine_pool.engine == "sglang"):
            from kneecap.plan.ledger import sequences_at

            # the fixes recompute through the plan's own count (a state or a window does not scale with the pool)
            seqs_at = functools.partial(sequences_at, plan)
            fp8_seqs_at = None if kv_bytes <= 1 else functools.partial(sequences_at, plan, kv_dtype="fp8")
        gpus_per_replica = plan.deployment.num_gpus
        plan_doc = {
            "kv_pool_bytes": plan.ledger.kv_pool_bytes,
            "kv_bytes_per_token_per_gpu": plan.kv_bytes_per_token_per_gpu,
            "weights_bytes": plan.ledger.weights_bytes,
            "hbm_bytes": plan.ledger.hbm_bytes,
            "num_gpus": plan.deployment.num_gpus,
            "engine": engine_pool.to_json() if engine_pool else None,
        }
        if capacity <= 0:
            raise KneecapError(f"the plan leaves no KV capacity ({source})", "see `kneecap plan` with the same flags")
    result = preflight(
        capacity,
        isl=isl,
        osl=osl,
        concurrencies=levels,
        block_size=bs,
        kv_dtype_bytes=kv_bytes,
        gpus_per_replica=gpus_per_replica,
        tp_capacities=tp_caps,
        source=source,
        sequences_at=seqs_at,
        fp8_sequences_at=fp8_seqs_at,
    )
    if notes:
        result = dataclasses.replace(result, notes=result.notes + tuple(notes))
    if as_json:
        doc = result.to_json()
        doc["plan"] = plan_doc
        doc["server"] = server_doc
        sys.stdout.write(json.dumps(doc) + "\n")
        return 0
    from kneecap.plan.render import preflight_table, print_renderables

    print_renderables(preflight_table(result))
    return 0
