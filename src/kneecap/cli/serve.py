"""`kneecap serve`: plan flags -> SimDeployment -> the simulated engine behind an OpenAI-compatible HTTP server.

Thin: builds the target as `kneecap simulate` does, starts aiohttp on --host/--port (0 picks a free
port), prints one line `kneecap serve: listening on http://HOST:PORT ...` on stdout once the socket
is bound (scripts and `kneecap demo` read the port from it), and runs until SIGINT/SIGTERM.
"""

from __future__ import annotations

import os

from typing import Optional

import typer

from kneecap.cli.app import app
from kneecap.cli.spec_flags import SpecAcceptanceOpt, SpecMethodOpt, SpecTokensOpt, speculative
from kneecap.cli.plan import (
    ENGINE_DEFAULTS,
    SIM_FLAGS,
    SIM_OPTIONS,
    EngineDefaultsOpt,
    MaxBatchedOpt,
    MaxSeqsOpt,
    deployment_flags,
)
from kneecap.errors import KneecapError

READY_PREFIX = "kneecap serve: listening on "


@app.command("serve")
@deployment_flags(SIM_FLAGS, SIM_OPTIONS)
def serve(
    request=None,
    engine_defaults: EngineDefaultsOpt = ENGINE_DEFAULTS,
    max_num_seqs: MaxSeqsOpt = None,
    max_num_batched_tokens: MaxBatchedOpt = None,
    calibration: Optional[str] = typer.Option(
        None, "--calibration", help="Step-time constants from `kneecap calibrate --out FILE` (or k=v pairs)"
    ),
    served_model_name: Optional[str] = typer.Option(
        None, "--served-model-name", help="Model id in /v1/models (default: the model's name)"
    ),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind"),
    port: int = typer.Option(8000, "--port", help="Port to bind (0: any free port; the ready line names it)"),
    time_scale: float = typer.Option(
        1.0, "--time-scale", help="Wall seconds per simulated second: 1 real time, 2 twice as slow, 0.5 twice as fast"
    ),
    seed: int = typer.Option(
        0,
        "--seed",
        help="Seed of the engine's speculative-decoding acceptance draws (the engine draws no other random numbers)",
    ),
    replicas: int = typer.Option(
        1,
        "--replicas",
        help="Replicas of the deployment behind one endpoint, each with its own engine and KV pool; /replicas/I/metrics gives each one's metrics",
    ),
    router: str = typer.Option(
        "round-robin",
        "--router",
        help="With --replicas: round-robin, least-loaded, or prefix (llm-d's prefix-cache-aware endpoint picker)",
    ),
    spec_method: SpecMethodOpt = None,
    spec_tokens: SpecTokensOpt = None,
    spec_acceptance: SpecAcceptanceOpt = None,
) -> int:
    """An OpenAI-compatible simulated engine on a local port, in real time (no GPU, no model download)."""
    import asyncio
    import errno
    import signal
    import socket
    import sys

    from kneecap.sim.setup import simulated_deployment
    from kneecap.sim.step_params import parse_step_params

    if not (0 <= port <= 65535):
        raise KneecapError(f"--port must be 0..65535, got {port}", "pass e.g. --port 8000 (or 0 for any free port)")
    from kneecap.sim.fleet import ROUTERS

    if replicas < 1:
        raise KneecapError(f"--replicas must be >= 1, got {replicas}", "pass e.g. --replicas 4")
    if router not in ROUTERS:
        raise KneecapError(f"unknown --router {router!r}", f"pass one of {', '.join(ROUTERS)}")
    if not (time_scale > 0):
        raise KneecapError(f"--time-scale must be > 0, got {time_scale}", "pass e.g. --time-scale 1")
    target = simulated_deployment(
        request,
        defaults=engine_defaults,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=max_num_batched_tokens,
        step_params=parse_step_params(calibration, "--calibration"),
        speculative=speculative(spec_method, spec_tokens, spec_acceptance),
        spec_seed=seed,
    )

    from aiohttp import web

    from kneecap.serve.app import build_app

    try:
        import uvloop  # optional: a faster event loop when installed
    except ImportError:  # pragma: no cover
        uvloop = None

    async def main() -> None:
        application = build_app(
            target, time_scale=time_scale, served_model_name=served_model_name, replicas=replicas, router=router
        )
        runner = web.AppRunner(application, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, host, port, backlog=2048, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            # a host name that does not resolve, or an address this machine does not have: the host is wrong
            bad_host = isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL
            raise KneecapError(
                f"cannot bind {host}:{port}: {exc.strerror or exc}",
                "pass --host an address of this machine, e.g. 127.0.0.1 (this machine only) or 0.0.0.0 (every interface)"
                if bad_host
                else "pick another --port (or --port 0 for any free one)",
            ) from None
        bound_host, bound_port = runner.addresses[0][:2]
        shown = f"[{bound_host}]" if ":" in bound_host else bound_host
        plan = target.plan
        print(
            f"{READY_PREFIX}http://{shown}:{bound_port} (PID {os.getpid()}) — {target.model_name} on {target.deployment.num_gpus}x "
            f"{target.deployment.gpu.name}, {plan.num_kv_blocks} KV blocks of {plan.block_size} tokens, "
            f"max_num_seqs {target.config.max_num_seqs}, time scale {time_scale:g}"
            + (f", {replicas} replicas behind a {router} router" if replicas > 1 else "")
            + " (simulated; no model executed)",
            flush=True,
        )
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        try:
            await stop.wait()
        finally:
            await runner.cleanup()

    if uvloop is not None:
        uvloop.run(main())
    else:  # pragma: no cover
        asyncio.run(main())
    print("kneecap serve: stopped", file=sys.stderr)
    return 0
