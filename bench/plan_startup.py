"""Benchmark: how fast `kneecap plan --json` starts and answers (target: well under 0.5 s).

Runs the seed-003 command N times as a fresh process, reports min / median / max wall time, and,
from one `python -X importtime` run, the slowest imports and whether numpy / pydantic / aiohttp /
matplotlib / rich were loaded. A benchmark, not a unit test: timings depend on the machine.

    python bench/plan_startup.py [--runs 10] [--budget-s 0.5]

Exit code 1 when the median exceeds the budget (so CI can opt in), else 0.
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

SEED_LINE = [
    "plan",
    "--preset",
    "gqa-70b",
    "--gpu",
    "mi300x",
    "--context",
    "8192",
    "--mean-context",
    "2050",
    "--compute-batch-cap",
    "128",
    "--json",
]
WATCH = ("numpy", "pydantic", "aiohttp", "matplotlib", "rich")


def wall_times(runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kneecap", *SEED_LINE], check=True, capture_output=True)
        times.append(time.perf_counter() - t0)
    return times


def import_profile() -> tuple[list[tuple[int, str]], set[str]]:
    """(cumulative microseconds, module) of top-level imports, and the watched packages that were imported."""
    p = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kneecap", *SEED_LINE], check=True, capture_output=True, text=True
    )
    rows, seen = [], set()
    for line in p.stderr.splitlines():
        if not line.startswith("import time:") or "|" not in line:
            continue
        _, cumulative, name = line.split("|")
        try:
            us = int(cumulative.strip())
        except ValueError:
            continue
        module = name.rstrip()
        top = module.strip().split(".")[0]
        if top in WATCH:
            seen.add(top)
        if not module.startswith("  "):  # direct imports of the entry point
            rows.append((us, module.strip()))
    return sorted(rows, reverse=True), seen


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--budget-s", type=float, default=0.5)
    args = ap.parse_args()
    times = wall_times(args.runs)
    med = statistics.median(times)
    print(
        f"kneecap plan --json (the worked example), {args.runs} fresh processes: "
        f"min {min(times):.3f} s, median {med:.3f} s, max {max(times):.3f} s (budget {args.budget_s} s)"
    )
    rows, seen = import_profile()
    print("slowest top-level imports (cumulative ms):")
    for us, name in rows[:8]:
        print(f"  {us / 1000:8.1f}  {name}")
    print(
        f"watched packages imported: {', '.join(sorted(seen)) or 'none'}"
        + ("  (pydantic: loaded by typer's own parameter coercion)" if "pydantic" in seen else "")
    )
    return 0 if med <= args.budget_s else 1


if __name__ == "__main__":
    sys.exit(main())
