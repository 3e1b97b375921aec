"""kneecap's client on Ray (`kneecap bench --ray`, two local Ray nodes) against one process, at C=1024 and
C=4096, on the scripted Node server: client-added TTFT and output tokens ingested per client CPU-second.

Starts bench/fast_server.js pinned to one core (as bench/compare_clients.py does, whose measurement and
pairing this reuses), and for each configuration runs `kneecap bench` in one process pinned to the other
core, then `kneecap bench --ray` against two `ray start` nodes (tests/localnodes.py) pinned to that
same core, one actor per node (C/2 streams each). Both clients therefore get one core: on this 2-core
machine the Ray run measures what Ray costs and how the two actors share a core, not the gain of
separate machines. Client CPU: one process = its level's CPU; Ray = the two actors' level CPU, and the
driver process (which receives every record and writes requests.jsonl) reported beside it (whole process,
start-up included). Writes bench/results/ray_clients.md (raw rows: ray_clients.json).

  .venv/bin/python bench/ray_clients.py [--quick]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from client_runs import CLIENTS, level_cpu_s, run_kneecap, run_pinned  # noqa: E402
from compare_clients import Scenario, fmt, measure  # noqa: E402
from pairing import per_token_gaps_ms  # noqa: E402

RESULTS = HERE / "results"
CLUSTER: dict = {}  # address of the local Ray cluster while it runs
EXTRAS: dict = {}  # (client, scenario, C) -> facts measure() does not copy into its row
ONE, RAY = "one-process", "ray-2-nodes"


def scenarios(quick: bool) -> list[Scenario]:
    per_stream = 1 if quick else 2  # requests per stream: every level reaches its concurrency
    out = []
    for c in (1024, 4096):
        out.append(Scenario("latency", c, per_stream * c, 16, 64, 200.0, 20.0))
        out.append(Scenario("ingest", c, per_stream * c, 16, 256, 0.0, 0.0, 1, 8))
    return out


def run_kneecap_ray(url: str, sc, cpu: int, work: Path) -> dict:
    """`kneecap bench --ray` on the local cluster, one actor per node; the driver pinned to `cpu`."""
    from kneecap.records import read_records

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
        "--keepalive",
        "--out",
        str(out_dir),
        "--quiet",
        "--json",
        "--ray",
        CLUSTER["address"],
        "--ray-streams-per-actor",
        str(-(-sc.concurrency // 2)),
    ]
    code, driver_cpu_s, err = run_pinned(cmd, cpu, timeout_s=900)
    if code != 0:
        return {"error": f"kneecap bench --ray exited {code}: {err.strip().splitlines()[-1:] if err.strip() else ''}"}
    summary = json.loads((out_dir / "summary.json").read_text())
    epoch = json.loads((out_dir / "manifest.json").read_text()).get("clock_epoch_s")
    level = summary["levels"][0]
    records = [r for r in read_records(out_dir / "requests.jsonl") if not r.warmup]
    ok = [r for r in records if r.ok]
    client = level.get("client") or {}
    actors_cpu_s = level_cpu_s(client)
    ttft = [
        (r.first_token_at - r.sent_at) * 1000.0 for r in ok if r.first_token_at is not None and r.sent_at is not None
    ]
    itl = [g for r in ok for g in per_token_gaps_ms(r.chunk_times, r.chunk_tokens)]
    per_request = [
        {
            "sha256": r.prompt_hash,
            "ok": r.ok and bool(r.chunk_times),
            "sent_s": r.sent_at + epoch,
            "chunk_times_s": [t + epoch for t in r.chunk_times],
            "chunk_tokens": r.chunk_tokens,
        }
        for r in records
    ]
    workers = client.get("per_worker") or []
    EXTRAS[(RAY, sc.name, sc.concurrency)] = {
        "driver_cpu_s": driver_cpu_s,
        "ray": client.get("ray"),
        "actor_cpu_util": [w.get("cpu_fraction") for w in workers],
        "actor_loop_lag_p99_ms": [w.get("loop_lag_p99_ms") for w in workers],
        "clock_offsets_us": [((w.get("ray") or {}).get("clock_offset_s") or 0) * 1e6 for w in workers],
        "clock_rtts_us": [((w.get("ray") or {}).get("clock_rtt_s") or 0) * 1e6 for w in workers],
        "suspect": level.get("suspect"),
    }
    return {
        "completed": len(ok),
        "duration_s": level["duration_s"],
        "output_tokens": sum((r.output_tokens or sum(r.chunk_tokens)) for r in ok),
        "cpu_s": actors_cpu_s,
        "cpu_source": "the actors' levels (driver apart)",
        "ttft_ms": ttft,
        "itl_ms": itl,
        "warmup_requests": 0,
        "clock": "monotonic",
        "per_request": per_request,
    }


def run_one_process(url: str, sc, cpu: int, work: Path) -> dict:
    result = run_kneecap(url, sc, cpu, work)
    if "error" not in result:
        summary = json.loads((work / "kneecap-out" / "summary.json").read_text())
        w = (summary["levels"][0].get("client") or {}).get("per_worker") or [{}]
        EXTRAS[(ONE, sc.name, sc.concurrency)] = {
            "actor_cpu_util": [w[0].get("cpu_fraction")],
            "actor_loop_lag_p99_ms": [w[0].get("loop_lag_p99_ms")],
            "suspect_reasons": w[0].get("suspect_reasons"),
            "suspect": summary["levels"][0].get("suspect"),
        }
    return result


def render(rows: list[dict], command: str, install: str, load_end: float) -> str:
    lines = [
        "# kneecap on Ray (two local nodes) vs one process",
        "",
        f"Command: `{command}`",
        "",
        f"Machine: {platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"Ray {CLUSTER.get('ray_version')}; server (bench/fast_server.js) pinned to core 0; the one-process client, "
        "the Ray driver and both Ray nodes (with their actors) pinned to core 1. "
        f"Load average (1 min) at the end: {load_end:.2f} (other work on this machine shares both cores). "
        f"{install}",
        "",
        "## Latency added by the client (scripted TTFT 200 ms, ITL 20 ms, 1 token/chunk, OSL 64)",
        "",
        "| client | C | completed | TTFT mean client / server ms | TTFT err mean / p50 / p99 ms | ITL err mean ms "
        "| client CPU util (per actor) | loop lag p99 ms (per actor) | suspect | load avg before / after |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---|---:|",
    ]
    for r in rows:
        sc = r["scenario"]
        if sc["name"] != "latency":
            continue
        if "error" in r:
            lines.append(f"| {r['client']} | {sc['concurrency']} | error: {r['error'][:160]} | | | | | | |")
            continue
        p = r["pairing"] if r["pairing"].get("paired") else {}
        lines.append(
            f"| {r['client']} | {sc['concurrency']} | {r['completed']}/{r['requests']} "
            f"| {fmt(r['client_ttft_mean_ms'])} / {fmt(r['server_ttft_mean_ms'])} "
            f"| {fmt(r['ttft_err_mean_ms'])} / {fmt(p.get('ttft_err_p50_ms'))} / {fmt(p.get('ttft_err_p99_ms'))} "
            f"| {fmt(r['itl_err_mean_ms'], 3)} | {' / '.join(fmt(x) for x in r.get('actor_cpu_util') or [])} "
            f"| {' / '.join(fmt(x) for x in r.get('actor_loop_lag_p99_ms') or [])} | {r.get('suspect')} "
            f"| {fmt(r.get('load_avg_before'))} / {fmt(r.get('load_avg_after'))} |"
        )
    lines += [
        "",
        "## Ingest (ITL 0, 8 SSE events of 1 token per server write, OSL 256)",
        "",
        "| client | C | completed | output tok/s | output tok per client CPU-s | client CPU-s | Ray driver CPU-s "
        "(whole process) | output tok per CPU-s, driver included | client CPU util (per actor) "
        "| loop lag p99 ms (per actor) | suspect |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|",
    ]
    for r in rows:
        sc = r["scenario"]
        if sc["name"] != "ingest":
            continue
        if "error" in r:
            lines.append(f"| {r['client']} | {sc['concurrency']} | error: {r['error'][:160]} | | | | | | |")
            continue
        driver = r.get("driver_cpu_s")
        with_driver = r["output_tokens"] / (r["cpu_s"] + driver) if driver else None
        lines.append(
            f"| {r['client']} | {sc['concurrency']} | {r['completed']}/{r['requests']} | {fmt(r['output_tok_s'], 0)} "
            f"| {fmt(r['output_tok_per_cpu_s'], 0)} | {fmt(r['cpu_s'])} | {fmt(driver)} | {fmt(with_driver, 0)} "
            f"| {' / '.join(fmt(x) for x in r.get('actor_cpu_util') or [])} "
            f"| {' / '.join(fmt(x) for x in r.get('actor_loop_lag_p99_ms') or [])} | {r.get('suspect')} |"
        )
    lines += ["", "## Where one process saturates", ""]
    for name in ("latency", "ingest"):
        for c in (1024, 4096):
            one = next(
                (
                    r
                    for r in rows
                    if r["client"] == ONE
                    and r["scenario"]["name"] == name
                    and r["scenario"]["concurrency"] == c
                    and "error" not in r
                ),
                None,
            )
            if one:
                reasons = "; ".join(one.get("suspect_reasons") or []) or "none"
                lines.append(
                    f"- {name} C={c}, one process: CPU {fmt(one['cpu_util'])} of its core over the level, "
                    f"event-loop lag p99 {fmt((one.get('actor_loop_lag_p99_ms') or [None])[0])} ms, "
                    f"{fmt(one['output_tok_s'], 0)} output tok/s; its own suspect reasons: {reasons}"
                )
    ones = [r for r in rows if r["client"] == ONE and "error" not in r]
    full = [r for r in ones if r["cpu_util"] >= 0.9]
    if ones and not full:
        lines += [
            "",
            f"This run cannot say at which concurrency one process saturates a core of its own: it never had "
            f"one (CPU utilisation at most {fmt(max(r['cpu_util'] for r in ones))} of its core at every level, "
            "with the event-loop lags above).",
        ]
    elif full:
        first = min(full, key=lambda r: r["scenario"]["concurrency"])
        lines += [
            "",
            f"One process used at least 0.9 of its core from C={first['scenario']['concurrency']} "
            f"({first['scenario']['name']}).",
        ]
    lines += [
        "",
        "CPU utilisation is the client's CPU seconds over the level's wall time. Well below 1 together with "
        "an event-loop lag of hundreds of milliseconds means the client was runnable but waiting for its core, "
        "which other work on this machine shared (load averages above): the process is starved, not idle. "
        "The two Ray actors are two processes on that same core, so they get a larger share of it than one "
        "process does; on separate machines each actor has a core of its own.",
        "",
        "Definitions as in bench/results/compare_clients.md: TTFT err = client TTFT − the server's own TTFT "
        "(its first token-bearing send − the request's arrival), requests paired by prompt sha256; kneecap "
        "records are seconds since the CLOCK_MONOTONIC epoch in manifest.json, and a Ray actor's stamps are "
        "moved into the driver's clock by its measured offset (both nodes share this machine's clock, so the "
        "true offset is 0: the offsets measured are listed in ray_clients.json). Ingest per client CPU-s = "
        "output tokens / the client's CPU seconds over the level (user+system; for Ray, the two actors').",
    ]
    return "\n".join(lines) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one request per stream instead of two (a smoke run)")
    parser.add_argument("--server-cpu", type=int, default=0)
    parser.add_argument("--client-cpu", type=int, default=1)
    parser.add_argument("--out", default=str(RESULTS / "ray_clients.md"))
    parser.add_argument("--from-json", default=None, help="render the markdown again from a run's ray_clients.json")
    args = parser.parse_args()
    if args.from_json:
        saved = json.loads(Path(args.from_json).read_text())
        CLUSTER.update(saved["cluster"])
        text = render(saved["rows"], saved["command"], saved["install"], saved["load_avg_end"])
        Path(args.out).write_text(text)
        print(text)
        return 0
    import signal

    import ray

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))  # the with-block below stops the Ray nodes

    sys.path.insert(0, str(HERE.parent / "tests"))  # tests/localnodes.py: not installed with the package
    from localnodes import LocalNodes

    CLIENTS[ONE] = run_one_process
    CLIENTS[RAY] = run_kneecap_ray
    command = "python bench/ray_clients.py" + (" --quick" if args.quick else "")
    rows = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="kneecap-ray-clients-") as tmp:
        t0 = time.monotonic()
        with LocalNodes(num_nodes=2, cpus_per_node=1, cpu_list=str(args.client_cpu)) as nodes:
            CLUSTER.update(address=nodes.address, ray_version=ray.__version__, start_s=time.monotonic() - t0)
            for sc in scenarios(args.quick):
                for client in (ONE, RAY):
                    print(f"{sc.name} C={sc.concurrency} {client} ...", file=sys.stderr, flush=True)
                    load_before = os.getloadavg()[0]
                    row = measure(client, sc, args.server_cpu, args.client_cpu, Path(tmp))
                    row.update(
                        EXTRAS.pop((client, sc.name, sc.concurrency), {}),
                        load_avg_before=load_before,
                        load_avg_after=os.getloadavg()[0],
                    )
                    rows.append(row)
    install = (
        f"The two Ray nodes took {CLUSTER['start_s']:.1f} s to start; the whole run took "
        f"{time.monotonic() - started:.0f} s."
    )
    load_end = os.getloadavg()[0]
    text = render(rows, command, install, load_end)
    Path(args.out).write_text(text)
    Path(args.out).with_suffix(".json").write_text(
        json.dumps(
            {"command": command, "install": install, "load_avg_end": load_end, "cluster": CLUSTER, "rows": rows},
            indent=1,
            default=str,
        )
    )
    print(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
