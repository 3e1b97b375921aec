"""`kneecap demo`: the README's main job in one command — start `kneecap serve` for a default deployment on
a free loopback port (a subprocess), sweep it with `kneecap bench` (a subprocess, the real client), print
the table and the knee, stop the server by its PID. No GPU, no download.

Thin: process handling only. The default workload (2048 tokens in, 32 out, C = 1,4,16,64, 4 s per level)
is prefill-heavy on purpose, so the simulated 8B model on one H100 saturates inside the sweep
(compute-bound prefill) and the knee shows in about half a minute.
"""

from __future__ import annotations

from typing import Optional

import typer

from kneecap.cli.app import app, results_folder, stdout_console
from kneecap.errors import KneecapError

SERVER_START_TIMEOUT_S = 60.0
SERVER_STOP_TIMEOUT_S = 10.0


def start_server(args: list[str], timeout_s: float = SERVER_START_TIMEOUT_S):
    """Start `kneecap serve ARGS --port 0` and return (Popen, base_url) once its ready line names the port."""
    import os
    import selectors
    import subprocess
    import sys
    import time

    from kneecap.cli.serve import READY_PREFIX

    proc = subprocess.Popen([sys.executable, "-m", "kneecap", "serve", *args, "--host", "127.0.0.1", "--port", "0"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ))
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ)
    deadline = time.monotonic() + timeout_s
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = proc.stdout.readline()
            if not line:  # the server exited before it was ready
                err = proc.stderr.read().strip().splitlines()
                proc.wait()
                raise KneecapError(f"kneecap serve exited before listening: {err[-1] if err else 'no message'}",
                                   "run the same flags with `kneecap serve` to see the problem")
            if line.startswith(READY_PREFIX):
                url = line[len(READY_PREFIX):].split()[0]
                return proc, url
    finally:
        sel.close()
    stop_server(proc)
    raise KneecapError(f"kneecap serve did not listen within {timeout_s:.0f} s", "retry; the machine may be busy")


def stop_server(proc) -> int | None:
    """SIGTERM the server by its PID, then SIGKILL if it has not left in SERVER_STOP_TIMEOUT_S."""
    import subprocess

    if proc.poll() is None:
        proc.terminate()
        try:
            proc.wait(timeout=SERVER_STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    for stream in (proc.stdout, proc.stderr):
        if stream:
            stream.close()
    return proc.returncode


@app.command("demo")
def demo(
    preset: str = typer.Option("llama-3.1-8b", "--preset", help="Model preset the simulated server runs"),
    gpu: str = typer.Option("h100-sxm", "--gpu", help="GPU the simulated server runs on"),
    tp: int = typer.Option(1, "--tp", help="Tensor-parallel degree"),
    isl: int = typer.Option(2048, "--isl", help="Input tokens per request"),
    osl: int = typer.Option(32, "--osl", help="Output tokens per request"),
    concurrency: str = typer.Option("1,4,16,64", "--concurrency", help="Closed-loop levels"),
    duration: float = typer.Option(4.0, "--duration", help="Seconds per level"),
    out: Optional[str] = typer.Option(None, "--out", help="Results folder (default ./kneecap-results/demo-<UTC time>)"),
    json_out: bool = typer.Option(False, "--json", help="Print the bench summary.json on stdout, nothing else"),
) -> int:
    """Start a simulated engine on a free local port, sweep it with `kneecap bench`, print the table and the knee."""
    import subprocess
    import sys

    if duration <= 0:
        raise KneecapError(f"--duration must be > 0 s, got {duration}", "pass e.g. --duration 5")
    out_dir = results_folder(out, "demo")
    proc, url = start_server(["--preset", preset, "--gpu", gpu, "--tp", str(tp)])
    try:
        if not json_out:
            print(f"simulated server: {url} (PID {proc.pid}) — {preset} on {tp}x {gpu}; sweeping C={concurrency}, "
                  f"{isl} in / {osl} out, {duration:g} s per level", flush=True)
        cmd = [sys.executable, "-m", "kneecap", "bench", "--base-url", url, "--isl", str(isl), "--osl", str(osl),
               "--concurrency", concurrency, "--duration", str(duration), "--out", str(out_dir), "--json"]
        bench = subprocess.run(cmd, capture_output=True, text=True)
    finally:
        stop_server(proc)
    if bench.returncode not in (0, 1) or not bench.stdout.strip():
        last = (bench.stderr.strip().splitlines() or ["no message"])[-1]
        raise KneecapError(f"kneecap bench failed against the simulated server: {last}", "see the message above")
    if json_out:
        sys.stdout.write(bench.stdout)
        return 0
    import orjson

    from kneecap.sweep.render import summary_table

    summary = orjson.loads(bench.stdout)
    console = stdout_console(highlight=False)
    console.print(summary_table(summary))
    knee = summary.get("knee")
    if knee:
        console.print(f"knee: C={knee.get('concurrency')} at {knee.get('output_tok_s', 0):,.0f} output tok/s "
                      f"({knee.get('rule', knee.get('kind', ''))})", markup=False)
    else:
        console.print("knee: none inside this sweep (throughput still rising at the last level)", markup=False)
    console.print(f"results: {out_dir} (server stopped)", markup=False)
    return 0
