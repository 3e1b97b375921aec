"""--export vllm: one level as the JSON `vllm bench serve --save-result` writes, so vLLM tooling can read it.

Pure: a level summary (metrics.summarize.summarize_level) and its records in, a dict out; the
caller writes the file. Keys, their order and their formulas follow vllm/benchmarks/serve.py
(calculate_metrics and the result / result_json dicts, read on vLLM's main branch in 2026); the
keys written without --save-detailed, their order and their types are checked against a result
file published from vLLM 0.18.0, which has no per-request latencies/queue_times:
`date`, `endpoint_type`, `backend`, `label`, `model_id`, `tokenizer_id`, `num_prompts`,
`request_rate`, `burstiness`, `max_concurrency`, `duration`, `completed`, `failed`,
`total_input_tokens`, `total_output_tokens`, `request_throughput`, `request_goodput`,
`output_throughput`, `total_token_throughput`, then (--save-detailed only) `input_lens`,
`output_lens`, `ttfts`, `itls`, `start_times`, `generated_texts`, `errors`, then
`max_output_tokens_per_s`, `max_concurrent_requests`, `rtfx`, then mean/median/std/pNN for each
of --percentile-metrics (vLLM's default ttft,tpot,itl; e2el on request) at --metric-percentiles
(default 99).

Formulas as vLLM's: std is numpy's population std; percentiles numpy's linear; TPOT per request
(latency - ttft) / (output_len - 1) for output_len > 1; ITL is every gap between consecutive
streamed chunks, pooled; max_concurrent_requests the peak of [start, end) intervals of successful
requests; max_output_tokens_per_s the busiest 1-second bucket from the first start. Where kneecap
knows more than vLLM records: a chunk carrying k tokens counts k tokens in its second (vLLM counts
one per chunk), and input lengths are the server's usage counts when reported.
"""

from __future__ import annotations

import math
from collections import Counter
from itertools import accumulate
from typing import Iterable, Mapping, Sequence

from kneecap.errors import KneecapError
from kneecap.metrics import request as req
from kneecap.records import RequestRecord

DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl")  # vLLM's default for generation backends
DEFAULT_METRIC_PERCENTILES = (99.0,)
PERCENTILE_METRICS = ("ttft", "tpot", "itl", "e2el")


def _stats(values: Sequence[float], percentiles: Sequence[float]) -> tuple[float, float, float, list[tuple[float, float]]]:
    """vLLM's mean/median/std/percentiles in ms of values in seconds (np.x(values or 0), as serve.py does)."""
    import numpy as np

    arr = list(values) or 0
    return (float(np.mean(arr) * 1000), float(np.median(arr) * 1000), float(np.std(arr) * 1000),
            [(p, float(np.percentile(arr, p) * 1000)) for p in percentiles])


def _peak_concurrency(ok: Sequence[RequestRecord]) -> int:
    events = sorted([(r.sent_at, 1) for r in ok] + [(r.end_at, -1) for r in ok])  # a departure first at one instant
    return max(accumulate(d for _, d in events), default=0)


