"""Synthetic results folders for the report tests: hand-made summaries and records, shaped like
what bench / simulate / run / plan write (DESIGN.md schemas), including hostile server strings."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kneecap.records import RecordWriter, RequestRecord

HOSTILE = "<script>alert(1)</script>"
GiB = 1024**3


def _dist(p50: float, spread: float = 1.0, n: int = 100) -> dict:
    return {"mean": p50 * 1.1, "p50": p50, "p90": p50 * (1 + 0.5 * spread), "p95": p50 * (1 + 0.8 * spread),
            "p99": p50 * (1 + 1.5 * spread), "max": p50 * (1 + 2.5 * spread), "n": n}


def sweep_summary(kind: str = "bench", loads=(1, 2, 4, 8, 16, 32, 64, 128), scale: float = 1.0,
                  axis: str = "concurrency") -> dict:
    levels = []
    for i, c in enumerate(loads):
        tok_s = scale * 2000 * c / (c + 16)  # saturating throughput
        level = {
            axis: c, "level": i, "requests": 100, "completed": 100 - (3 if c == loads[-1] else 0),
            "failed": 3 if c == loads[-1] else 0, "duration_s": 20.0 + c * 0.1,
            "output_tok_s": tok_s, "input_tok_s": tok_s * 2, "total_tok_s": tok_s * 3, "request_s": tok_s / 200,
            "ttft_ms": _dist(40 + 3 * c, 1 + c / 64), "itl_ms": _dist(10 + c / 8), "tpot_ms": _dist(11 + c / 7),
            "e2e_ms": _dist(2000 + 30 * c), "ttft_answer_ms": _dist(45 + 3 * c), "chunk_gap_ms": _dist(12 + c / 8),
            "tokens_per_chunk": {"mean": 1.2, "p50": 1, "p90": 2, "p95": 2, "p99": 3, "max": 4, "n": 1000},
            "errors": {"http_500": 3} if c == loads[-1] else {},
            "goodput": {"requests": 90, "request_s": tok_s / 250, "output_tok_s": tok_s * 0.9, "fraction": 0.9},
            "server_metrics": {"kv_usage_max": min(0.99, c / 100), "running_max": min(c, 96),
                               "waiting_max": max(0, c - 96), "preemptions_delta": 2 if c >= 128 else 0},
            "client": {"workers": 2, "suspect": c == 64, "per_worker": [  # as bench's merge_outcomes writes it
                {"loop_lag_p99_ms": 80.0 if c == 64 else 1.5, "cpu_fraction": 0.97 if c == 64 else 0.3,
                 "started_at": 1.0, "suspect": c == 64,
                 "suspect_reasons": ["event-loop lag p99 80.0 ms > 20 ms"] if c == 64 else []},
                {"loop_lag_p99_ms": 2.0, "cpu_fraction": 0.4, "started_at": 1.0, "suspect": False,
                 "suspect_reasons": []}]},
            "suspect": c == 64,
            "preflight": {"verdict": "fits" if c <= 64 else "tight" if c <= 96 else "exceeds"},
        }
        levels.append(level)
    return {
        "kind": kind, "levels": levels,
        "knee": {axis: loads[-3], "output_tok_s": levels[-3]["output_tok_s"]},
        "stopped": None,
        "manifest": {"command": ["kneecap", kind, "--base-url", "http://127.0.0.1:8000/v1", "--isl", "1000",
                                 "--concurrency", ",".join(str(c) for c in loads)],
                     "kneecap_version": "0.1.0", "python": "3.11.2", "os": "Linux",
                     "packages": {"numpy": "2.0", "aiohttp": "3.9"}, "server": {"version": HOSTILE}},
        "model": "tiny-llama <b>bold</b>",
        "model_executed": kind == "bench", "benchmark_executed": kind == "bench",
        "slo": {"ttft_p99_ms": 500, "itl_p99_ms": 50, "error_rate": 0.01},
        "preflight": {"max_safe_concurrency": 64},
    }


def write_records(path: Path, loads) -> None:
    with RecordWriter(path) as writer:
        for i, c in enumerate(loads):
            for j in range(5):
                t0 = i * 10.0 + j
                chunks = [t0 + 0.05 + 0.01 * k for k in range(20)]
                sizes = [1 + (k % 3 == 0) for k in range(20)]
                writer.write(RequestRecord(request_id=f"{i}-{j}", level=i, concurrency=c, sent_at=t0,
                                           first_token_at=chunks[0], end_at=chunks[-1], chunk_times=chunks,
                                           chunk_tokens=sizes, output_tokens=sum(sizes), prompt_tokens=100))
            if c == loads[-1]:
                writer.write(RequestRecord(request_id=f"{i}-err", level=i, concurrency=c, sent_at=i * 10.0,
                                           end_at=i * 10.0 + 0.2, status="error", error_kind="http_500",
                                           error_message=f"upstream said {HOSTILE} & died"))


def write_sweep(folder: Path, kind: str = "bench", loads=(1, 2, 4, 8, 16, 32, 64, 128), scale: float = 1.0,
                trace: bool = False, axis: str = "concurrency") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.json").write_text(json.dumps(sweep_summary(kind, loads, scale, axis)))
    write_records(folder / "requests.jsonl", loads)
    if trace:
        with open(folder / "trace.jsonl", "w") as fh:
            for step in range(400):
                t = step * 0.05
                used = int(500 + 400 * math.sin(step / 40) ** 2)
                fh.write(json.dumps({"t": t, "batch": {"prefill": step % 3, "decode": 20 + step % 7},
                                     "tokens": 256, "kv_blocks_used": used, "kv_blocks_total": 1000,
                                     "queue_depth": max(0, int(10 * math.sin(step / 25))), "preemptions": 0}) + "\n")
    return folder


def plan_dict() -> dict:
    hbm = 192 * 10**9
    ledger = {"hbm_bytes": hbm, "weights_bytes": 140 * 10**9, "overhead_bytes": 4 * GiB,
              "fragmentation_bytes": int(0.05 * (hbm - 140 * 10**9 - 4 * GiB))}
    ledger["kv_pool_bytes"] = hbm - ledger["weights_bytes"] - ledger["overhead_bytes"] - ledger["fragmentation_bytes"]
    return {
        "model": "gqa-70b", "gpu": "mi300x", "tp": 1,
        "kv_bytes_per_token": 327680, "kv_bytes_per_token_per_gpu": 327680, "ledger": ledger,
        "kv_capacity_tokens": 141728, "max_seqs": {"contiguous": 17, "paged": 69}, "max_concurrency": 69,
        "binding": "hbm",
        "levers": [{"name": "fp8-weights", "kv_pool_bytes": ledger["kv_pool_bytes"] + 66 * GiB, "max_seqs": 175},
                   {"name": "fp8-kv", "kv_pool_bytes": ledger["kv_pool_bytes"], "max_seqs": 138},
                   {"name": "fp8-weights+fp8-kv", "kv_pool_bytes": ledger["kv_pool_bytes"] + 66 * GiB,
                    "max_seqs": 350}],
        "tp_sweep": [{"tp": tp, "kv_heads_per_gpu": 8 // tp, "replicated": False,
                      "kv_pool_bytes": hbm - 140 * 10**9 // tp - 5 * GiB, "max_seqs": 69 * tp} for tp in (1, 2, 4, 8)],
        "context_sweep": [{"context": c, "contiguous": 140000 // c, "paged": 560000 // c} for c in (2048, 4096, 8192)],
    }


def run_summary() -> dict:
    """Shaped like `kneecap run` (kneecap.loadplan.execute) writes it."""
    cells = []
    for cand, worse in (("interactive-small-batch", 1.0), ("throughput-large-batch", 3.0)):
        for rep in range(2):
            for rate in (1.0, 2.0, 4.0):
                ttft_p99 = 100 * rate * worse + 10 * rep
                verdict = "pass" if ttft_p99 <= 500 else "slo_breach"
                tok_s = 300 * rate * (1.3 if worse > 1 else 1) - 5 * rep
                cells.append({"candidate": cand, "class": "short-message", "state": "warm", "load": {"rate": rate},
                              "repetition": rep, "verdict": verdict,
                              "breaches": [] if verdict == "pass" else [f"ttft_p99_ms {ttft_p99:.1f} > 500"],
                              "limit": None,
                              "offered": {"offered_request_s": rate, "completed_request_s": rate * 0.98, "dropped": 1},
                              "little": {"stable": True, "applied": True, "relative_error": 0.03, "consistent": True},
                              "metrics": {"requests": 50, "completed": 50, "failed": 0, "output_tok_s": tok_s,
                                          "ttft_ms": _dist(ttft_p99 / 2.5), "itl_ms": _dist(12),
                                          "tpot_ms": _dist(13 * worse + rep), "e2e_ms": _dist(1500)}})
    plan = plan_dict()
    return {
        "kind": "run", "plan_name": "interactive-vs-throughput", "description": "Two batch sizes on one GPU.",
        "levels": [], "knee": None, "stopped": None, "status": "complete", "cells": cells,
        "capacity": {"interactive-small-batch": {"short-message": {"warm": {
            "dimension": "rate", "region": [1.0, 2.0, 4.0], "capacity": 4.0, "failed": {}, "repetitions": 2,
            "at_capacity": {"ttft_ms": {"p99": 400}, "itl_ms": {"p99": 30}, "e2e_ms": {"p99": 3000},
                            "output_tok_s": 1200}}}},
            "throughput-large-batch": {"short-message": {"warm": {
                "dimension": "rate", "region": [1.0], "capacity": 1.0,
                "failed": {"2.0": ["ttft_p99_ms 600.0 > 500"], "4.0": ["ttft_p99_ms 1200.0 > 500"]},
                "repetitions": 2, "at_capacity": {"ttft_ms": {"p99": 300}, "output_tok_s": 390}}}}},
        "candidates": [{"name": "interactive-small-batch", "target": "simulator", "verdict": "accepted", "gate": None,
                        "reason": "met every budget", "peak_output_tok_s": 1200.0,
                        "cost": {"short-message": {"basis": "self-hosted", "usd_per_gpu_hour": 2.5, "num_gpus": 1,
                                                   "output_tok_s_at_capacity": 1200.0,
                                                   "usd_per_million_output_tokens": 2.5 / (1200 * 3600) * 1e6}}},
                       {"name": "throughput-large-batch", "target": "simulator", "verdict": "rejected", "gate": "slo",
                        "reason": f"p99 TTFT breached during bursts {HOSTILE}", "peak_output_tok_s": 1560.0,
                        "cost": {}}],
        "preferred": "interactive-small-batch",
        "handoff": "handoff",
        "identities": {"interactive-small-batch": {"kind": "simulator", "plan": plan},
                       "throughput-large-batch": {"kind": "simulator", "plan": plan}},
        "model_executed": False, "benchmark_executed": False,
        "manifest": {"command": ["kneecap", "run", "examples/interactive.yaml", "--out", "out"]},
        "worksheet": {"classes": {"short-message": {"input": {"kind": "lognormal", "mean": 400.0, "std": 200.0,
                                                              "min": 1, "max": 4000},
                                                    "output": {"kind": "uniform", "low": 100, "high": 300},
                                                    "weight": 3.0, "shared_prefix_tokens": 0}},
                      "budgets": {"short-message": {"ttft_p99_ms": 500.0, "itl_p99_ms": 60.0, "error_rate": 0.01}},
                      "ledger": {"interactive-small-batch": plan["ledger"], "throughput-large-batch": plan["ledger"]},
                      "load": {"dimension": "rate", "steps": [1.0, 2.0, 4.0]}, "repetitions": 2, "seed": 11},
    }


@pytest.fixture
def bench_dir(tmp_path) -> Path:
    return write_sweep(tmp_path / "bench-run", "bench")


@pytest.fixture
def sim_dir(tmp_path) -> Path:
    return write_sweep(tmp_path / "sim-run", "simulate", scale=1.3, trace=True)


@pytest.fixture(scope="session")
def real_worked_plan(tmp_path_factory) -> Path:
    """The README's worked example, `kneecap plan ... --json` written to a file."""
    path = tmp_path_factory.mktemp("real") / "worked-plan.json"
    path.write_text(_cli("plan", "--preset", "gqa-70b", "--gpu", "mi300x", "--context", "8192", "--mean-context", "2050",
                         "--compute-batch-cap", "128", "--json").stdout)
    return path


