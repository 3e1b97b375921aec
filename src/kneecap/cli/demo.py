"""`kneecap demo`: the README's main job in one command — start `kneecap serve` for a default deployment on
a free loopback port (a process of its own, kneecap.cli.serve_process), sweep it with bench's own sweep (the real
HTTP client, in this process), print the table, the knee and what to make of any level that is not a clean
measurement, stop the server by its PID. No GPU, no download.

The default workload (2048 tokens in, 32 out) is prefill-heavy on purpose, so the simulated 8B model on one H100
saturates inside the sweep (compute-bound prefill) and the knee shows within a minute or two. The levels are sized
to the machine: the server and the client share its cores, so the highest level is STREAMS_PER_CORE streams per
core (1, 4, 16, 64 on 2 cores), and each level runs until its steady state shows (bench's --until-stable, at most
--duration seconds).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Optional

import typer

from kneecap.cli.app import app, results_folder, stdout_console
from kneecap.cli.serve_process import start_server, stop_server
from kneecap.errors import KneecapError

STREAMS_PER_CORE = 32  # the highest default level: streams per CPU core of the machine the demo runs on
STABLE_TOLERANCE = 0.10  # a level ends once its p99 TTFT and ITL move < 10% over 3 windows, and it is stable
STABLE_WINDOW_S = 2.0


@app.command("demo")
def demo(
    preset: str = typer.Option("llama-3.1-8b", "--preset", help="Model preset the simulated server runs"),
    gpu: str = typer.Option("h100-sxm", "--gpu", help="GPU the simulated server runs on"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree"),
    isl: int = typer.Option(2048, "--isl", help="Input tokens per request"),
    osl: int = typer.Option(32, "--osl", help="Output tokens per request"),
    concurrency: Optional[str] = typer.Option(
        None,
        "--concurrency",
        help=f"Closed-loop levels (default: 1, 4, 16, ... up to {STREAMS_PER_CORE} streams per CPU core of this machine)",
    ),
    duration: float = typer.Option(
        30.0, "--duration", help="The longest a level runs, in seconds; it ends sooner once its steady state shows"
    ),
    out: Optional[str] = typer.Option(None, "--out", help="Results folder (default ./kneecap-results/demo-<UTC time>)"),
    json_out: bool = typer.Option(False, "--json", help="Print the bench summary.json on stdout, nothing else"),
) -> int:
    """Start a simulated engine on a free local port, sweep it with bench's client, print the table and the knee."""
    import os
    import sys

    from kneecap.results import current_argv
    from kneecap.sweep.options import BenchOptions
    from kneecap.sweep.progress import make_progress
    from kneecap.sweep.session import run_bench
    from kneecap.workload import concurrency_levels

    if duration <= 0:
        raise KneecapError(f"--duration must be > 0 s, got {duration}", "pass e.g. --duration 30")
    cores = os.cpu_count() or 1
    levels = tuple(concurrency_levels(concurrency)) if concurrency else auto_levels(cores)
    out_dir = results_folder(out, "demo")
    opts = BenchOptions(
        base_url="http://127.0.0.1:1",
        isl=isl,
        osl=osl,
        concurrency=levels,
        duration_s=duration,
        until_stable=STABLE_TOLERANCE,
        stable_window_s=STABLE_WINDOW_S,
    )
    proc, url = start_server(["--preset", preset, "--gpu", gpu, "--tp", str(tp)])
    progress = make_progress(quiet=json_out, json_out=False)
    try:
        if not json_out:
            print(
                f"simulated server: {url} (PID {proc.pid}) — {preset} on {tp}x {gpu}; sweeping C="
                f"{','.join(map(str, levels))} ({cores} CPU cores here), {isl} in / {osl} out, each level until "
                f"steady (at most {duration:g} s)",
                flush=True,
            )
        opts = dataclasses.replace(opts, base_url=url)
        run = run_bench(opts, api_key=None, out_dir=out_dir, resume=False, progress=progress, argv=current_argv())
    finally:
        progress.close()
        stop_server(proc)
    summary = run.summary
    if json_out:
        import orjson

        sys.stdout.write(orjson.dumps(summary, option=orjson.OPT_SERIALIZE_NUMPY).decode() + "\n")
        return 0
    from kneecap.sweep.render import summary_table

    console = stdout_console(highlight=False)
    console.print(summary_table(summary))
    knee = summary.get("knee")
    if knee:
        console.print(
            f"knee: C={knee.get('concurrency')} at {knee.get('output_tok_s', 0):,.0f} output tok/s "
            f"({knee.get('rule', knee.get('kind', ''))})",
            markup=False,
        )
    else:
        console.print("knee: none inside this sweep (throughput still rising at the last level)", markup=False)
    for line in level_advice(summary.get("levels") or [], cores):
        console.print(line, markup=False, soft_wrap=True)
    console.print(f"results: {out_dir} (server stopped)", markup=False)
    return 0


def auto_levels(cores: int) -> tuple[int, ...]:
    """1, 4, 16, ... up to STREAMS_PER_CORE x cores (the server and the client share the machine's cores)."""
    top = STREAMS_PER_CORE * max(1, cores)
    levels, c = [], 1
    while c <= top:
        levels.append(c)
        c *= 4
    return tuple(levels)


def level_advice(levels: list[dict], cores: int) -> list[str]:
    """A line for each level that is not a clean measurement: why, and what to do about it."""
    from kneecap.metrics.summary_model import LevelSummary
    from kneecap.report.levels import suspect_reason

    out = []
    for lv in levels:
        c = lv.get("concurrency")
        if lv.get("suspect"):
            load = os.getloadavg()[0] if hasattr(os, "getloadavg") else None
            busy = f"; the machine's load average is {load:.1f} on {cores} cores" if load is not None else ""
            out.append(
                f"C={c} is client-suspect: {suspect_reason(LevelSummary.model_validate(lv))}{busy}. The simulated server and this client "
                f"share the machine, so its numbers may be the machine's, not the server's: close other "
                f"programs and run again, or leave this level out (--concurrency)"
            )
        verdict = (lv.get("stability") or {}).get("verdict")
        if verdict == "transient":
            out.append(
                f"C={c} did not reach steady state within --duration: run it longer (e.g. --duration "
                f"{int(2 * (lv.get('duration_s') or 30))}) before reading its latencies as the load's"
            )
        elif verdict == "over_capacity":
            out.append(f"C={c} is over capacity: the queue grew through the level")
    return out
