"""Compare kneecap's load-generating client with peer clients against one fast scripted server.

Starts bench/fast_server.js (Node, built-in http) pinned to one core and each client pinned
to the other (taskset), on the same configurations in one run, restarting the server for every
(client, configuration) so each run has its own server timestamp log. Prints a markdown table
and writes it to bench/results/compare_clients.md (raw numbers: compare_clients.json).

Two kinds of configuration (issue 3, item 12):
- latency: scripted TTFT 200 ms, ITL 20 ms, one token per chunk, at C=1, 64, 256. A client's
  own TTFT/ITL minus the server's (send of the first token-bearing event minus arrival of the
  request; gaps between sends) is the error the client adds. Reported as differences of means
  and of p99s (requests are not matched one to one).
- ingest: ITL 0 (the server writes as fast as sockets drain) at C=256 and C=1024: output
  tokens per second, and output tokens per client CPU-second ("per client core").

  .venv/bin/python bench/compare_clients.py [--clients kneecap,vllm] [--quick]

Peers come from bench/install_peers.sh (their own venv under bench/.peers/).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shlex
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
PEER_PY = HERE / ".peers" / "venv" / "bin" / "python"
RESULTS = HERE / "results"


@dataclass(frozen=True)
class Scenario:
    name: str  # "latency" | "ingest"
    concurrency: int
    requests: int
    isl: int
    osl: int
    ttft_ms: float
    itl_ms: float
    tokens_per_chunk: int = 1
    events_per_write: int = 1  # only with ITL 0: SSE events handed to the socket in one write


def scenarios(quick: bool, ingest_events_per_write: int = 8) -> list[Scenario]:
    scale = 4 if quick else 1
    return [
        Scenario("latency", 1, max(4, 16 // scale), 16, 64, 200.0, 20.0),
        Scenario("latency", 64, 256 // scale, 16, 64, 200.0, 20.0),
        Scenario("latency", 256, 1024 // scale, 16, 64, 200.0, 20.0),
        Scenario("ingest", 256, 2048 // scale, 16, 256, 0.0, 0.0, 1, ingest_events_per_write),
        Scenario("ingest", 1024, 4096 // scale, 16, 256, 0.0, 0.0, 1, ingest_events_per_write),
    ]


# ---- processes -------------------------------------------------------------------------------

class NodeServer:
    """bench/fast_server.js on `cpu`, logging its own send timestamps to `log_path`."""

    def __init__(self, scenario: Scenario, cpu: int, log_path: Path):
        self.log_path = log_path
        self.out_path = log_path.with_suffix(".stdout")
        cmd = ["taskset", "-c", str(cpu), "node", str(HERE / "fast_server.js"), "--port", "0",
               "--ttft-ms", str(scenario.ttft_ms), "--itl-ms", str(scenario.itl_ms),
               "--tokens-per-chunk", str(scenario.tokens_per_chunk),
               "--events-per-write", str(scenario.events_per_write), "--log", str(log_path)]
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            text = self.out_path.read_text()
            if text.startswith("LISTENING "):
                self.base_url = text.split()[1]
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"error: fast_server.js exited: {text.strip()}")
            time.sleep(0.02)
        self.stop()
        raise SystemExit("error: fast_server.js did not start listening within 10 s")

    def stop(self) -> float:
        """SIGTERM by PID (the server flushes its log), reap it; return its CPU seconds."""
        os.kill(self.proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while True:
            pid, status, usage = os.wait4(self.proc.pid, os.WNOHANG)
            if pid:
                break
            if time.monotonic() > deadline:
                os.kill(self.proc.pid, signal.SIGKILL)
                pid, status, usage = os.wait4(self.proc.pid, 0)
                break
            time.sleep(0.02)
        self.proc.returncode = os.waitstatus_to_exitcode(status)
        return usage.ru_utime + usage.ru_stime


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


def run_pinned(cmd: list[str], cpu: int, timeout_s: float, env: dict | None = None,
               cpu_samples: list | None = None) -> tuple[int, float, str]:
    """Run `cmd` on `cpu`; return (exit code, its CPU seconds from wait4, stderr tail).
    With `cpu_samples`, also append (wall time s, process-tree CPU s) every 0.1 s."""
    import psutil

    with tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(["taskset", "-c", str(cpu), *cmd], stdout=subprocess.DEVNULL, stderr=err,
                                env={**os.environ, **(env or {})}, cwd=ROOT)
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


# ---- clients: each returns {completed, duration_s, output_tokens, cpu_s, ttft_ms, itl_ms, warmup_requests}

def per_token_gaps_ms(times_s: list[float], tokens: list[int]) -> list[float]:
    """ITL per token: the gap before a chunk of k tokens, then k-1 zero gaps (DESIGN.md's definition)."""
    gaps: list[float] = [0.0] * max(0, (tokens[0] if tokens else 1) - 1)
    for i in range(1, len(times_s)):
        gaps.append((times_s[i] - times_s[i - 1]) * 1000.0)
        gaps.extend([0.0] * max(0, tokens[i] - 1))
    return gaps


def level_cpu_s(client: dict) -> float | None:
    """The client CPU seconds a kneecap level reports about itself (summed over its worker processes)."""
    workers = client.get("per_worker")
    if isinstance(workers, list) and workers and all(isinstance(w.get("cpu_s"), (int, float)) for w in workers):
        return float(sum(w["cpu_s"] for w in workers))
    value = client.get("cpu_s")
    return float(value) if isinstance(value, (int, float)) else None


def run_kneecap(url: str, sc: Scenario, cpu: int, work: Path) -> dict:
    out_dir = work / "kneecap-out"
    cmd = [sys.executable, "-m", "kneecap", "bench", "--base-url", url, "--model", "fast-scripted", "--isl", str(sc.isl), "--osl", str(sc.osl),
           "--concurrency", str(sc.concurrency), "--requests", str(sc.requests), "--warmup", "0",
           "--out", str(out_dir), "--quiet", "--json"]
    code, cpu_total_s, err = run_pinned(cmd, cpu, timeout_s=600)
    if code != 0:
        return {"error": f"kneecap bench exited {code}: {err.strip().splitlines()[-1:] if err.strip() else ''}"}
    from kneecap.records import read_records

    summary = json.loads((out_dir / "summary.json").read_text())
    level = summary["levels"][0]
    records = [r for r in read_records(out_dir / "requests.jsonl") if not r.warmup]
    ok = [r for r in records if r.ok]
    cpu_s = level_cpu_s(level.get("client") or {})
    ttft = [(r.first_token_at - r.sent_at) * 1000.0 for r in ok if r.first_token_at is not None and r.sent_at is not None]
    itl = [g for r in ok for g in per_token_gaps_ms(r.chunk_times, r.chunk_tokens)]
    per_request = [{"sha256": r.prompt_hash, "ok": r.ok and bool(r.chunk_times), "sent_s": r.sent_at,
                    "chunk_times_s": r.chunk_times, "chunk_tokens": r.chunk_tokens} for r in records]
    return {"completed": len(ok), "duration_s": level["duration_s"],
            "output_tokens": sum((r.output_tokens or sum(r.chunk_tokens)) for r in ok),
            "cpu_s": cpu_s if cpu_s is not None else cpu_total_s,
            "cpu_source": "level" if cpu_s is not None else "whole process (includes start-up)",
            "ttft_ms": ttft, "itl_ms": itl, "warmup_requests": 0,
            "clock": "relative",  # seconds since the run's perf_counter epoch, which summary.json does not state
            "per_request": per_request}


def run_vllm(url: str, sc: Scenario, cpu: int, work: Path) -> dict:
    if not PEER_PY.exists():
        return {"error": "bench/.peers/venv missing: run bench/install_peers.sh"}
    out = work / "vllm.json"
    cmd = [str(PEER_PY), str(HERE / "peer_vllm.py"), "--base-url", url, "--concurrency", str(sc.concurrency),
           "--requests", str(sc.requests), "--isl", str(sc.isl), "--osl", str(sc.osl), "--out", str(out)]
    code, _, err = run_pinned(cmd, cpu, timeout_s=600)
    if code != 0 or not out.exists():
        return {"error": f"peer_vllm.py exited {code}: {err.strip()[-300:]}"}
    result = json.loads(out.read_text())
    result["cpu_source"] = "benchmark() only"
    return result


PEER_TOKENIZER = HERE / ".peers" / "tokenizer"


def run_aiperf(url: str, sc: Scenario, cpu: int, work: Path) -> dict:
    """NVIDIA AIPerf (`aiperf profile`), streaming completions, server token counts. It runs several
    processes (all pinned to the client core); its CPU is the process tree's, sampled, over the
    window from its first request start to its last request end (its start-up is excluded)."""
    exe = HERE / ".peers" / "venv" / "bin" / "aiperf"
    if not exe.exists() or not (PEER_TOKENIZER / "tokenizer.json").exists():
        return {"error": "aiperf or its local tokenizer missing: run bench/install_peers.sh"}
    art = work / "aiperf"
    cmd = [str(exe), "profile", "--model", "fast-scripted", "--url", url, "--endpoint-type", "completions",
           "--streaming", "--concurrency", str(sc.concurrency), "--request-count", str(sc.requests),
           "--synthetic-input-tokens-mean", str(sc.isl), "--synthetic-input-tokens-stddev", "0",
           "--output-tokens-mean", str(sc.osl), "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
           "--tokenizer", str(PEER_TOKENIZER), "--use-server-token-count", "--artifact-dir", str(art),
           "--ui-type", "none"]
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
        per_request.append({"sha256": sha, "ok": True, "sent_s": sent_s, "chunk_times_s": times,
                            "chunk_tokens": [1] * len(times)})
        ttft.append(first)
        itl.extend(per_token_gaps_ms(times, [1] * len(times)))
        output_tokens += int((metrics.get("usage_completion_tokens") or metrics.get("output_token_count") or {})
                             .get("value") or 0)
    if not starts:
        return {"error": "aiperf recorded no successful request"}
    window_cpu = cpu_between(samples, min(starts), max(ends))
    return {"completed": len(ttft), "duration_s": max(ends) - min(starts), "output_tokens": output_tokens,
            "cpu_s": window_cpu if window_cpu else cpu_total_s,
            "cpu_source": "process tree, sampled over its requests" if window_cpu else "whole run (includes start-up)",
            "ttft_ms": ttft, "itl_ms": itl, "warmup_requests": 0, "clock": "relative",  # wall-clock ns, not MONOTONIC
            "per_request": per_request}


CLIENTS = {"kneecap": run_kneecap, "vllm": run_vllm, "aiperf": run_aiperf}


# ---- the server's side ------------------------------------------------------------------------

def server_side(log_path: Path, skip_first: int) -> dict:
    """Server TTFT (first send - request arrival) and per-token ITL from the server's own log."""
    rows = [json.loads(line) for line in log_path.read_text().splitlines() if line.strip()]
    rows = sorted((r for r in rows if r["complete"]), key=lambda r: r["id"])[skip_first:]
    ttft = [r["send_ms"][0] - r["recv_ms"] for r in rows if r["send_ms"]]
    itl = [g for r in rows for g in per_token_gaps_ms([t / 1000.0 for t in r["send_ms"]], r["tokens"])]
    return {"requests": len(rows), "ttft_ms": ttft, "itl_ms": itl, "rows": rows}


def paired_errors(client_requests: list[dict], server_rows: list[dict], clock: str) -> dict:
    """Match each finished client request to the server's log entry for the same prompt (sha256)
    and measure what the client added, request by request.

    TTFT error = client TTFT - server TTFT = send lag + receive lag, where send lag = server
    arrival - client send stamp and receive lag = client first-token stamp - server first send.
    The sum needs no common clock; the split does: with clock="monotonic" the client stamped
    CLOCK_MONOTONIC like the server; with "relative" (seconds since an unstated epoch) the offset
    (or wall-clock stamps: aiperf) is estimated as the smallest (arrival - send) over all pairs, so the split's send lags are
    measured from the fastest request's (a loopback trip, tens of microseconds).
    ITL error = client per-token gaps - server per-token gaps, token by token.
    """
    by_sha: dict[str, dict] = {}
    for row in sorted(server_rows, key=lambda r: r["recv_ms"]):
        by_sha[row.get("prompt_sha256", "")] = row  # a repeated prompt (a ready check) keeps the latest
    pairs = [(c, by_sha[c["sha256"]]) for c in client_requests
             if c.get("ok") and c.get("sha256") in by_sha and by_sha[c["sha256"]]["send_ms"]]
    if not pairs:
        return {"paired": 0}
    if clock == "monotonic":  # the client stamped the server's clock
        offset_s = 0.0
    else:
        offset_s = min(s["recv_ms"] / 1000.0 - c["sent_s"] for c, s in pairs)
    ttft_err, send_lag, recv_lag, itl_diffs = [], [], [], []
    itl_client_sum = itl_server_sum = 0.0
    itl_n = 0
    for c, s in pairs:
        c_first = c["chunk_times_s"][0]
        s_recv, s_first = s["recv_ms"], s["send_ms"][0]
        ttft_err.append((c_first - c["sent_s"]) * 1000.0 - (s_first - s_recv))
        send_lag.append(s_recv - (c["sent_s"] + offset_s) * 1000.0)
        recv_lag.append((c_first + offset_s) * 1000.0 - s_first)
        c_gaps = per_token_gaps_ms(c["chunk_times_s"], c["chunk_tokens"])
        s_gaps = per_token_gaps_ms([t / 1000.0 for t in s["send_ms"]], s["tokens"])
        if len(c_gaps) == len(s_gaps):
            itl_diffs.extend(a - b for a, b in zip(c_gaps, s_gaps))
            itl_client_sum += sum(c_gaps)
            itl_server_sum += sum(s_gaps)
            itl_n += len(c_gaps)
    return {
        "paired": len(pairs), "clock": clock,
        "ttft_err_mean_ms": mean(ttft_err), "ttft_err_p50_ms": pct(ttft_err, 50), "ttft_err_p99_ms": pct(ttft_err, 99),
        "ttft_err_max_ms": max(ttft_err),
        "send_lag_mean_ms": mean(send_lag), "send_lag_p99_ms": pct(send_lag, 99),
        "recv_lag_mean_ms": mean(recv_lag), "recv_lag_p99_ms": pct(recv_lag, 99),
        "itl_err_mean_ms": (itl_client_sum - itl_server_sum) / itl_n if itl_n else float("nan"),
        "itl_err_p99_ms": pct(itl_diffs, 99), "itl_err_p1_ms": pct(itl_diffs, 1), "itl_tokens_paired": itl_n,
    }


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q / 100.0 * (len(ordered) - 1))))]