@pytest.fixture
def plan_file(tmp_path, real_worked_plan) -> Path:
    """A copy of a real `kneecap plan --json` document (the README's worked example)."""
    path = tmp_path / "plan.json"
    path.write_text(real_worked_plan.read_text())
    return path


@pytest.fixture
def run_dir(tmp_path) -> Path:
    folder = tmp_path / "run-out"
    folder.mkdir()
    (folder / "summary.json").write_text(json.dumps(run_summary()))
    (folder / "records").mkdir()
    write_records(folder / "records" / "cell-0.jsonl", (1, 2))
    return folder


@pytest.fixture
def make_sweep(tmp_path):
    """make_sweep(name, kind=..., loads=..., scale=..., trace=..., axis=...) -> a sweep folder."""
    return lambda name, **kwargs: write_sweep(tmp_path / name, **kwargs)


@pytest.fixture
def hostile() -> str:
    return HOSTILE


# -- real runs: the report tests' inputs made by the commands users run (session-scoped, small sweeps) --------

REAL_SIM_ARGS = ("simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--isl", "512", "--osl", "64",
                 "--concurrency", "1,16,64", "--requests", "64", "--slo", "ttft_p99_ms=200,itl_p99_ms=15", "--trace")
REAL_PLAN_ARGS = ("plan", "--preset", "llama-3.1-70b", "--gpu", "h100-sxm", "--tp", "8", "--weight-dtype", "fp8")
# an ITL budget no server meets (a microsecond): every bench level breaches it, whatever the machine's load
REAL_BENCH_SLO = "ttft_p99_ms=600000,itl_p99_ms=0.001"


