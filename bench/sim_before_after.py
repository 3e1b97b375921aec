"""Time one `kneecap simulate` command on an earlier revision's sources and on this tree's, side by side, and check that
both write byte-identical requests.jsonl and summary.json (same seed, same step-time model).

    .venv/bin/python bench/sim_before_after.py --before f219579 --case long --requests 100
    .venv/bin/python bench/sim_before_after.py --before f219579 --case decode

The earlier revision's src/ is exported with `git archive` into a temporary folder; each run is a subprocess with
PYTHONPATH pointing at one of the two source trees (the installed venv's libraries are shared). Runs alternate
(before, after, before, after, ...) so that both meet the same load; the 1-minute load average is printed beside
each figure. Wall time is the subprocess's, peak RSS from os.wait4. Prints one line per run and a JSON summary.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CASES = {
    # the long-context case: 120,000-token prompts on Llama-3.1-405B, 8x H200, fp8 weights and KV, TensorRT-LLM defaults
    "long": [
        "--model",
        "llama-3.1-405b",
        "--gpu",
        "h200",
        "--tp",
        "8",
        "--weight-dtype",
        "fp8",
        "--kv-dtype",
        "fp8",
        "--isl",
        "120000",
        "--osl",
        "2048",
        "--concurrency",
        "max",
        "--engine-defaults",
        "trtllm",
    ],
    # the decode-heavy case: 1000 in / 1000 out at C=256 on Llama-3.1-70B, 8x H100
    "decode": [
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
    ],
}
DEFAULT_REQUESTS = {"long": 1000, "decode": 10000}


def _export(rev: str, dest: Path) -> Path:
    tar = dest / "src.tar"
    with open(tar, "wb") as f:
        subprocess.run(["git", "-C", str(ROOT), "archive", rev, "src"], stdout=f, check=True)
    with tarfile.open(tar) as t:
        t.extractall(dest, filter="data")
    return dest / "src"


def _run(src: Path, args: list[str], out: Path) -> dict:
    env = dict(os.environ, PYTHONPATH=str(src))
    load = os.getloadavg()[0]
    t0 = time.perf_counter()
    proc = subprocess.Popen(
        [sys.executable, "-m", "kneecap", "simulate", *args, "--no-report", "--quiet", "--out", str(out)],
        env=env,
        stdout=subprocess.DEVNULL,
    )
    _, status, rusage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t0
    if status != 0:
        raise SystemExit(f"kneecap simulate failed under {src} (status {status})")
    return {
        "wall_s": round(wall, 2),
        "cpu_s": round(rusage.ru_utime + rusage.ru_stime, 2),
        "peak_rss_mb": round(rusage.ru_maxrss / 1024),
        "load_1min_before": round(load, 2),
        "load_1min_after": round(os.getloadavg()[0], 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--before", required=True, help="git revision whose src/ is the 'before' (e.g. a commit id)")
    ap.add_argument("--case", choices=sorted(CASES), default="long")
    ap.add_argument("--requests", type=int, default=None, help="requests (default: 1000 long, 10000 decode)")
    ap.add_argument("--repeat", type=int, default=1, help="before/after pairs to run")
    a = ap.parse_args()
    n = a.requests or DEFAULT_REQUESTS[a.case]
    args = CASES[a.case] + ["--requests", str(n)]
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        before_src = _export(a.before, tmp)
        srcs = {"before": before_src, "after": ROOT / "src"}
        for i in range(a.repeat):
            outs = {}
            for label, src in srcs.items():
                outs[label] = tmp / f"{label}-{i}"
                row = {"run": i + 1, "code": label, **_run(src, args, outs[label])}
                rows.append(row)
                print(json.dumps(row), flush=True)
            same = {
                f: filecmp.cmp(outs["before"] / f, outs["after"] / f, shallow=False)
                for f in ("requests.jsonl", "summary.json")
            }
            print(json.dumps({"run": i + 1, "byte_identical": same}), flush=True)
            if not all(same.values()):
                raise SystemExit("the outputs differ")
    print(
        json.dumps(
            {
                "command": "kneecap simulate " + " ".join(args) + " --no-report --quiet --out DIR",
                "before": a.before,
                "runs": rows,
            },
            indent=1,
        )
    )


if __name__ == "__main__":
    main()
