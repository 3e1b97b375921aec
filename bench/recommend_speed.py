"""Benchmark: how long `kneecap recommend` takes over its full default grid (the GPUs named x tp 1/2/4/8 x
(MoE models: ep 1 and ep = tp; MLA MoE models also DP attention) x pp 1/2 x bf16/fp8 weights x bf16/fp8 KV x
6 max_num_seqs x 5 max_num_batched_tokens x prefix caching on/off, and for rate loads the setups whose bound on
disaggregated pools' cost beats the cheapest aggregated candidate also as prefill/decode pools), the search's
funnel (considered, do not fit, ruled out by the bound, simulated, checked at steady state), and whether the answer
is the same with one worker and with two (target: >= 5,000 candidates in <= 60 s on 2 cores, identical).

    python bench/recommend_speed.py [--cases example|all] [--spec] [--workers 2] [--out bench/results/recommend_speed.md]

`example` (the default): Llama-3.1-70B at 8 req/s, 1000/1000 tokens, p99 TTFT 2 s / TPOT 50 ms, on
h100-sxm,h200,b200,mi300x, as `kneecap recommend --model llama-3.1-70b --rate 8 --isl 1000 --osl 1000
--slo ttft_p99_ms=2000,tpot_p99_ms=50 --gpus h100-sxm,h200,b200,mi300x` runs it. `all`: also five cases over every
priced GPU. `--spec` adds the example with speculative decoding searched (EAGLE, K 1-3, acceptance 0.7 a position
assumed: `... --spec-method eagle --spec-tokens 3 --spec-acceptance 0.7`). The load average (1 minute) is recorded
before and after each timing.

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
from kneecap.sim.speculative import SpecDecoding

EXAMPLE = (
    "llama-3.1-70b",
    "rate",
    8.0,
    1000,
    1000,
    "ttft_p99_ms=2000,tpot_p99_ms=50",
    ("h100-sxm", "h200", "b200", "mi300x"),
)
CASES = (
    ("llama-3.1-8b", "rate", 20.0, 1000, 200, "ttft_p99_ms=2000,tpot_p99_ms=50"),
    ("llama-3.1-70b", "rate", 4.0, 2000, 300, "ttft_p99_ms=3000,tpot_p99_ms=60"),
    ("llama-3.1-70b", "concurrency", 64, 2000, 300, "ttft_p99_ms=3000,tpot_p99_ms=60"),
    ("qwen3-30b-a3b", "rate", 10.0, 1000, 500, "ttft_p99_ms=1500,tpot_p99_ms=40"),
    ("deepseek-v3", "rate", 2.0, 2000, 300, "ttft_p99_ms=3000,tpot_p99_ms=60"),
)
FUNNEL = ("considered", "do_not_fit", "ruled_out_by_bound", "simulated", "checked_at_steady_state")
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
    ap.add_argument("--min-candidates", type=int, default=5000)
    ap.add_argument("--cases", choices=("example", "all"), default="example")
    ap.add_argument("--spec", action="store_true", help="also the example with EAGLE K<=3 at acceptance 0.7")
    args = ap.parse_args()
    prices = load_prices()
    priced = tuple(g for g, p in prices.items() if p.usd_per_gpu_hour is not None)
    cases = [(*EXAMPLE, None)] + ([(*c, priced, None) for c in CASES] if args.cases == "all" else [])
    if args.spec:
        cases.append((*EXAMPLE, SpecDecoding("eagle", 3, (0.7,))))
    rows, ok = [], True
    for model, kind, load, isl, osl, slo, gpus, spec in cases:
        req = RecommendRequest(
            model=model, kind=kind, load=load, isl=isl, osl=osl, slo=parse_slo(slo), gpus=gpus, spec=spec
        )
        load_before = os.getloadavg()[0]
        c0, t0 = cpu_s(), time.perf_counter()
        doc = recommend(req, prices, workers=args.workers)
        wall, cpu = time.perf_counter() - t0, cpu_s() - c0
        load_after = os.getloadavg()[0]
        c1, t1 = cpu_s(), time.perf_counter()
        one = recommend(req, prices, workers=1)
        wall_one, cpu_one = time.perf_counter() - t1, cpu_s() - c1
        load_after_one = os.getloadavg()[0]
        same = stripped(doc) == stripped(one)
        b = doc["best"]
        dis = b["disaggregated"]
        rows.append(
            (
                model,
                f"{kind} {load:g}" + (f" + {spec.method} K<={spec.tokens} at {spec.acceptance[0]:g}" if spec else ""),
                isl,
                osl,
                slo,
                "all priced" if gpus == priced else ",".join(gpus),
                *[doc["funnel"][k] for k in FUNNEL],
                *[doc[k] for k in COUNTS],
                f"{wall:.1f}",
                f"{cpu:.1f}",
                f"{load_before:.1f} / {load_after:.1f}",
                f"{wall_one:.1f}",
                f"{cpu_one:.1f}",
                f"{load_after:.1f} / {load_after_one:.1f}",
                "yes" if same else "NO",
                (f"{dis['prefill_replicas']}P+{dis['decode_replicas']}D" if dis else f"{b['replicas']}")
                + f" x {b['gpus_per_replica']} {b['gpu']} tp{b['tp']} pp{b['pp']} ep{b['ep']}{' DP-attention' if b['dp_attention'] else ''} "
                f"{b['weight_dtype']}/{b['kv_dtype']} "
                f"seqs {b['max_num_seqs']} tokens {b['max_num_batched_tokens']}, ${b['cost_per_hour']:.2f}/h",
            )
        )
        met = same and wall <= args.budget_s and doc["evaluated"] >= args.min_candidates
        rows[-1] = (*rows[-1], "met" if met else "NOT met")
        ok &= met
        print(rows[-1], flush=True)
    head = (
        "model",
        "load",
        "ISL",
        "OSL",
        "SLO",
        "GPUs",
        *FUNNEL,
        *COUNTS,
        f"wall s ({args.workers} workers)",
        "CPU s",
        "load average before / after",
        "wall s (1 worker)",
        "CPU s (1 worker)",
        "load average before / after (1 worker)",
        "same answer",
        "best",
        "target",
    )
    lines = [
        "# kneecap recommend: search speed",
        "",
        f"`python bench/recommend_speed.py --cases {args.cases}{' --spec' if args.spec else ''} --workers {args.workers}`"
        f" on {os.cpu_count()} cores "
        f"({platform.processor() or platform.machine()}, Python {platform.python_version()}), shared with other work. "
        "The GPUs named (all priced: every priced GPU of kneecap/data/prices.json), the default grid; the funnel: "
        "`considered` every candidate, `ruled_out_by_bound` those the roofline bound shows cannot meet the SLO or "
        "cannot cost less than the answer, `simulated` those whose one-replica maximum was searched over levels sized "
        "to steady state, `checked_at_steady_state` those sized at the stated load. `evaluated` counts every candidate planned and "
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
        f"Target (>= {args.min_candidates:,} candidates in <= {args.budget_s:g} s with {args.workers} workers, "
        "the same answer with 1), per case in the last column: "
        + ("met by every case" if ok else "NOT met by every case"),
        "",
    ]
    with open(args.out, "w") as fh:
        fh.write("\n".join(lines))
    print("\n".join(lines))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
