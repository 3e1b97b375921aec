"""Service-level objectives: parse `--slo`, judge a level summary against it, judge one request.

An SLO is a flat dict {key: limit}: `<metric>_<stat>_ms` (a latency statistic of the level, in
milliseconds) or `error_rate` (failed / requests, a fraction). The level check reads the
level summary; the per-request check (goodput) reads one record's own latencies.
"""

from __future__ import annotations

import difflib
from typing import Mapping

from kneecap.errors import KneecapError
from kneecap.metrics import request as req
from kneecap.records import RequestRecord
from kneecap.units import MS_PER_S
from kneecap.units import fmt_over

SLO_METRICS = ("ttft", "ttft_answer", "itl", "tpot", "e2e", "chunk_gap", "ttft_from_scheduled", "e2e_from_scheduled")
SLO_STATS = ("mean", "p50", "p90", "p95", "p99", "max")
ERROR_RATE = "error_rate"
VALID_KEYS = tuple(f"{m}_{s}_ms" for m in SLO_METRICS for s in SLO_STATS) + (ERROR_RATE,)
_FORM = (
    "keys are <metric>_<stat>_ms or error_rate, with metric in "
    + ", ".join(SLO_METRICS)
    + " and stat in "
    + ", ".join(SLO_STATS)
    + "; e.g. ttft_p99_ms=500,itl_p99_ms=50,error_rate=0.01"
)


def split_key(key: str) -> tuple[str, str]:
    """'ttft_p99_ms' -> ('ttft', 'p99'). Only for latency keys (not error_rate)."""
    body = key[: -len("_ms")]
    metric, _, stat = body.rpartition("_")
    return metric, stat


def _check_key(key: str) -> None:
    if key in VALID_KEYS:
        return
    close = difflib.get_close_matches(key, VALID_KEYS, n=1)
    guess = f"did you mean {close[0]!r}? " if close else ""
    raise KneecapError(f"unknown SLO key {key!r}", guess + _FORM)


def _check_value(key: str, raw) -> float:
    try:
        value = float(raw)
    except (TypeError, ValueError):
        raise KneecapError(
            f"SLO {key} needs a number, got {raw!r}",
            "write e.g. ttft_p99_ms=500 (milliseconds) or error_rate=0.01 (a fraction)",
        ) from None
    if key == ERROR_RATE:
        if not 0.0 <= value <= 1.0:
            raise KneecapError(
                f"SLO error_rate must be a fraction in [0, 1], got {raw!r}",
                "write e.g. error_rate=0.01 for at most 1% failed requests",
            )
    elif not value > 0 or value == float("inf"):
        raise KneecapError(
            f"SLO {key} must be a positive number of milliseconds, got {raw!r}", "write e.g. ttft_p99_ms=500"
        )
    return value


def parse_slo(spec: str | Mapping | None) -> dict:
    """'ttft_p99_ms=500,itl_p99_ms=50,error_rate=0.01' (or a dict, e.g. from a plan file) -> {key: float}.

    None or an empty string gives {} (no SLO). Unknown keys, bad numbers and repeated keys raise
    a KneecapError naming the valid keys.
    """
    if spec is None:
        return {}
    if isinstance(spec, Mapping):
        items = [(str(k).strip(), v) for k, v in spec.items()]
    else:
        items = []
        for part in filter(None, (p.strip() for p in str(spec).replace(";", ",").split(","))):
            if "=" not in part:
                raise KneecapError(f"SLO term {part!r} has no '=value'", _FORM)
            key, _, raw = part.partition("=")
            items.append((key.strip(), raw.strip()))
    out: dict = {}
    for key, raw in items:
        _check_key(key)
        if key in out:
            raise KneecapError(f"SLO key {key!r} given twice", "give each key once")
        out[key] = _check_value(key, raw)
    return out


def format_slo(slo: Mapping) -> str:
    """The inverse of parse_slo for display: 'ttft_p99_ms=500,error_rate=0.01'."""
    return ",".join(f"{k}={v:g}" for k, v in slo.items())


def slo_value(level: Mapping, key: str) -> float | None:
    """The statistic an SLO key judges, read from a level summary (None when the level has no data for it):
    error_rate = failed / requests; 'ttft_p99_ms' = the level's ttft_ms p99."""
    if key == ERROR_RATE:
        requests = level.get("requests") or 0
        return (level.get("failed", 0) / requests) if requests else None
    metric, stat = split_key(key)
    return (level.get(f"{metric}_ms") or {}).get(stat)


STEADY_STATE = "steady_state"  # the breach of a level over capacity: no SLO holds while the queue grows


def level_meets_slo(level: Mapping, slo: Mapping) -> tuple[bool, list[dict]]:
    """Does a level summary meet every SLO term? Returns (ok, breaches).

    Each breach is {key, limit, value, message}; value is None when the level has no data for
    that statistic (e.g. no request completed), which counts as a breach: an SLO cannot be
    shown to hold on nothing. error_rate = failed / requests. A level judged over capacity (its
    `stability`, kneecap.metrics.stability) breaches `steady_state` as well: no percentile holds
    while its queue grows.
    """
    breaches: list[dict] = []
    for key, limit in slo.items():
        value = slo_value(level, key)
        if value is None or value > limit:
            message = f"{key}: no data (limit {limit:g})" if value is None else f"{key} {fmt_over(value, limit)}"
            breaches.append({"key": key, "limit": limit, "value": value, "message": message})
    st = level.get("stability")
    if slo and isinstance(st, Mapping) and st.get("verdict") == "over_capacity":  # kneecap.metrics.stability
        breaches.append({"key": STEADY_STATE, "limit": None, "value": None, "message": "over capacity (queue growing)"})
    return (not breaches), breaches


def per_request_budgets_ms(slo: Mapping) -> dict:
    """Per-request latency budgets {metric: ms} implied by an SLO, for goodput.

    A request's own TTFT / TTFT-answer / TPOT / E2E (and their from-scheduled variants) must be
    within the limit named for that metric; when several statistics of one metric are named
    (ttft_p50_ms and ttft_p99_ms) the largest limit is the per-request ceiling. ITL and
    chunk-gap terms have no per-request value and apply to the level only.
    """
    budgets: dict = {}
    for key, limit in slo.items():
        metric = None if key == ERROR_RATE else split_key(key)[0]
        if metric in req.PER_REQUEST_S:
            budgets[metric] = max(limit, budgets.get(metric, limit))
    return budgets


def request_is_good(record: RequestRecord, budgets_ms: Mapping, *, from_scheduled: bool = False) -> bool:
    """Is this request 'good' (counts toward goodput) under per-request budgets (per_request_budgets_ms)?

    Failed requests are never good. With from_scheduled (open-loop levels), TTFT and E2E are
    measured from scheduled_at when the record has it. A missing TPOT (fewer than 2 output
    tokens) is no breach; any other missing latency is.
    """
    if not record.ok:
        return False
    for metric, limit_ms in budgets_ms.items():
        name = metric
        if from_scheduled and record.scheduled_at is not None and metric in ("ttft", "e2e"):
            name = f"{metric}_from_scheduled"
        value_s = req.PER_REQUEST_S[name](record)
        if value_s is None:
            if metric == "tpot":
                continue
            return False
        if value_s * MS_PER_S > limit_ms:
            return False
    return True
