"""The weights vLLM logs ("Model loading took X GiB") against kneecap's engine mode, before and after it replays vLLM's
tensors through PyTorch's caching allocator (kneecap.plan.vllm_load), for every vLLM start-up log in
tests/plan/data/engine_startup_logs.json that prints the figure:

    PYTHONPATH=src python bench/vllm_load_allocation.py

Columns: the logged figure; kneecap's tensor sum (weights + RoPE caches: the engine model before the replay) and the
replay (after); then engine mode with the log's activation peak and non-torch memory (as the start-up-log test runs
it), its pool and token line before and after. "Before" is computed, not remembered: the pool plus what the replay
adds (vLLM subtracts the load from its budget, so the pool before is the pool after + the replay's extra bytes), its
tokens from `kneecap plan --kv-pool-gib` on that pool (the same block arithmetic). docs/engine-model.md carries the
table this prints.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).parents[1]
GiB = 2**30
RECORDS = json.loads((ROOT / "tests" / "plan" / "data" / "engine_startup_logs.json").read_text())["records"]


def plan(args: list[str]) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "kneecap", "plan", *args, "--engine", "vllm", "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        check=True,
    )
    return json.loads(out.stdout)


def row(rec: dict) -> dict:
    inputs = rec["inputs_from_log"]
    measured = ["--activation-gib", str(inputs["activation_gib"]), "--non-torch-gib", str(inputs["non_torch_gib"])]
    eng = plan([*rec["plan"], *measured])["engine"]
    extra = eng["load_extra_bytes"]
    before_pool = eng["kv_pool_bytes"] + extra
    r = {
        "id": rec["id"],
        "release": rec["release"],
        "logged_weights": rec["logged"]["weights_gib"],
        "sum": (eng["weights_bytes"] + eng["rope_cache_bytes"]) / GiB,
        "replay": (eng["weights_bytes"] + eng["rope_cache_bytes"] + extra) / GiB,
        "covered": eng["load_note"].startswith("vLLM's tensors"),
        "note": eng["load_note"],
        "logged_pool": rec["logged"]["available_kv_gib"],
        "pool_before": before_pool / GiB,
        "pool_after": eng["kv_pool_bytes"] / GiB,
    }
    if "kv_cache_tokens" in rec["logged"]:
        r["logged_tokens"] = rec["logged"]["kv_cache_tokens"]
        r["tokens_after"] = eng["log_kv_cache_tokens"]
        given = plan([*rec["plan"], "--kv-pool-gib", repr(before_pool / GiB)])["engine"]
        r["tokens_before"] = given["log_kv_cache_tokens"] if extra else eng["log_kv_cache_tokens"]
    return r


def err(x: float, ref: float) -> float:
    return 100 * (x - ref) / ref


def table(rows: list[dict]) -> str:
    out = [
        "| record | release | logged 'Model loading took' | tensor sum (before) | replayed (after) | logged pool | "
        "pool before | pool after | logged tokens | tokens before | tokens after |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        tok = "| not quoted | — | — |"
        if "logged_tokens" in r:
            lt = r["logged_tokens"]
            tok = (
                f"| {lt:,} | {r['tokens_before']:,} ({err(r['tokens_before'], lt):+.2f}%) | "
                f"{r['tokens_after']:,} ({err(r['tokens_after'], lt):+.2f}%) |"
            )
        after = f"{r['replay']:.4f} GiB" if r["covered"] else "not replayed"
        lp = r["logged_pool"]
        out.append(
            f"| {r['id']} | {r['release']} | {r['logged_weights']} GiB | {r['sum']:.4f} GiB | {after} | {lp:.2f} GiB | "
            f"{r['pool_before']:.3f} GiB ({err(r['pool_before'], lp):+.2f}%) | "
            f"{r['pool_after']:.3f} GiB ({err(r['pool_after'], lp):+.2f}%) {tok}"
        )
    out.append("")
    dense = rows
    for label, key in (("before", "before"), ("after", "after")):
        pools = [abs(err(r[f"pool_{key}"], r["logged_pool"])) for r in dense]
        toks = [abs(err(r[f"tokens_{key}"], r["logged_tokens"])) for r in dense if "logged_tokens" in r]
        out.append(
            f"{label}: pool |error| median {statistics.median(pools):.2f}%, worst {max(pools):.2f}% ({len(pools)} "
            f"records); tokens median {statistics.median(toks):.2f}%, worst {max(toks):.2f}% ({len(toks)})"
        )
    rounding = [r for r in rows if r["covered"]]
    inside = [r for r in rounding if abs(r["replay"] - r["logged_weights"]) <= 0.005 + 1e-9]
    out.append(f"replayed loads within the logged figure's rounding: {len(inside)} of {len(rounding)}")
    return "\n".join(out)


if __name__ == "__main__":
    recs = [r for r in RECORDS if r["server"] == "vllm" and "weights_gib" in r["logged"] and r.get("inputs_from_log")]
    print(table([row(r) for r in recs]))
