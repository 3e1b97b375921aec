"""Run one load-generating client, pinned to a core, at one configuration, and bring back its
own per-request stamps: kneecap (`kneecap bench`), vLLM (`bench/peer_vllm.py`), NVIDIA AIPerf.

Each runner returns {completed, duration_s, output_tokens, cpu_s, cpu_source, ttft_ms, itl_ms,
warmup_requests, clock, per_request:[{sha256, ok, sent_s, chunk_times_s, chunk_tokens}]} or
{error}. Peers live in bench/.peers (bench/install_peers.sh), never in kneecap's .venv.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from pairing import per_token_gaps_ms

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEER_PY = HERE / ".peers" / "venv" / "bin" / "python"


def _tree_cpu_s(ps) -> float:
    """User + system CPU seconds of a psutil.Process and its live descendants."""
    import psutil

    total = 0.0
    for p in [ps, *ps.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def run_pinned(
    cmd: list[str], cpu: int, timeout_s: float, env: dict | None = None, cpu_samples: list | None = None
) -> tuple[int, float, str]:
    """Run `cmd` on `cpu`; return (exit code, its CPU seconds from wait4, stderr tail).
    With `cpu_samples`, also append (wall time s, process-tree CPU s) every 0.1 s."""
    import psutil

    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(
            ["taskset", "-c", str(cpu), *cmd],
            stdout=subprocess.DEVNULL,
            stderr=err,
            env={**os.environ, **(env or {})},
            cwd=ROOT,
        )
        ps = psutil.Process(proc.pid)
        deadline = time.monotonic() + timeout_s
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.kill(proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            if cpu_samples is not None:
                try:
                    cpu_samples.append((time.time(), _tree_cpu_s(ps)))
                except psutil.NoSuchProcess:
                    pass
            time.sleep(0.1 if cpu_samples is not None else 0.05)
        proc.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        tail = err.read().decode(errors="replace")[-1500:]
    return proc.returncode, usage.ru_utime + usage.ru_stime, tail


def cpu_between(samples: list[tuple[float, float]], start: float, end: float) -> float | None:
    """CPU seconds spent between two wall times, interpolated from (wall s, cumulative CPU s) samples."""
    if len(samples) < 2 or end <= start:
        return None

    def at(t: float) -> float:
        if t <= samples[0][0]:
            return samples[0][1]
        for (t0, c0), (t1, c1) in zip(samples, samples[1:]):
            if t0 <= t <= t1:
                return c0 + (c1 - c0) * ((t - t0) / (t1 - t0) if t1 > t0 else 0.0)
        return samples[-1][1]

    return at(end) - at(start)


def level_cpu_s(client: dict) -> float | None:
    """The client CPU seconds a kneecap level reports about itself (summed over its worker processes)."""
    workers = client.get("per_worker")
    if isinstance(workers, list) and workers and all(isinstance(w.get("cpu_s"), (int, float)) for w in workers):
        return float(sum(w["cpu_s"] for w in workers))
    value = client.get("cpu_s")
    return float(value) if isinstance(value, (int, float)) else None


# `sc` below is compare_clients.Scenario: concurrency, requests, isl, osl.


def run_kneecap(url: str, sc, cpu: int, work: Path) -> dict:
    out_dir = work / "kneecap-out"
    cmd = [
        sys.executable,
        "-m",
        "kneecap",
        "bench",
        "--base-url",
        url,
        "--model",
        "fast-scripted",
        "--isl",
        str(sc.isl),
        "--osl",
        str(sc.osl),
        "--concurrency",
        str(sc.concurrency),
        "--requests",
        str(sc.requests),
        "--warmup",
        "0",
        # reuse connections like the peers, without the keep-alive probe's two requests in the server's log
        "--keepalive",
        "--out",
        str(out_dir),
        "--quiet",
        "--json",
    ]
    code, cpu_total_s, err = run_pinned(cmd, cpu, timeout_s=600)
    if code != 0:
        return {"error": f"kneecap bench exited {code}: {err.strip().splitlines()[-1:] if err.strip() else ''}"}
    from kneecap.records import read_records

    summary = json.loads((out_dir / "summary.json").read_text())
    epoch = json.loads((out_dir / "manifest.json").read_text()).get("clock_epoch_s")
    level = summary["levels"][0]
    records = [r for r in read_records(out_dir / "requests.jsonl") if not r.warmup]
    ok = [r for r in records if r.ok]
    cpu_s = level_cpu_s(level.get("client") or {})
    ttft = [
        (r.first_token_at - r.sent_at) * 1000.0 for r in ok if r.first_token_at is not None and r.sent_at is not None
    ]
    itl = [g for r in ok for g in per_token_gaps_ms(r.chunk_times, r.chunk_tokens)]
    shift = epoch if isinstance(epoch, (int, float)) else 0.0  # records are seconds since the run's epoch
    per_request = [
        {
            "sha256": r.prompt_hash,
            "ok": r.ok and bool(r.chunk_times),
            "sent_s": r.sent_at + shift,
            "chunk_times_s": [t + shift for t in r.chunk_times],
            "chunk_tokens": r.chunk_tokens,
        }
        for r in records
    ]
    return {
        "completed": len(ok),
        "duration_s": level["duration_s"],
        "output_tokens": sum((r.output_tokens or sum(r.chunk_tokens)) for r in ok),
        "cpu_s": cpu_s if cpu_s is not None else cpu_total_s,
        "cpu_source": "level" if cpu_s is not None else "whole process (includes start-up)",
        "ttft_ms": ttft,
        "itl_ms": itl,
        "warmup_requests": 0,
        # manifest.json states the perf_counter() epoch (CLOCK_MONOTONIC, the server log's clock)
        "clock": "monotonic" if isinstance(epoch, (int, float)) else "relative",
        "per_request": per_request,
    }


def run_vllm(url: str, sc, cpu: int, work: Path) -> dict:
    if not PEER_PY.exists():
        return {"error": "bench/.peers/venv missing: run bench/install_peers.sh"}
    out = work / "vllm.json"
    cmd = [
        str(PEER_PY),
        str(HERE / "peer_vllm.py"),
        "--base-url",
        url,
        "--concurrency",
        str(sc.concurrency),
        "--requests",
        str(sc.requests),
        "--isl",
        str(sc.isl),
        "--osl",
        str(sc.osl),
        "--out",
        str(out),
    ]
    code, _, err = run_pinned(cmd, cpu, timeout_s=600)
    if code != 0 or not out.exists():
        return {"error": f"peer_vllm.py exited {code}: {err.strip()[-300:]}"}
    result = json.loads(out.read_text())
    result["cpu_source"] = "benchmark() only"
    return result


PEER_TOKENIZER = HERE / ".peers" / "tokenizer"


def run_aiperf(url: str, sc, cpu: int, work: Path) -> dict:
    """NVIDIA AIPerf (`aiperf profile`), streaming completions, server token counts. It runs several
    processes (all pinned to the client core); its CPU is the process tree's, sampled, over the
    window from its first request start to its last request end (its start-up is excluded)."""
    exe = HERE / ".peers" / "venv" / "bin" / "aiperf"
    if not exe.exists() or not (PEER_TOKENIZER / "tokenizer.json").exists():
        return {"error": "aiperf or its local tokenizer missing: run bench/install_peers.sh"}
    art = work / "aiperf"
    cmd = [
        str(exe),
        "profile",
        "--model",
        "fast-scripted",
        "--url",
        url,
        "--endpoint-type",
        "completions",
        "--streaming",
        "--concurrency",
        str(sc.concurrency),
        "--request-count",
        str(sc.requests),
        "--synthetic-input-tokens-mean",
        str(sc.isl),
        "--synthetic-input-tokens-stddev",
        "0",
        "--output-tokens-mean",
        str(sc.osl),
        "--output-tokens-stddev",
        "0",
        "--extra-inputs",
        "ignore_eos:true",
        "--tokenizer",
        str(PEER_TOKENIZER),
        "--use-server-token-count",
        "--artifact-dir",
        str(art),
        "--ui-type",
        "none",
    ]
    samples: list[tuple[float, float]] = []
    code, cpu_total_s, err = run_pinned(cmd, cpu, timeout_s=900, cpu_samples=samples)
    records_path = art / "profile_export.jsonl"
    if code != 0 or not records_path.exists():
        return {"error": f"aiperf exited {code}: {err.strip()[-300:]}"}
    import hashlib

    prompts = {}
    for entry in json.loads((art / "inputs.json").read_text())["data"]:
        payload = entry["payloads"][0]
        prompts[entry["session_id"]] = payload.get("prompt")
    per_request, ttft, itl = [], [], []
    starts, ends, output_tokens = [], [], 0
    for line in records_path.read_text().splitlines():
        rec = json.loads(line)
        meta, metrics = rec["metadata"], rec.get("metrics") or {}
        if meta.get("benchmark_phase") != "profiling":
            continue
        prompt = prompts.get(meta.get("conversation_id"))
        sha = hashlib.sha256(prompt.encode("utf-8")).hexdigest() if isinstance(prompt, str) else None
        first = (metrics.get("time_to_first_token") or {}).get("value")
        if rec.get("error") or first is None:
            per_request.append({"sha256": sha, "ok": False})
            continue
        sent_s = meta["request_start_ns"] / 1e9
        starts.append(sent_s)
        ends.append(meta["request_end_ns"] / 1e9)
        times = [sent_s + first / 1000.0]
        for gap in (metrics.get("inter_chunk_latency") or {}).get("value") or []:
            times.append(times[-1] + gap / 1000.0)
        per_request.append(
            {"sha256": sha, "ok": True, "sent_s": sent_s, "chunk_times_s": times, "chunk_tokens": [1] * len(times)}
        )
        ttft.append(first)
        itl.extend(per_token_gaps_ms(times, [1] * len(times)))
        output_tokens += int(
            (metrics.get("usage_completion_tokens") or metrics.get("output_token_count") or {}).get("value") or 0
        )
    if not starts:
        return {"error": "aiperf recorded no successful request"}
    window_cpu = cpu_between(samples, min(starts), max(ends))
    return {
        "completed": len(ttft),
        "duration_s": max(ends) - min(starts),
        "output_tokens": output_tokens,
        "cpu_s": window_cpu if window_cpu else cpu_total_s,
        "cpu_source": "process tree, sampled over its requests" if window_cpu else "whole run (includes start-up)",
        "ttft_ms": ttft,
        "itl_ms": itl,
        "warmup_requests": 0,
        "clock": "relative",  # wall-clock ns, not MONOTONIC
        "per_request": per_request,
    }


CLIENTS = {"kneecap": run_kneecap, "vllm": run_vllm, "aiperf": run_aiperf}