def mean(values: list[float]) -> float:
    return statistics.fmean(values) if values else float("nan")


def measure(client: str, sc: Scenario, server_cpu: int, client_cpu: int, work_root: Path) -> dict:
    work = work_root / f"{sc.name}-c{sc.concurrency}-{client}"
    work.mkdir(parents=True, exist_ok=True)
    server = NodeServer(sc, server_cpu, work / "server.jsonl")
    started = time.monotonic()
    try:
        result = CLIENTS[client](server.base_url, sc, client_cpu, work)
    finally:
        server_cpu_s = server.stop()
    wall_s = time.monotonic() - started
    if "error" in result:
        return {"client": client, "scenario": sc.__dict__, **result}
    srv = server_side(server.log_path, result.get("warmup_requests", 0))
    row = {
        "client": client, "scenario": sc.__dict__, "completed": result["completed"], "requests": sc.requests,
        "duration_s": result["duration_s"], "output_tokens": result["output_tokens"],
        "output_tok_s": result["output_tokens"] / result["duration_s"] if result["duration_s"] else float("nan"),
        "cpu_s": result["cpu_s"], "cpu_source": result.get("cpu_source"),
        "client_ttft_mean_ms": mean(result["ttft_ms"]), "server_ttft_mean_ms": mean(srv["ttft_ms"]),
        "client_ttft_p99_ms": pct(result["ttft_ms"], 99), "server_ttft_p99_ms": pct(srv["ttft_ms"], 99),
        "client_itl_mean_ms": mean(result["itl_ms"]), "server_itl_mean_ms": mean(srv["itl_ms"]),
        "client_itl_p99_ms": pct(result["itl_ms"], 99), "server_itl_p99_ms": pct(srv["itl_ms"], 99),
    }
    row["cpu_util"] = row["cpu_s"] / row["duration_s"] if row["duration_s"] else float("nan")
    row["server_cpu_util"] = server_cpu_s / wall_s  # over the client's whole run (start-up included): a lower bound
    row["output_tok_per_cpu_s"] = row["output_tokens"] / row["cpu_s"] if row["cpu_s"] else float("nan")
    row["dist_ttft_err_mean_ms"] = row["client_ttft_mean_ms"] - row["server_ttft_mean_ms"]
    row["dist_itl_err_mean_ms"] = row["client_itl_mean_ms"] - row["server_itl_mean_ms"]
    pairs = paired_errors(result.get("per_request", []), srv["rows"], result.get("clock", "relative"))
    row["pairing"] = pairs
    # Paired numbers when every finished request was matched, else differences of the distributions.
    exact = pairs["paired"] and pairs["paired"] >= 0.9 * result["completed"]
    row["ttft_err_mean_ms"] = pairs["ttft_err_mean_ms"] if exact else row["dist_ttft_err_mean_ms"]
    row["itl_err_mean_ms"] = pairs["itl_err_mean_ms"] if exact else row["dist_itl_err_mean_ms"]
    row["error_method"] = (f"paired ({pairs['paired']}/{result['completed']})" if exact
                           else f"distributions (only {pairs['paired']}/{result['completed']} paired)")
    return row


