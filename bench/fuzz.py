"""The long fuzz run: at least 10,000 hypothesis cases per parser, every failure kept (not only the first).

Targets (tests/fuzz/fuzz_targets.py, shared with the short CI fuzz tests in tests/fuzz/):
SSE parser, OpenAI chunk decoder, config.json reader (dict and file + plan), GGUF reader,
load-plan YAML, records reader. Prints, per target: cases run, distinct failures (by exception
type and the innermost kneecap frame), time, and for each failure the smallest repro seen.

    .venv/bin/python bench/fuzz.py                 # 10,000 cases per target
    .venv/bin/python bench/fuzz.py --cases 2000 --only sse,records
Exit code: 0 when no target failed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests" / "fuzz"))  # fuzz_targets (not a package; bench/ is not on the path first)
sys.path = [p for p in sys.path if Path(p or ".").resolve() != HERE]

import os  # noqa: E402

os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a mutated model name must never reach the network

from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402

import fuzz_targets as ft  # noqa: E402


def run_target(target: ft.Target, cases: int, seed: int, folder: Path) -> dict:
    """Run `cases` examples; never stop at a failure: keep the shortest repro per failure signature."""
    failures: dict[str, tuple[int, str]] = {}
    count = 0

    @settings(
        max_examples=cases,
        database=None,
        deadline=None,
        derandomize=False,
        suppress_health_check=list(HealthCheck),
        phases=(Phase.generate,),
    )
    @given(target.strategy)
    def body(example):
        nonlocal count
        count += 1
        try:
            if target.needs_folder:
                target.check(example, folder)
            else:
                target.check(example)
        except ft.Escaped as exc:
            sig = ft.signature(exc)
            text = str(exc)
            if sig not in failures or len(text) < failures[sig][0]:
                failures[sig] = (len(text), text)
            failures.setdefault("_count_" + sig, (0, ""))
            n, _ = failures["_count_" + sig]
            failures["_count_" + sig] = (n + 1, "")

    from hypothesis import seed as hseed

    t0 = time.perf_counter()
    hseed(seed)(body)()
    elapsed = time.perf_counter() - t0
    found = {k: v[1] for k, v in failures.items() if not k.startswith("_count_")}
    counts = {k[len("_count_") :]: v[0] for k, v in failures.items() if k.startswith("_count_")}
    return {"name": target.name, "cases": count, "failures": found, "counts": counts, "seconds": elapsed}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", type=int, default=10_000, help="hypothesis examples per target (default 10000)")
    ap.add_argument("--only", default="", help="comma list of target names")
    ap.add_argument("--seed", type=int, default=20261129)
    args = ap.parse_args(argv)
    wanted = {n.strip() for n in args.only.split(",") if n.strip()}
    rows = []
    with tempfile.TemporaryDirectory(prefix="kneecap-fuzz-") as tmp:
        for target in ft.TARGETS:
            if wanted and target.name not in wanted:
                continue
            print(f"fuzzing {target.name} ({args.cases} cases)...", file=sys.stderr, flush=True)
            rows.append(run_target(target, args.cases, args.seed, Path(tmp)))
    print(f"{'target':<18} {'cases':>7} {'failures':>8} {'seconds':>8} {'ms/case':>8}")
    for r in rows:
        per = r["seconds"] / r["cases"] * 1e3 if r["cases"] else 0.0
        print(f"{r['name']:<18} {r['cases']:>7} {len(r['failures']):>8} {r['seconds']:>8.1f} {per:>8.2f}")
    for r in rows:
        for sig, text in sorted(r["failures"].items()):
            print(f"\n[{r['name']}] {sig} (hit {r['counts'].get(sig, '?')} times)\n  {text}")
    return 1 if any(r["failures"] for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
