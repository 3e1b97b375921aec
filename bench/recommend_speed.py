"""Benchmark: how long `kneecap recommend` takes over its full default grid (every priced GPU x tp 1/2/4/8 x
(MoE models: ep 1 and ep = tp; MLA MoE models also DP attention) x pp 1/2 x bf16/fp8 weights x bf16/fp8 KV x
4 max_num_seqs x 2 max_num_batched_tokens, and for rate loads the setups whose bound on disaggregated pools' cost
beats the cheapest aggregated candidate also as prefill/decode pools), and
whether the answer is the same with one worker and with two (target: >= 1,000 candidates in <= 60 s on 2 cores,
identical).

    python bench/recommend_speed.py [--workers 2] [--out bench/results/recommend_speed.md]

A benchmark, not a unit test: timings depend on the machine and on what else runs on it.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import time

from kneecap.metrics.slo import parse_slo
from kneecap.recommend.prices import load_prices
from kneecap.recommend.search import recommend
from kneecap.recommend.space import RecommendRequest

CASES = (
    ("llama-3.1-8b", "rate", 20.0, 1000, 200, "ttft_p99_ms=2000,tpot_p99_ms=50"),
    ("llama-3.1-70b", "rate", 4.0, 2000, 300, "ttft_p99_ms=3000,tpot_p99_ms=60"),
    ("llama-3.1-70b", "concurrency", 64, 2000, 300, "ttft_p99_ms=3000,tpot_p99_ms=60"),
    ("qwen3-30b-a3b", "rate", 10.0, 1000, 500, "ttft_p99_ms=1500,tpot_p99_ms=40"),
    ("deepseek-v3", "rate", 2.0, 2000, 300, "ttft_p99_ms=3000,tpot_p99_ms=60"),
)
COUNTS = (
    "evaluated",
    "pruned",
    "infeasible",
    "over_gpu_limit",
    "skipped_by_bound",
    "simulated",
    "not_simulated",
    "sized",
    "disaggregated_tried",
    "disaggregated_bounded_out",
)


def cpu_s() -> float:
    """CPU seconds of this process and its reaped children (the worker pool is shut down after each search)."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime


def stripped(doc: dict) -> str:
    return json.dumps({k: v for k, v in doc.items() if k != "seconds"}, sort_keys=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--out", default="bench/results/recommend_speed.md")
    ap.add_argument("--budget-s", type=float, default=60.0)
    args = ap.parse_args()
    prices = load_prices()
    gpus = tuple(g for g, p in prices.items() if p.usd_per_gpu_hour is not None)
    rows, ok = [], True
    for model, kind, load, isl, osl, slo in CASES:
        req = RecommendRequest(model=model, kind=kind, load=load, isl=isl, osl=osl, slo=parse_slo(slo), gpus=gpus)
        load_before = os.getloadavg()[0]
        c0, t0 = cpu_s(), time.perf_counter()
        doc = recommend(req, prices, workers=args.workers)
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        c1, t1 = cpu_s(), time.perf_counter()
        one = recommend(req, prices, workers=1)
        wall_one, cpu_one = time.perf_counter() - t1, cpu_s() - c1
        same = stripped(doc) == stripped(one)
        b = doc["best"]
        dis = b["disaggregated"]
        rows.append(
            (
                model,
                f"{kind} {load:g}",
                isl,
                osl,
                slo,
                *[doc[k] for k in COUNTS],
                f"{wall:.1f}",
                f"{cpu:.1f}",
                f"{wall_one:.1f}",
                f"{cpu_one:.1f}",
                f"{load_before:.1f}",
                "yes" if same else "NO",
                (f"{dis['prefill_replicas']}P+{dis['decode_replicas']}D" if dis else f"{b['replicas']}")
                + f" x {b['gpus_per_replica']} {b['gpu']} tp{b['tp']} pp{b['pp']} ep{b['ep']}{' DP-attention' if b['dp_attention'] else ''} "
                f"{b['weight_dtype']}/{b['kv_dtype']} "
                f"seqs {b['max_num_seqs']} tokens {b['max_num_batched_tokens']}, ${b['cost_per_hour']:.2f}/h",
            )
        )
        ok &= same and wall <= args.budget_s and doc["evaluated"] >= 1000
        print(rows[-1], flush=True)
    head = (
        "model",
        "load",
        "ISL",
        "OSL",
        "SLO",
        *COUNTS,
        f"wall s ({args.workers} workers)",
        "CPU s",
        "wall s (1 worker)",
        "CPU s (1 worker)",
        "load average before",
        "same answer",
        "best",
    )
    lines = [
        "# kneecap recommend: search speed",
        "",
        f"`python bench/recommend_speed.py --workers {args.workers}` on {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}), shared with other work. "
        "Every priced GPU of kneecap/data/prices.json, the default grid; `evaluated` counts every candidate planned and "
        "bounded, `simulated` those whose one-replica maximum was searched in the simulated engine, `sized` those "
        "then checked at the stated load with longer levels. CPU s: user + system seconds of the search and its worker "
        "processes; the load average (1 minute, before each case) shows how much of the 2 cores other work took at the time.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    lines += ["| " + " | ".join(str(x) for x in r) + " |" for r in rows]
    lines += [
        "",
        f"Target (>= 1,000 candidates in <= {args.budget_s:g} s with {args.workers} workers, the same answer with 1): "
        + ("met" if ok else "NOT met"),
        "",
    ]
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