def _cli(*args: str, timeout: float = 300):
    from clitools import run_cli

    r = run_cli(*args, timeout=timeout)
    assert r.code in (0, 1), (args, r.stderr[-2000:])
    return r


@pytest.fixture(scope="session")
def real_sim(tmp_path_factory):
    """`kneecap simulate` with an SLO that C=1 and C=16 meet and C=64 breaches (virtual time: deterministic)."""
    out = tmp_path_factory.mktemp("real") / "sim"
    r = _cli(*REAL_SIM_ARGS, "--out", str(out))
    return out, r.stdout


@pytest.fixture(scope="session")
def real_plan(tmp_path_factory) -> Path:
    """`kneecap plan --json` written to a file, as a user saves it for `kneecap report`."""
    path = tmp_path_factory.mktemp("real") / "plan.json"
    path.write_text(_cli(*REAL_PLAN_ARGS, "--json").stdout)
    return path


@pytest.fixture(scope="session")
def simulated_server():
    """`kneecap serve` on a free loopback port, stopped by its PID at the end of the session."""
    from kneecap.cli.demo import start_server, stop_server

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm"])
    try:
        yield url
    finally:
        stop_server(proc)


@pytest.fixture(scope="session")
def real_bench(tmp_path_factory, simulated_server):
    """`kneecap bench` against `kneecap serve`: (results folder, terminal output)."""
    out = tmp_path_factory.mktemp("real") / "bench"
    r = _cli("bench", "--base-url", simulated_server, "--isl", "256", "--osl", "16", "--concurrency", "1,4",
             "--requests", "8", "--slo", REAL_BENCH_SLO, "--out", str(out))
    return out, r.stdout


@pytest.fixture(scope="session")
def real_run(tmp_path_factory) -> Path:
    """`kneecap run` of the shipped quick example (simulated candidates, two repetitions, failing cells)."""
    out = tmp_path_factory.mktemp("real") / "run"
    _cli("run", str(Path(__file__).resolve().parents[2] / "examples" / "quick.yaml"), "--out", str(out), "--quiet")
    return out
