"""Per-request latencies from one RequestRecord's named timestamps (seconds in, seconds out).

Owns the formulas (docs/metrics.md defines each); level statistics (summarize.py) and the
per-request SLO check (slo.py) both read them here, so the two can never disagree.
A latency whose timestamps are missing is None, never 0.
"""

from __future__ import annotations

from kneecap.records import RequestRecord


def _diff(later: float | None, earlier: float | None) -> float | None:
    if later is None or earlier is None:
        return None
    return later - earlier


def ttft_s(r: RequestRecord) -> float | None:
    """Time to first token (of any kind, reasoning included): first_token_at - sent_at."""
    return _diff(r.first_token_at, r.sent_at)


def ttft_answer_s(r: RequestRecord) -> float | None:
    """Time to first answer (non-reasoning) token: first_answer_at - sent_at."""
    return _diff(r.first_answer_at, r.sent_at)


def e2e_s(r: RequestRecord) -> float | None:
    """End-to-end latency: end_at - sent_at."""
    return _diff(r.end_at, r.sent_at)


def ttft_from_scheduled_s(r: RequestRecord) -> float | None:
    """TTFT from the intended send time (open loop, no coordinated omission): first_token_at - scheduled_at."""
    return _diff(r.first_token_at, r.scheduled_at)


def e2e_from_scheduled_s(r: RequestRecord) -> float | None:
    """E2E from the intended send time: end_at - scheduled_at."""
    return _diff(r.end_at, r.scheduled_at)


def schedule_lag_s(r: RequestRecord) -> float | None:
    """How late the client sent the request: sent_at - scheduled_at (client health, not server)."""
    return _diff(r.sent_at, r.scheduled_at)


def tpot_s(r: RequestRecord) -> float | None:
    """Time per output token after the first: (end_at - first_token_at) / (output tokens - 1).

    Equal to (E2E - TTFT) / (N - 1). Defined only for N >= 2 output tokens (N = the server's
    usage count when reported, else the tokens counted in chunks).
    """
    n = r.num_output_tokens
    span = _diff(r.end_at, r.first_token_at)
    if span is None or n < 2:
        return None
    return span / (n - 1)


def chunk_gaps(r: RequestRecord) -> tuple[list[float], list[int]]:
    """Gaps between consecutive token-bearing chunks, and the tokens the later chunk carried.

    Chunks that carry no token are skipped (their time folds into the next token-bearing
    gap). The first token-bearing chunk opens the sequence and contributes no gap. If
    chunk_times and chunk_tokens differ in length, only their common prefix is used.
    """
    gaps: list[float] = []
    tokens: list[int] = []
    prev: float | None = None
    for t, k in zip(r.chunk_times, r.chunk_tokens):
        if k <= 0:
            continue
        if prev is not None:
            gaps.append(t - prev)
            tokens.append(int(k))
        prev = t
    return gaps, tokens


def input_tokens(r: RequestRecord) -> int:
    """Prompt tokens: the server's usage count if reported, else what the workload asked for, else 0."""
    if r.prompt_tokens is not None:
        return r.prompt_tokens
    return r.expected_input_tokens or 0


# per-request metrics an SLO budget may name, with the from-scheduled variant used in open loop
PER_REQUEST_S = {
    "ttft": ttft_s,
    "ttft_answer": ttft_answer_s,
    "tpot": tpot_s,
    "e2e": e2e_s,
    "ttft_from_scheduled": ttft_from_scheduled_s,
    "e2e_from_scheduled": e2e_from_scheduled_s,
}
