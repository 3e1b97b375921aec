"""One level's summary from its RequestRecords: counts, throughput, latency distributions, errors.

Pure: records in, a JSON-ready dict out (the DESIGN `levels[]` entry plus kneecap's extras).
Formulas live in metrics/request.py and are defined in docs/metrics.md. Warmup records are
excluded (and counted); failed and timed-out requests are counted, never dropped.
"""

from __future__ import annotations

from collections import Counter
from typing import Iterable, Mapping

from kneecap.errors import KneecapError
from kneecap.metrics import request as req
from kneecap.metrics.slo import level_meets_slo, parse_slo, per_request_budgets_ms, request_is_good
from kneecap.metrics.stats import distribution, weighted_distribution
from kneecap.metrics.token_gaps import token_gaps
from kneecap.records import TIMEOUT, RequestRecord
from kneecap.units import MS_PER_S

MAX_MISMATCH_EXAMPLES = 5


def _ms(values_s: Iterable[float | None]) -> dict:
    return distribution([v * MS_PER_S for v in values_s if v is not None])


def _per_s(count: float, duration_s: float | None) -> float | None:
    return count / duration_s if duration_s else None


def _level_value(records: list[RequestRecord], concurrency, rate) -> dict:
    if concurrency is not None or rate is not None:
        return {k: v for k, v in (("concurrency", concurrency), ("rate", rate)) if v is not None}
    for key in ("rate", "concurrency"):
        values = {getattr(r, key) for r in records if getattr(r, key) is not None}
        if len(values) == 1:
            return {key: values.pop()}
    return {"concurrency": None}


def new_token_mismatch() -> dict:
    return {"requests": 0, "output": 0, "prompt": 0, "output_unreported": 0, "output_vs_chunks": 0, "examples": []}


def add_token_mismatch(out: dict, r: RequestRecord) -> None:
    """Count one completed request into a token_mismatch dict (see docs/metrics.md)."""
    bad_out = (
        r.output_tokens is not None
        and r.expected_output_tokens is not None
        and r.output_tokens != r.expected_output_tokens
    )
    bad_in = (
        r.prompt_tokens is not None
        and r.expected_input_tokens is not None
        and r.prompt_tokens != r.expected_input_tokens
    )
    out["output"] += bad_out
    out["prompt"] += bad_in
    out["output_unreported"] += r.output_tokens is None
    out["output_vs_chunks"] += bool(
        r.output_tokens is not None and r.chunk_tokens and r.output_tokens != sum(r.chunk_tokens)
    )
    if bad_out or bad_in:
        out["requests"] += 1
        if len(out["examples"]) < MAX_MISMATCH_EXAMPLES:
            out["examples"].append(
                {
                    "request_id": r.request_id,
                    "expected_input_tokens": r.expected_input_tokens,
                    "prompt_tokens": r.prompt_tokens,
                    "expected_output_tokens": r.expected_output_tokens,
                    "output_tokens": r.output_tokens,
                }
            )


def wall_time_s(duration_s: float | None, first_sent_at: float | None, last_end_at: float | None) -> float | None:
    """The level's wall time: duration_s when the driver measured it, else last end_at - first sent_at."""
    if duration_s is not None:
        if not duration_s > 0:
            raise KneecapError(
                f"level duration must be positive, got {duration_s!r} s",
                "pass the level's wall time in seconds, or None to take it from the records",
            )
        return float(duration_s)
    if first_sent_at is None or last_end_at is None or last_end_at <= first_sent_at:
        return None
    return last_end_at - first_sent_at


def as_slo(slo: Mapping | str | None) -> dict | None:
    """An SLO given as a string or a dict -> a validated dict, or None when there is none."""
    return parse_slo(slo) or None  # parse_slo(None) is {}


def attach_goodput_and_slo(
    summary: dict, slo: dict | None, good_requests: int, good_output_tokens: int, wall_s: float | None
) -> None:
    """Add `goodput` and `slo` {met, breaches} to a level summary (both None without an SLO)."""
    if not slo:
        summary["goodput"] = None
        summary["slo"] = None
        return
    requests = summary["requests"]
    summary["goodput"] = {
        "requests": good_requests,
        "request_s": _per_s(good_requests, wall_s),
        "output_tok_s": _per_s(good_output_tokens, wall_s),
        "fraction": good_requests / requests if requests else None,
    }
    met, breaches = level_meets_slo(summary, slo)
    summary["slo"] = {"met": met, "breaches": breaches}


