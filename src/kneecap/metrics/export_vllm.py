"""--export vllm: one level as the JSON `vllm bench serve --save-result` writes, so vLLM tooling can read it.

Pure: a level summary (metrics.summarize.summarize_level) and its records in, a dict out; the
caller writes the file. Keys, their order and their formulas follow vllm/benchmarks/serve.py
(calculate_metrics and the result / result_json dicts, read on vLLM's main branch in 2026) as vLLM
writes them without --save-detailed, with its default --percentile-metrics (ttft, tpot, itl) and
--metric-percentiles (99); keys, order and types are checked against a result file published from
vLLM 0.18.0 (tests/workload/data/vllm_0.18.0_save_result.json).

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

PERCENTILE_METRICS = ("ttft", "tpot", "itl")  # vLLM's default --percentile-metrics for generation backends


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


def to_vllm_result(
    summary: Mapping, records: Iterable[RequestRecord], *, model_id: str, date: str, burstiness: float = 1.0
) -> dict:
    """The level as vLLM's result JSON. `date` is vLLM's "%Y%m%d-%H%M%S" string (the caller's clock).

    request_rate is the level's rate, or "inf" in closed loop (vLLM's value without --request-rate);
    max_concurrency the level's concurrency, or None in open loop. duration is the summary's
    duration_s. request_goodput is the summary's goodput request_s when an SLO was given, else None
    (vLLM writes None without --goodput). Warmup records are left out, as in the summary.
    """
    import numpy as np

    from kneecap.metrics.summary_model import LevelSummary

    level = LevelSummary.model_validate(summary)
    duration = level.duration_s
    if not duration or duration <= 0:
        raise KneecapError("this level has no duration to export", "export a level that completed requests")
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.ok and r.sent_at is not None and r.end_at is not None]
    total_input = sum(req.input_tokens(r) for r in ok)
    total_output = sum(r.num_output_tokens for r in ok)
    values = {  # seconds, per successful request
        "ttft": [req.ttft_s(r) or 0.0 for r in ok],
        "tpot": [
            (r.end_at - r.sent_at - req.ttft_s(r)) / (r.num_output_tokens - 1)
            for r in ok
            if r.num_output_tokens > 1 and req.ttft_s(r) is not None
        ],
        "itl": [g for r in ok for g in req.chunk_gaps(r)[0]],
    }
    rate, concurrency = level.rate, level.concurrency
    out: dict = {
        "date": date,
        "endpoint_type": "openai",
        "backend": "openai",
        "label": None,
        "model_id": model_id,
        "tokenizer_id": model_id,
        "num_prompts": len(measured),
        "request_rate": float(rate) if rate is not None else "inf",
        "burstiness": float(burstiness),
        "max_concurrency": int(concurrency) if rate is None and concurrency is not None else None,
        "duration": float(duration),
        "completed": len(ok),
        "failed": len(measured) - len(ok),
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(ok) / duration,
        "request_goodput": level.goodput.request_s if level.goodput is not None else None,
        "output_throughput": total_output / duration,
        "total_token_throughput": (total_input + total_output) / duration,
        "max_output_tokens_per_s": _max_output_tokens_per_s(ok),
        "max_concurrent_requests": _peak_concurrency(ok),
        "rtfx": 0.0,
    }
    for metric in PERCENTILE_METRICS:  # vLLM's order; np.x(values or 0), as serve.py does
        arr = values[metric] or 0
        out[f"mean_{metric}_ms"] = float(np.mean(arr) * 1000)
        out[f"median_{metric}_ms"] = float(np.median(arr) * 1000)
        out[f"std_{metric}_ms"] = float(np.std(arr) * 1000)
        out[f"p99_{metric}_ms"] = float(np.percentile(arr, 99.0) * 1000)
    return out
