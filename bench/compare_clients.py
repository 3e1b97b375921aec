"""Compare kneecap's load-generating client with peer clients against one fast scripted server.

Starts bench/fast_server.js (Node; HTTP/1.1 on the built-in net module) pinned to one core and each client pinned
to the other (taskset), on the same configurations in one run, restarting the server for every
(client, configuration) so each run has its own server timestamp log. Prints a markdown table
and writes it to bench/results/compare_clients.md (raw numbers: compare_clients.json).

Two kinds of configuration:
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
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from client_runs import CLIENTS
from pairing import mean, paired_errors, pct, server_side

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
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
        cmd = [
            "taskset",
            "-c",
            str(cpu),
            "node",
            str(HERE / "fast_server.js"),
            "--port",
            "0",
            "--ttft-ms",
            str(scenario.ttft_ms),
            "--itl-ms",
            str(scenario.itl_ms),
            "--tokens-per-chunk",
            str(scenario.tokens_per_chunk),
            "--events-per-write",
            str(scenario.events_per_write),
            "--log",
            str(log_path),
            # the server streams as many requests to itself as the level has in flight before it
            # listens: every client meets a server whose hot paths V8 has already compiled
            "--warmup-requests",
            str(scenario.concurrency),
        ]
        with open(self.out_path, "wb") as out:
            self.proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            text = self.out_path.read_text()
            if text.startswith("LISTENING "):
                self.base_url = text.split()[1]
                return
            if self.proc.poll() is not None:
                raise SystemExit(f"error: fast_server.js exited: {text.strip()}")
            time.sleep(0.02)
        self.stop()
        raise SystemExit("error: fast_server.js did not start listening (and warm up) within 30 s")

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


# ---- one (configuration, client) run ------------------------------------------------------------


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
        "client": client,
        "scenario": sc.__dict__,
        "completed": result["completed"],
        "requests": sc.requests,
        "duration_s": result["duration_s"],
        "output_tokens": result["output_tokens"],
        "output_tok_s": result["output_tokens"] / result["duration_s"] if result["duration_s"] else float("nan"),
        "cpu_s": result["cpu_s"],
        "cpu_source": result.get("cpu_source"),
        "client_ttft_mean_ms": mean(result["ttft_ms"]),
        "server_ttft_mean_ms": mean(srv["ttft_ms"]),
        "client_ttft_p99_ms": pct(result["ttft_ms"], 99),
        "server_ttft_p99_ms": pct(srv["ttft_ms"], 99),
        "client_itl_mean_ms": mean(result["itl_ms"]),
        "server_itl_mean_ms": mean(srv["itl_ms"]),
        "client_itl_p99_ms": pct(result["itl_ms"], 99),
        "server_itl_p99_ms": pct(srv["itl_ms"], 99),
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
    row["error_method"] = (
        f"paired ({pairs['paired']}/{result['completed']})"
        if exact
        else f"distributions (only {pairs['paired']}/{result['completed']} paired)"
    )
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
        "# kneecap client vs peer clients",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores ({_cpu_model()}), Python {platform.python_version()}, "
        f"Node {subprocess.run(['node', '--version'], capture_output=True, text=True).stdout.strip()}; "
        "server (bench/fast_server.js) pinned to one core, client to the other. "
        f"Load average (1 min) at the end: {os.getloadavg()[0]:.2f} (other work on this machine shares both cores).",
        "",
        "## Latency added by the client (scripted TTFT 200 ms, ITL 20 ms, 1 token/chunk, OSL 64)",
        "",
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
        lines.append(
            f"| {r['client']} | {sc['concurrency']} | {r['completed']}/{r['requests']} "
            f"| {fmt(r['client_ttft_mean_ms'])} / {fmt(r['server_ttft_mean_ms'])} "
            f"| {fmt(r['ttft_err_mean_ms'])} / {fmt(p.get('ttft_err_p50_ms'))} / {fmt(p.get('ttft_err_p99_ms'))} "
            f"| {fmt(p.get('send_lag_mean_ms'))} / {fmt(p.get('send_lag_p99_ms'))} "
            f"| {fmt(p.get('recv_lag_mean_ms'))} / {fmt(p.get('recv_lag_p99_ms'))} "
            f"| {fmt(r['client_itl_mean_ms'], 3)} / {fmt(r['server_itl_mean_ms'], 3)} "
            f"| {fmt(r['itl_err_mean_ms'], 3)} | {fmt(p.get('itl_err_p1_ms'))} / {fmt(p.get('itl_err_p99_ms'))} "
            f"| {r['error_method']} | {spread(r, 2)} |"
        )
    epw = next((r["scenario"]["events_per_write"] for r in rows if r["scenario"]["name"] == "ingest"), 1)
    lines += [
        "",
        f"## Ingest (ITL 0: the server writes as fast as sockets drain, {epw} SSE event(s) of 1 token per "
        "write; OSL 256)",
        "",
        "| client | C | completed | output tok/s | client CPU util | server CPU util (≥) | output tok per client CPU-s "
        "| range over runs | client CPU measured over |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        sc = r["scenario"]
        if sc["name"] != "ingest":
            continue
        if "error" in r:
            lines.append(f"| {r['client']} | {sc['concurrency']} | error: {r['error'][:120]} | | | | | | |")
            continue
        lines.append(
            f"| {r['client']} | {sc['concurrency']} | {r['completed']}/{r['requests']} | {fmt(r['output_tok_s'], 0)} "
            f"| {fmt(r['cpu_util'])} | {fmt(r['server_cpu_util'])} | {fmt(r['output_tok_per_cpu_s'], 0)} | {spread(r, 0)} "
            f"| {r['cpu_source']} |"
        )
    lines += ["", "## Ratios and targets", ""]
    lines += ratio_lines(rows, clients)
    lines += [
        "",
        "Definitions. Requests are paired with the server's log entries by prompt sha256. TTFT err = "
        "client TTFT − server TTFT (server: first token-bearing event handed to the socket − arrival of the "
        "request's first byte, stamped on the socket's data event before any parsing) = send lag (server "
        "arrival − client send stamp: the client's write path, the kernel and the server's event loop) + receive lag (client first-token stamp − server send: the client's read "
        "path). vLLM stamps CLOCK_MONOTONIC like the server, and kneecap's records are seconds since the "
        "CLOCK_MONOTONIC epoch its manifest.json states, so both splits are exact; AIPerf stamps wall-clock "
        "time, so its split takes the fastest request's send lag as 0 (the sum is exact either way). The "
        "server (`--warmup-requests C`) streams C requests to itself before it listens, so no client pays "
        "for V8 compiling its hot paths. It speaks HTTP/1.1 on Node's net module rather than its http module, "
        "whose per-request and per-write work delayed arrival stamps by milliseconds at C=256, and it "
        "stamps a request's arrival before handling it (the handling waits for setImmediate), so a burst "
        "of arrivals is stamped as it arrives. ITL err mean = (client streaming span − server streaming span) / (tokens − 1) "
        "over paired requests (span = first to last token-bearing chunk); ITL err p1/p99 compare per-token "
        "gaps (docs/metrics.md `itl_ms`: a chunk of k tokens after a gap g gives k samples of g/k) token by "
        "token, where the client chunked the stream as the server sent it. Ingest per client core = output "
        "tokens / client CPU-seconds (user+system).",
    ]
    return "\n".join(lines) + "\n"


def ratio_lines(rows: list[dict], clients: list[str]) -> list[str]:
    def find(client: str, name: str, c: int) -> dict | None:
        return next(
            (
                r
                for r in rows
                if r["client"] == client
                and r["scenario"]["name"] == name
                and r["scenario"]["concurrency"] == c
                and "error" not in r
            ),
            None,
        )

    out = []
    for c in (256, 1024):
        k, v = find("kneecap", "ingest", c), find("vllm", "ingest", c)
        if k and v:
            ratio = k["output_tok_per_cpu_s"] / v["output_tok_per_cpu_s"]
            out.append(
                f"- C={c}: kneecap ingests {ratio:.2f}x vLLM's output tokens per client CPU-second "
                f"({fmt(k['output_tok_per_cpu_s'], 0)} vs {fmt(v['output_tok_per_cpu_s'], 0)}); target >= 1.8x: "
                f"{'met' if ratio >= 1.8 else 'NOT met'}"
            )
    for c in (1, 64, 256):
        for client in clients:
            r = find(client, "latency", c)
            if r:
                target = ""
                if client == "kneecap" and c == 256:
                    target = f" (target <= 5 ms: {'met' if abs(r['ttft_err_mean_ms']) <= 5 else 'NOT met'})"
                out.append(
                    f"- C={c} {client}: TTFT err mean {fmt(r['ttft_err_mean_ms'])} ms{target}, "
                    f"ITL err mean {fmt(r['itl_err_mean_ms'], 3)} ms"
                    + (
                        f" (target <= 0.05 ms: {'met' if abs(r['itl_err_mean_ms']) <= 0.05 else 'NOT met'})"
                        if client == "kneecap"
                        else ""
                    )
                )
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
    parser.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="runs per (configuration, client); the table shows the median run and the range",
    )
    parser.add_argument("--only", default=None, help="run only scenarios named latency or ingest")
    parser.add_argument(
        "--ingest-events-per-write",
        type=int,
        default=8,
        help="SSE events per server write in the ingest runs (1 = one write per token)",
    )
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "compare_clients.md"))
    parser.add_argument("--keep", default=None, help="keep every run's records and server logs in this folder")
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
    with tempfile.TemporaryDirectory(prefix="kneecap-compare-") as scratch:
        tmp = args.keep or scratch
        for sc in scenarios(args.quick, args.ingest_events_per_write):
            if args.only and sc.name != args.only:
                continue
            for client in clients:
                started = time.monotonic()
                runs = [
                    measure(client, sc, args.server_cpu, args.client_cpu, Path(tmp) / f"run{i}")
                    for i in range(args.repeat)
                ]
                row = pick_median(runs)
                rows.append(row)
                status = row.get("error") or (
                    f"{row['output_tok_s']:,.0f} tok/s, TTFT err {row['ttft_err_mean_ms']:.2f} ms "
                    f"({row['error_method']}), "
                    f"ITL err {row['itl_err_mean_ms']:.3f} ms, cpu {row['cpu_util']:.2f}, server cpu {row['server_cpu_util']:.2f}"
                )
                print(
                    f"[{sc.name} C={sc.concurrency} {client}] {status} ({time.monotonic() - started:.1f}s)",
                    file=sys.stderr,
                    flush=True,
                )
    text = render(rows, command, clients)
    print(text)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    out.with_suffix(".json").write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