def summarize_level(
    records: Iterable[RequestRecord],
    *,
    concurrency=None,
    rate=None,
    duration_s: float | None = None,
    slo: Mapping | str | None = None,
) -> dict:
    """Summary of one sweep level (all its records, warmup included — they are excluded here).

    concurrency / rate: the level's load value (else inferred from the records' fields).
    duration_s: the level's wall time in seconds; default max(end_at) - min(sent_at) over the
    non-warmup records. slo: a parsed SLO dict (or its string form) for goodput and the SLO
    verdict; None gives goodput = slo = None. Latencies in ms, throughput per second.
    """
    all_records = list(records)
    measured = [r for r in all_records if not r.warmup]
    completed = [r for r in measured if r.ok]
    failed = [r for r in measured if not r.ok]
    level = _level_value(measured or all_records, concurrency, rate)
    open_loop = "rate" in level
    level_indexes = {r.level for r in all_records}
    if len(level_indexes) == 1:
        level["level"] = level_indexes.pop()

    wall_s = wall_time_s(
        duration_s,
        min((r.sent_at for r in measured if r.sent_at is not None), default=None),
        max((r.end_at for r in measured if r.end_at is not None), default=None),
    )

    out_tokens = sum(r.num_output_tokens for r in completed)
    in_tokens = sum(req.input_tokens(r) for r in completed)
    errors = Counter(r.error_kind or r.status for r in failed)
    g = token_gaps(completed)  # per-token ITL, chunk gaps and tokens per chunk, pooled

    summary = dict(level)
    summary.update(
        {
            "requests": len(measured),
            "completed": len(completed),
            "failed": len(failed),
            "timeouts": sum(1 for r in failed if r.status == TIMEOUT or r.error_kind == TIMEOUT),
            # a kept-alive connection the server had closed (llama.cpp does after each stream): --no-keepalive
            "failed_on_reused_connection": sum(1 for r in failed if r.extra.get("reused_connection")),
            "warmup_excluded": len(all_records) - len(measured),
            "duration_s": wall_s,
            "output_tokens": out_tokens,
            "input_tokens": in_tokens,
            "output_tok_s": _per_s(out_tokens, wall_s),
            "input_tok_s": _per_s(in_tokens, wall_s),
            "total_tok_s": _per_s(out_tokens + in_tokens, wall_s),
            "request_s": _per_s(len(completed), wall_s),
            "ttft_ms": _ms(req.ttft_s(r) for r in completed),
            "ttft_answer_ms": _ms(req.ttft_answer_s(r) for r in completed),
            "itl_ms": weighted_distribution(g.itl_ms, g.itl_weights),
            "tpot_ms": _ms(req.tpot_s(r) for r in completed),
            "e2e_ms": _ms(req.e2e_s(r) for r in completed),
            "chunk_gap_ms": weighted_distribution(g.gap_ms, g.gap_weights),
            "tokens_per_chunk": weighted_distribution(g.chunk_tokens, g.chunk_weights),
        }
    )
    if open_loop:
        summary["ttft_from_scheduled_ms"] = _ms(req.ttft_from_scheduled_s(r) for r in completed)
        summary["e2e_from_scheduled_ms"] = _ms(req.e2e_from_scheduled_s(r) for r in completed)
    summary["schedule_lag_ms"] = _ms(req.schedule_lag_s(r) for r in measured)
    summary["errors"] = dict(sorted(errors.items()))
    mismatch = new_token_mismatch()
    for r in completed:
        add_token_mismatch(mismatch, r)
    summary["token_mismatch"] = mismatch

    slo_dict = as_slo(slo)
    budgets = per_request_budgets_ms(slo_dict) if slo_dict else {}
    good = [r for r in completed if request_is_good(r, budgets, from_scheduled=open_loop)] if slo_dict else []
    attach_goodput_and_slo(summary, slo_dict, len(good), sum(r.num_output_tokens for r in good), wall_s)
    summary["percentile_relative_error"] = 0.0  # exact (streaming summaries report their bound)
    return summary