def _max_output_tokens_per_s(ok: Sequence[RequestRecord]) -> float:
    t0 = min((r.sent_at for r in ok), default=0.0)
    buckets: Counter = Counter()
    for r in ok:
        for t, k in zip(r.chunk_times, r.chunk_tokens):
            if k > 0:
                buckets[int(math.floor(t - t0))] += int(k)
    return float(max(buckets.values(), default=0))


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def to_vllm_result(summary: Mapping, records: Iterable[RequestRecord], *, model_id: str, date: str,
                   backend: str = "openai", label: str | None = None, tokenizer_id: str | None = None,
                   num_prompts: int | None = None, burstiness: float = 1.0,
                   percentile_metrics: Sequence[str] = DEFAULT_PERCENTILE_METRICS,
                   metric_percentiles: Sequence[float] = DEFAULT_METRIC_PERCENTILES,
                   detailed: bool = False) -> dict:
    """The level as vLLM's result JSON. `date` is vLLM's "%Y%m%d-%H%M%S" string (the caller's clock).

    request_rate is the level's rate, or "inf" in closed loop (vLLM's value without --request-rate);
    max_concurrency the level's concurrency, or None in open loop. duration is the summary's
    duration_s. request_goodput is the summary's goodput request_s when an SLO was given, else None
    (vLLM writes None without --goodput). Warmup records are left out, as in the summary.
    """
    bad = [m for m in percentile_metrics if m not in PERCENTILE_METRICS]
    if bad:
        raise KneecapError(f"unknown vLLM percentile metric {', '.join(bad)}", f"use some of {', '.join(PERCENTILE_METRICS)}")
    duration = summary.get("duration_s")
    if not duration or duration <= 0:
        raise KneecapError("this level has no duration to export", "export a level that completed requests")
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok and r.sent_at is not None and r.end_at is not None]
    ok_ids = {id(r) for r in ok}

    input_lens = [req.input_tokens(r) for r in measured]
    output_lens = [r.num_output_tokens if id(r) in ok_ids else 0 for r in measured]
    total_input = sum(req.input_tokens(r) for r in ok)
    total_output = sum(output_lens)
    ttfts = [req.ttft_s(r) or 0.0 for r in ok]
    e2els = [r.end_at - r.sent_at for r in ok]
    tpots = [(r.end_at - r.sent_at - req.ttft_s(r)) / (r.num_output_tokens - 1) for r in ok
             if r.num_output_tokens > 1 and req.ttft_s(r) is not None]
    itls = [g for r in ok for g in req.chunk_gaps(r)[0]]  # vLLM's itl: gaps between token-bearing chunks, in s

    rate = summary.get("rate")
    concurrency = summary.get("concurrency")
    goodput = summary.get("goodput")
    out: dict = {
        "date": date,
        "endpoint_type": backend,
        "backend": backend,
        "label": label,
        "model_id": model_id,
        "tokenizer_id": tokenizer_id if tokenizer_id is not None else model_id,
        "num_prompts": num_prompts if num_prompts is not None else len(measured),
        "request_rate": float(rate) if rate is not None else "inf",
        "burstiness": float(burstiness),
        "max_concurrency": int(concurrency) if rate is None and concurrency is not None else None,
        "duration": float(duration),
        "completed": len(ok),
        "failed": len(measured) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration,
        "request_goodput": goodput.get("request_s") if isinstance(goodput, Mapping) else None,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
    }
    if detailed:
        out["input_lens"] = input_lens
        out["output_lens"] = output_lens
        out["ttfts"] = [(req.ttft_s(r) or 0.0) if id(r) in ok_ids else 0.0 for r in measured]
        out["itls"] = [req.chunk_gaps(r)[0] if id(r) in ok_ids else [] for r in measured]
        out["start_times"] = [r.sent_at for r in measured]  # on kneecap's run clock (vLLM: time.perf_counter())
        out["generated_texts"] = ["" for _ in measured]  # kneecap keeps no generated text
        out["errors"] = ["" if id(r) in ok_ids else (r.error_message or r.error_kind or r.status) for r in measured]
    out["max_output_tokens_per_s"] = _max_output_tokens_per_s(ok)
    out["max_concurrent_requests"] = _peak_concurrency(ok)
    out["rtfx"] = 0.0
    values = {"ttft": ttfts, "tpot": tpots, "itl": itls, "e2el": e2els}
    for metric in PERCENTILE_METRICS:  # vLLM's order: ttft, tpot, itl, e2el
        if metric not in percentile_metrics:
            continue
        mean, median, std, pcts = _stats(values[metric], metric_percentiles)
        out[f"mean_{metric}_ms"] = mean
        out[f"median_{metric}_ms"] = median
        out[f"std_{metric}_ms"] = std
        for p, v in pcts:
            out[f"p{_p_word(p)}_{metric}_ms"] = v
    return out