def pick_median(runs: list[dict]) -> dict:
    """The median run by the scenario's key number (TTFT error for latency, tokens per CPU-s for
    ingest), with every run's key number kept in `repeats` (a shared machine is noisy)."""
    good = [r for r in runs if "error" not in r]
    if not good:
        return runs[0]
    key = "ttft_err_mean_ms" if good[0]["scenario"]["name"] == "latency" else "output_tok_per_cpu_s"
    ordered = sorted(good, key=lambda r: r[key])
    chosen = dict(ordered[(len(ordered) - 1) // 2])
    chosen["repeats"] = {"key": key, "values": [r[key] for r in good], "failed_runs": len(runs) - len(good)}
    return chosen


def spread(row: dict, digits: int) -> str:
    values = (row.get("repeats") or {}).get("values") or []
    return f"{fmt(min(values), digits)}–{fmt(max(values), digits)}" if len(values) > 1 else "—"


# ---- rendering ---------------------------------------------------------------------------------

def fmt(value, digits: int = 2) -> str:
    if value is None or (isinstance(value, float) and value != value):
        return "—"
    if isinstance(value, float):
        return f"{value:,.{digits}f}"
    return f"{value:,}"


def render(rows: list[dict], command: str, clients: list[str]) -> str:
    lines = [
        "# kneecap client vs peer clients", "",
        f"Command: `{command}`", "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores ({_cpu_model()}), Python {platform.python_version()}, "
        f"Node {subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()}; "
        "server (bench/fast_server.js) pinned to one core, client to the other.", "",
        "## Latency added by the client (scripted TTFT 200 ms, ITL 20 ms, 1 token/chunk, OSL 64)", "",
        "| client | C | completed | TTFT mean client / server ms | TTFT err mean / p50 / p99 ms "
        "| send lag mean / p99 ms | receive lag mean / p99 ms | ITL mean client / server ms | ITL err mean ms "
        "| ITL err p1 / p99 ms | method | TTFT err range over runs |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        sc = r["scenario"]
        if sc["name"] != "latency":
            continue
        if "error" in r:
            lines.append(f"| {r['client']} | {sc['concurrency']} | error: {r['error'][:120]} | | | | | | | | | |")
            continue
        p = r["pairing"] if r["pairing"].get("paired") else {}
        lines.append(f"| {r['client']} | {sc['concurrency']} | {r['completed']}/{r['requests']} "
                     f"| {fmt(r['client_ttft_mean_ms'])} / {fmt(r['server_ttft_mean_ms'])} "
                     f"| {fmt(r['ttft_err_mean_ms'])} / {fmt(p.get('ttft_err_p50_ms'))} / {fmt(p.get('ttft_err_p99_ms'))} "
                     f"| {fmt(p.get('send_lag_mean_ms'))} / {fmt(p.get('send_lag_p99_ms'))} "
                     f"| {fmt(p.get('recv_lag_mean_ms'))} / {fmt(p.get('recv_lag_p99_ms'))} "
                     f"| {fmt(r['client_itl_mean_ms'], 3)} / {fmt(r['server_itl_mean_ms'], 3)} "
                     f"| {fmt(r['itl_err_mean_ms'], 3)} | {fmt(p.get('itl_err_p1_ms'))} / {fmt(p.get('itl_err_p99_ms'))} "
                     f"| {r['error_method']} | {spread(r, 2)} |")
    epw = next((r["scenario"]["events_per_write"] for r in rows if r["scenario"]["name"] == "ingest"), 1)
    lines += ["", f"## Ingest (ITL 0: the server writes as fast as sockets drain, {epw} SSE event(s) of 1 token per "
              "write; OSL 256)", "",
              "| client | C | completed | output tok/s | client CPU util | server CPU util (≥) | output tok per client CPU-s "
              "| range over runs | client CPU measured over |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        sc = r["scenario"]
        if sc["name"] != "ingest":
            continue
        if "error" in r:
            lines.append(f"| {r['client']} | {sc['concurrency']} | error: {r['error'][:120]} | | | | | | |")
            continue
        lines.append(f"| {r['client']} | {sc['concurrency']} | {r['completed']}/{r['requests']} | {fmt(r['output_tok_s'], 0)} "
                     f"| {fmt(r['cpu_util'])} | {fmt(r['server_cpu_util'])} | {fmt(r['output_tok_per_cpu_s'], 0)} | {spread(r, 0)} "
                     f"| {r['cpu_source']} |")
    lines += ["", "## Ratios and targets (issue 3, item 12)", ""]
    lines += ratio_lines(rows, clients)
    lines += ["", "Definitions. Requests are paired with the server's log entries by prompt sha256. TTFT err = "
              "client TTFT − server TTFT (server: first token-bearing event handed to the socket − request headers "
              "parsed) = send lag (server arrival − client send stamp: the client's write path, the kernel and the "
              "server's accept/parse) + receive lag (client first-token stamp − server send: the client's read "
              "path). vLLM stamps CLOCK_MONOTONIC like the server; kneecap's records are relative to an epoch that "
              "summary.json does not state, so its split takes the fastest request's send lag as 0 (the sum is "
              "exact either way). ITL per token on both sides (a chunk of k tokens = its gap then k−1 zeros), "
              "err = client gap − server gap, token by token. Ingest per client core = output tokens / client "
              "CPU-seconds (user+system)."]
    return "\n".join(lines) + "\n"


def ratio_lines(rows: list[dict], clients: list[str]) -> list[str]:
    def find(client: str, name: str, c: int) -> dict | None:
        return next((r for r in rows if r["client"] == client and r["scenario"]["name"] == name
                     and r["scenario"]["concurrency"] == c and "error" not in r), None)

    out = []
    for c in (256, 1024):
        k, v = find("kneecap", "ingest", c), find("vllm", "ingest", c)
        if k and v:
            ratio = k["output_tok_per_cpu_s"] / v["output_tok_per_cpu_s"]
            out.append(f"- C={c}: kneecap ingests {ratio:.2f}x vLLM's output tokens per client CPU-second "
                       f"({fmt(k['output_tok_per_cpu_s'], 0)} vs {fmt(v['output_tok_per_cpu_s'], 0)}); target >= 1.8x: "
                       f"{'met' if ratio >= 1.8 else 'NOT met'}")
    for c in (1, 64, 256):
        for client in clients:
            r = find(client, "latency", c)
            if r:
                target = ""
                if client == "kneecap" and c == 256:
                    target = f" (target <= 5 ms: {'met' if abs(r['ttft_err_mean_ms']) <= 5 else 'NOT met'})"
                out.append(f"- C={c} {client}: TTFT err mean {fmt(r['ttft_err_mean_ms'])} ms{target}, "
                           f"ITL err mean {fmt(r['itl_err_mean_ms'], 3)} ms"
                           + (f" (target <= 0.05 ms: {'met' if abs(r['itl_err_mean_ms']) <= 0.05 else 'NOT met'})"
                              if client == "kneecap" else ""))
    return out or ["- (no pair of results to compare)"]


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown CPU"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--clients", default="kneecap,vllm,aiperf", help="comma list of: " + ",".join(CLIENTS))
    parser.add_argument("--quick", action="store_true", help="a quarter of the requests (a smoke run)")
    parser.add_argument("--repeat", type=int, default=1,
                        help="runs per (configuration, client); the table shows the median run and the range")
    parser.add_argument("--only", default=None, help="run only scenarios named latency or ingest")
    parser.add_argument("--ingest-events-per-write", type=int, default=8,
                        help="SSE events per server write in the ingest runs (1 = one write per token)")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "compare_clients.md"))
    args = parser.parse_args()
    clients = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [c for c in clients if c not in CLIENTS]
    if unknown:
        parser.error(f"unknown client(s) {unknown}; choose from {list(CLIENTS)}")
    for tool in ("node", "taskset"):
        if subprocess.run(["which", tool], capture_output=True).returncode:
            parser.error(f"{tool} not found on PATH")
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (min(hard, max(soft, 65536)), hard))

    command = "python bench/compare_clients.py " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    rows = []
    with tempfile.TemporaryDirectory(prefix="kneecap-compare-") as tmp:
        for sc in scenarios(args.quick, args.ingest_events_per_write):
            if args.only and sc.name != args.only:
                continue
            for client in clients:
                started = time.monotonic()
                runs = [measure(client, sc, args.server_cpu, args.client_cpu, Path(tmp) / f"run{i}")
                        for i in range(args.repeat)]
                row = pick_median(runs)
                rows.append(row)
                status = row.get("error") or (f"{row['output_tok_s']:,.0f} tok/s, TTFT err {row['ttft_err_mean_ms']:.2f} ms "
                                              f"({row['error_method']}), "
                                              f"ITL err {row['itl_err_mean_ms']:.3f} ms, cpu {row['cpu_util']:.2f}, server cpu {row['server_cpu_util']:.2f}")
                print(f"[{sc.name} C={sc.concurrency} {client}] {status} ({time.monotonic() - started:.1f}s)",
                      file=sys.stderr, flush=True)
    text = render(rows, command, clients)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
