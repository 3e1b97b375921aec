"""Soak test: hold `kneecap bench` at C=256 for N minutes and check it neither leaks nor loses anything.

Runs the real CLI (`python -m kneecap bench --concurrency C --duration S`) against a URL, or
against a server this script starts (bench/fast_server.js, or `kneecap serve` once it exists),
samples the client's resident memory (RSS, its process tree) every second, and reports:
- RSS growth: the median of the last samples minus the peak of an early window (from 10 s or 10%
  of the run, whichever is later: connections and buffers are warm by then), and a least-squares
  slope in MiB/minute after it; the peak RSS too;
- lost records: requests the server saw (fast_server.js counts them) or the summary counted,
  minus the records in requests.jsonl (each must be there, finished, failed or cancelled);
- errors by kind, from summary.json.
Exit 0 when growth <= --max-rss-growth-mib, the peak <= --max-rss-mib, no record is lost and
there are no errors.

  .venv/bin/python bench/soak.py --short                   # 30 s against fast_server.js (CI)
  .venv/bin/python bench/soak.py --minutes 30 --target serve   # the full soak
  .venv/bin/python bench/soak.py --url http://127.0.0.1:8000 --minutes 30
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
MIB = 1024 * 1024


def start_node(ttft_ms: float, itl_ms: float, log_dir: Path) -> tuple[subprocess.Popen, str]:
    out = log_dir / "fast_server.stdout"
    with open(out, "wb") as fh:
        proc = subprocess.Popen(
            ["node", str(HERE / "fast_server.js"), "--port", "0", "--ttft-ms", str(ttft_ms), "--itl-ms", str(itl_ms)],
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    return proc, _wait_listening(proc, out)


def start_kneecap_serve(serve_args: str, log_dir: Path) -> tuple[subprocess.Popen, str]:
    """`kneecap serve ARGS --port 0`: the simulated engine in real time (the soak's target).
    Its ready line on stdout names the URL ("kneecap serve: listening on http://HOST:PORT — ...")."""
    import re
    import shlex

    out = log_dir / "serve.stdout"
    with open(out, "wb") as fh:
        proc = subprocess.Popen(
            [sys.executable, "-m", "kneecap", "serve", *shlex.split(serve_args), "--host", "127.0.0.1", "--port", "0"],
            stdout=fh,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        found = re.search(r"listening on (http://\S+)", out.read_text(errors="replace"))
        if found:
            return proc, found.group(1)
        if proc.poll() is not None:
            sys.exit(f"error: kneecap serve exited {proc.returncode}: {out.read_text()[-400:]}")
        time.sleep(0.1)
    stop(proc)
    sys.exit("error: kneecap serve did not print its listening line within 60 s")


def _wait_listening(proc: subprocess.Popen, out: Path) -> str:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = out.read_text()
        if text.startswith("LISTENING "):
            return text.split()[1]
        if proc.poll() is not None:
            sys.exit(f"error: server exited: {text.strip()}")
        time.sleep(0.02)
    stop(proc)
    sys.exit("error: server did not start listening within 10 s")


def stop(proc: subprocess.Popen) -> None:
    """SIGTERM by PID, then SIGKILL."""
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def server_stats(url: str) -> dict | None:
    """fast_server.js's own counters (None for servers without /stats)."""
    try:
        with urllib.request.urlopen(url + "/stats", timeout=5) as resp:
            return json.loads(resp.read())
    except (OSError, ValueError):
        return None


def tree_rss_bytes(proc) -> int:
    """RSS of a psutil.Process and its children (workers), in bytes."""
    import psutil

    total = 0
    for p in [proc, *proc.children(recursive=True)]:
        try:
            total += p.memory_info().rss
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            pass
    return total


def rss_growth(samples: list[tuple[float, int]], warm_s: float = 10.0) -> dict:
    """Growth (bytes) from the early window's peak to the final median, and the slope after the
    early window in bytes/minute. The early window starts after `warm_s` (start-up, connections
    and buffers filling) or 10% of the run, whichever is later, and lasts 10% of the run (>= 5 s)."""
    if len(samples) < 5:
        return {"samples": len(samples), "growth_bytes": None, "slope_bytes_per_min": None}
    t_end = samples[-1][0]
    start = max(warm_s, 0.1 * t_end)
    early = [rss for t, rss in samples if start <= t <= start + max(5.0, 0.1 * t_end)]
    if not early:
        return {
            "samples": len(samples),
            "growth_bytes": None,
            "slope_bytes_per_min": None,
            "max_bytes": max(r for _, r in samples),
            "note": f"run shorter than the {warm_s} s warm-up",
        }
    late = [rss for _, rss in samples[-max(3, len(samples) // 10) :]]
    steady = [(t, rss) for t, rss in samples if t >= start]
    slope = None
    if len(steady) >= 3:
        mean_t = statistics.fmean(t for t, _ in steady)
        mean_r = statistics.fmean(r for _, r in steady)
        var = sum((t - mean_t) ** 2 for t, _ in steady)
        slope = (sum((t - mean_t) * (r - mean_r) for t, r in steady) / var * 60.0) if var else 0.0
    return {
        "samples": len(samples),
        "early_peak_bytes": max(early),
        "final_median_bytes": int(statistics.median(late)),
        "max_bytes": max(r for _, r in samples),
        "growth_bytes": int(statistics.median(late)) - max(early),
        "slope_bytes_per_min": slope,
    }


def run_soak(args: argparse.Namespace, url: str, out_dir: Path) -> dict:
    import psutil

    duration_s = args.minutes * 60.0
    before = server_stats(url)
    cmd = [
        sys.executable,
        "-m",
        "kneecap",
        "bench",
        "--base-url",
        url,
        "--concurrency",
        str(args.concurrency),
        *(["--model", args.model] if args.model else []),
        "--duration",
        str(duration_s),
        "--isl",
        str(args.isl),
        "--osl",
        str(args.osl),
        "--warmup",
        "0",
        "--out",
        str(out_dir / "run"),
        "--quiet",
        "--json",
    ]
    if not args.keepalive:
        cmd.append("--no-keepalive")
    stderr_path = out_dir / "bench.stderr"
    started = time.monotonic()
    samples: list[tuple[float, int]] = []
    with open(stderr_path, "wb") as err, open(out_dir / "summary.stdout.json", "wb") as stdout:
        proc = subprocess.Popen(cmd, stdout=stdout, stderr=err, cwd=ROOT)
        ps = psutil.Process(proc.pid)
        deadline = started + duration_s + args.grace_s
        while proc.poll() is None:
            if time.monotonic() > deadline:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait()
                break
            try:
                samples.append((time.monotonic() - started, tree_rss_bytes(ps)))
            except psutil.NoSuchProcess:
                break
            time.sleep(args.sample_s)
    wall_s = time.monotonic() - started
    after = server_stats(url)

    from kneecap.records import read_records

    records_path = out_dir / "run" / "requests.jsonl"
    records = list(read_records(records_path)) if records_path.exists() else []
    summary_path = out_dir / "run" / "summary.json"
    summary = json.loads(summary_path.read_text()) if summary_path.exists() else {}
    level = (summary.get("levels") or [{}])[0]
    errors = level.get("errors") or {}
    counted = (level.get("completed") or 0) + (level.get("failed") or 0)
    server_seen = (after["requests"] - before["requests"]) if after and before else None
    probe = (summary.get("connections") or {}).get("probe") or {}
    manifest_path = out_dir / "run" / "manifest.json"
    prompts = (json.loads(manifest_path.read_text()).get("prompts") or {}) if manifest_path.exists() else {}
    if server_seen is not None:  # the keep-alive probe's and the prompt check's requests reach the server first
        server_seen -= (probe.get("requests_sent") or 0) + (prompts.get("check_requests") or 0)
    report = {
        "url": url,
        "concurrency": args.concurrency,
        "duration_s": duration_s,
        "wall_s": wall_s,
        "exit_code": proc.returncode,
        "stderr_tail": stderr_path.read_text(errors="replace")[-500:],
        "records": len(records),
        "records_ok": sum(1 for r in records if r.ok),
        "summary_requests": counted,
        "server_requests": server_seen,
        "lost_vs_summary": counted - len(records) if summary else None,
        "lost_vs_server": server_seen - len(records) if server_seen is not None else None,
        "errors": errors,
        "error_count": sum(errors.values()),
        "output_tok_s": level.get("output_tok_s"),
        "suspect": level.get("suspect"),
        "rss": rss_growth(samples, args.warm_s),
    }
    (out_dir / "rss.jsonl").write_text(
        "".join(json.dumps({"t_s": round(t, 3), "rss_bytes": r}) + "\n" for t, r in samples)
    )
    return report


def verdict(report: dict, max_growth_mib: float, max_rss_mib: float | None = None) -> list[str]:
    problems = []
    if report["exit_code"] != 0:
        problems.append(f"kneecap bench exited {report['exit_code']}: {report['stderr_tail'].strip()[-200:]}")
    if report["records"] == 0:
        problems.append("no records written")
    for key in ("lost_vs_summary", "lost_vs_server"):
        if report[key]:
            problems.append(f"{key} = {report[key]}")
    if report["error_count"]:
        problems.append(f"{report['error_count']} failed requests: {report['errors']}")
    growth = report["rss"].get("growth_bytes")
    if growth is None:
        problems.append("too few RSS samples")
    elif growth > max_growth_mib * MIB:
        problems.append(f"RSS grew {growth / MIB:.1f} MiB (> {max_growth_mib} MiB)")
    peak = report["rss"].get("max_bytes")
    if max_rss_mib is not None and peak is not None and peak > max_rss_mib * MIB:
        problems.append(f"RSS peaked at {peak / MIB:.0f} MiB (> {max_rss_mib:.0f} MiB)")
    return problems


def render(report: dict, problems: list[str], command: str) -> str:
    rss = report["rss"]

    def mib(value):
        return "—" if value is None else f"{value / MIB:.1f}"

    lines = [
        f"# kneecap soak: C={report['concurrency']} for {report['duration_s'] / 60:.1f} min",
        "",
        f"Command: `{command}`",
        "",
        "| measure | value |",
        "|---|---|",
        f"| target | {report['url']} |",
        f"| records written (ok) | {report['records']} ({report['records_ok']}) |",
        f"| requests counted by the summary / seen by the server | {report['summary_requests']} / "
        f"{'—' if report['server_requests'] is None else report['server_requests']} |",
        f"| lost records (vs summary / vs server) | {report['lost_vs_summary']} / "
        f"{'—' if report['lost_vs_server'] is None else report['lost_vs_server']} |",
        f"| errors | {report['error_count']} {report['errors'] or ''} |",
        f"| output tok/s | {report['output_tok_s'] if report['output_tok_s'] is None else round(report['output_tok_s'])} |",
        f"| RSS early-window peak → final median (MiB) | {mib(rss.get('early_peak_bytes'))} → "
        f"{mib(rss.get('final_median_bytes'))} |",
        f"| RSS growth (MiB) / max (MiB) | {mib(rss.get('growth_bytes'))} / {mib(rss.get('max_bytes'))} |",
        f"| RSS slope after the early window (MiB/min) | {mib(rss.get('slope_bytes_per_min'))} |",
        "",
        "Verdict: " + ("PASS" if not problems else "FAIL — " + "; ".join(problems)),
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group()
    where.add_argument("--url", help="an OpenAI-compatible server already running")
    where.add_argument(
        "--target",
        choices=("node", "serve"),
        default="node",
        help="start bench/fast_server.js (default) or `kneecap serve`",
    )
    parser.add_argument(
        "--model",
        default=None,
        help="model name to request (default: fast-scripted for the Node server, else the server's first model)",
    )
    parser.add_argument(
        "--serve-args",
        default="--preset llama-3.1-8b --gpu h100-sxm",
        help="flags for `kneecap serve` with --target serve",
    )
    parser.add_argument("--minutes", type=float, default=30.0)
    parser.add_argument("--short", action="store_true", help="30 seconds (the CI version)")
    parser.add_argument("--concurrency", type=int, default=256)
    parser.add_argument("--isl", type=int, default=64)
    parser.add_argument("--osl", type=int, default=128)
    parser.add_argument("--ttft-ms", type=float, default=50.0, help="fast_server.js's scripted TTFT")
    parser.add_argument("--itl-ms", type=float, default=10.0, help="fast_server.js's scripted ITL")
    parser.add_argument("--no-keepalive", dest="keepalive", action="store_false")
    parser.add_argument("--max-rss-growth-mib", type=float, default=64.0)
    parser.add_argument(
        "--max-rss-mib",
        type=float,
        default=1024.0,
        help="peak RSS allowed at any moment (e.g. while the level's summary is computed)",
    )
    parser.add_argument("--sample-s", type=float, default=1.0)
    parser.add_argument("--warm-s", type=float, default=10.0, help="RSS growth is measured from after this warm-up")
    parser.add_argument("--grace-s", type=float, default=120.0, help="time allowed past the duration before SIGKILL")
    parser.add_argument("--out", default=None, help="folder for records and reports (default: a temporary one)")
    parser.add_argument("--json", action="store_true", help="print the report as JSON")
    args = parser.parse_args()
    if args.short:
        args.minutes = 0.5
    if not args.minutes > 0 or args.concurrency < 1:
        parser.error("--minutes must be > 0 and --concurrency >= 1")

    command = "python bench/soak.py " + " ".join(sys.argv[1:])
    with tempfile.TemporaryDirectory(prefix="kneecap-soak-") as tmp:
        out_dir = Path(args.out) if args.out else Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        server = None
        if args.url:
            url = args.url.rstrip("/")
        elif args.target == "node":
            server, url = start_node(args.ttft_ms, args.itl_ms, out_dir)
            args.model = args.model or "fast-scripted"
        else:
            server, url = start_kneecap_serve(args.serve_args, out_dir)
        try:
            report = run_soak(args, url, out_dir)
        finally:
            if server is not None:
                stop(server)
        problems = verdict(report, args.max_rss_growth_mib, args.max_rss_mib)
        report["problems"] = problems
        (out_dir / "soak.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report, indent=1) if args.json else render(report, problems, command))
    return 0 if not problems else 1


if __name__ == "__main__":
    sys.exit(main())
