"""Benchmark: how long `kneecap simulate --find-max rate` takes for a 1000/1000 workload (target: <= 3 s wall on
2 cores), with the answer it gives and the machine's load average beside each figure.

    python bench/find_max_speed.py [--repeats 3] [--src DIR] [--profile] [--no-bytecode]
                                   [--out bench/results/find_max_speed.md]

Each repeat is one fresh `python -m kneecap simulate ...` process (interpreter start and imports included), timed
wall-clock, with its CPU seconds (user + system). --src runs another checkout's sources (e.g. an earlier revision's
`src`, best a copy: `git archive REV src | tar -x -C /tmp/before`, since compiled modules are cached beside the
sources) for a before/after on the same machine; --profile also writes cProfile's top functions (cumulative) of one
run beside the results. By default Python may cache compiled modules (as an installed package has them; one untimed
run first); --no-bytecode compiles every module on every run instead. A benchmark, not a unit test: timings depend
on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ARGS = (
    "simulate --model llama-3.1-8b --gpu h100-sxm --isl 1000 --osl 1000 --rate 64 --find-max rate "
    "--slo ttft_p99_ms=2000,tpot_p99_ms=50 --no-report"
).split()


def children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def run_once(src: Path, out: Path, profile: Path | None = None, bytecode: bool = True) -> tuple[float, float, dict]:
    env = dict(os.environ, PYTHONPATH=str(src))
    if bytecode:  # as an installed package runs: its modules compiled once (__pycache__, git-ignored), not per run
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    else:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    pre = [sys.executable] + (["-m", "cProfile", "-o", str(profile)] if profile else []) + ["-m", "kneecap"]
    c0, t0 = children_cpu_s(), time.perf_counter()
    r = subprocess.run([*pre, *ARGS, "--out", str(out)], env=env, capture_output=True, text=True)
    wall, cpu = time.perf_counter() - t0, children_cpu_s() - c0
    if r.returncode != 0:
        raise SystemExit(f"simulate failed ({r.returncode}): {r.stderr.strip()[-400:]}")
    doc = json.loads((out / "summary.json").read_text())
    return wall, cpu, doc


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--src", default=str(ROOT / "src"), help="the kneecap sources to run (default: this tree's)")
    ap.add_argument("--profile", action="store_true", help="also write a cProfile summary of one run")
    ap.add_argument("--out", default=str(ROOT / "bench/results/find_max_speed.md"))
    ap.add_argument("--budget-s", type=float, default=3.0)
    ap.add_argument(
        "--no-bytecode",
        dest="bytecode",
        action="store_false",
        help="compile every module on every run (PYTHONDONTWRITEBYTECODE=1) instead of caching it as an install does",
    )
    args = ap.parse_args()
    src = Path(args.src).resolve()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        if args.bytecode:  # one untimed run leaves the compiled modules behind
            run_once(src, Path(tmp) / "warm", bytecode=True)
        for i in range(args.repeats):
            load_before = os.getloadavg()[0]
            wall, cpu, doc = run_once(src, Path(tmp) / f"run{i}", bytecode=args.bytecode)
            m = doc["max_load"]
            levels = doc["levels"]
            rows.append(
                (
                    i + 1,
                    f"{wall:.2f}",
                    f"{cpu:.2f}",
                    f"{load_before:.2f}",
                    f"{os.getloadavg()[0]:.2f}",
                    len(m["probes"]),
                    len(levels),
                    sum(lv.get("requests") or 0 for lv in levels),
                    m["answer"],
                )
            )
            print(rows[-1], flush=True)
        if args.profile:
            import io
            import pstats

            prof = Path(tmp) / "prof.out"
            run_once(src, Path(tmp) / "prof", prof, bytecode=args.bytecode)
            buf = io.StringIO()
            pstats.Stats(str(prof), stream=buf).strip_dirs().sort_stats("cumulative").print_stats(40)
            stats_path = Path(args.out).with_name(Path(args.out).stem + "_profile.txt")
            stats_path.write_text(
                f"cProfile of `python -m kneecap {' '.join(ARGS)}` (sources: {src}), top 40 by cumulative time; "
                "profiling slows every call, so read the shares, not the seconds.\n" + buf.getvalue()
            )
            print(f"wrote {stats_path}")
    head = (
        "run",
        "wall s",
        "CPU s",
        "load average before",
        "load average after",
        "probes",
        "levels run",
        "requests simulated",
        "answer",
    )
    best = min(float(r[1]) for r in rows)
    lines = [
        "# kneecap simulate --find-max: speed",
        "",
        f"`python bench/find_max_speed.py --repeats {args.repeats}` on {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}), shared with other work; "
        f"sources: `{os.path.relpath(src, ROOT)}`. Each run is one fresh process of",
        "",
        f"    kneecap {' '.join(ARGS)}",
        "",
        "(interpreter start and imports included; "
        + (
            "modules compiled once beforehand, as an installed package has them"
            if args.bytecode
            else "every module compiled on every run, PYTHONDONTWRITEBYTECODE=1"
        )
        + "). CPU s: user + system seconds of that process. Load average: the 1-minute figure before and after each "
        "run (2 cores: above ~1 means other work shared them).",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    lines += [
        "",
        f"Fastest run {best:.2f} s; target (<= {args.budget_s:g} s wall): "
        + ("met" if best <= args.budget_s else "NOT met"),
        "",
    ]
    Path(args.out).write_text("\n".join(lines))
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
