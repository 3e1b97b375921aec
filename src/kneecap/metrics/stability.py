"""Steady state, judged once: is a level's load one the server keeps up with, one it cannot, or too short to tell?

Pure: a level's request times in (a `LevelTimes`, filled record by record so a long level keeps four floats per
request, not its records), a `stability` dict out:

    {verdict: "stable" | "transient" | "over_capacity", offered_rps, sent_rps, served_rps,
     offered_output_tok_s, output_tok_s, queue_trend, ttft_trend, in_flight_mean, client_behind, rule}

The rule (docs/metrics.md, "Steady state") in short:
- the window is the level's sending window (first to last request sent); a closed-loop level's steady part
  starts after its first round (its c streams' first requests, sent together) and ends at its last request sent;
- served: requests completed (output tokens) per second over the window's second half, while the load is still
  offered; sent: requests sent per second over the same half;
- over_capacity: served falls more than SERVED_SHORTFALL short of sent, and the requests waiting for their first
  token grow over the second half (least-squares slope x its length) by more than max(QUEUE_MIN_RISE,
  QUEUE_RISE_FRACTION x the requests sent in it, QUEUE_NOISE x sqrt(1 + the queue's mean length over it)).
  Open loop only: a closed loop cannot offer more than it is served;
- transient: fewer measured requests in the window than TRANSIENT_FACTOR x the requests in flight by Little's law
  (sent req/s x mean end-to-end latency): the level ended before it could show its steady state; or long enough,
  but its waiting queue still grows while served keeps up (not settled yet: run it longer);
- stable: long enough, and the waiting queue is flat.
A level whose client sent more than CLIENT_BEHIND slower than it scheduled is flagged `client_behind` (the reason):
the verdict then describes the load really sent, not the one asked for, and is no capacity judgement.
"""

from __future__ import annotations

import math
from array import array
from typing import TYPE_CHECKING, Iterable, Union

from kneecap.records import RequestRecord

if TYPE_CHECKING:
    from kneecap.metrics.summary_model import LevelSummary

STABLE = "stable"
TRANSIENT = "transient"
OVER_CAPACITY = "over_capacity"
VERDICTS = (STABLE, TRANSIENT, OVER_CAPACITY)

TRANSIENT_FACTOR = 3.0  # a level shows its steady state once it holds >= 3x the requests in flight
SERVED_SHORTFALL = 0.05  # served < 95% of sent (over the window's second half)
QUEUE_MIN_RISE = 3.0  # the waiting queue must rise by at least this many requests over the second half ...
QUEUE_RISE_FRACTION = 0.05  # ... and by more than 5% of the requests sent in that half ...
QUEUE_NOISE = 3.0  # ... and by more than 3 x sqrt(1 + its mean length over that half)
CLIENT_BEHIND = 0.05  # sent more than 5% slower than scheduled
QUEUE_SAMPLES = 32  # points of the waiting-queue curve fitted over the second half

RULE_OVER = "over_capacity: served < 95% of sent and the waiting queue grew over the second half"
RULE_TRANSIENT = "transient: fewer requests than 3x those in flight (Little's law)"
RULE_UNSETTLED = "transient: long enough, but the waiting queue still grows while served keeps up (not settled yet)"
RULE_STABLE = "stable: at least 3x the requests in flight and the waiting queue is flat"


class LevelTimes:
    """A level's measured requests as the stability rule needs them: scheduled, sent, first-token and end times
    (s, NaN when it never happened; a failed request's end is NaN: it was not served) and output tokens."""

    __slots__ = ("scheduled", "sent", "first", "end", "tokens", "expected_tokens", "expected_n")

    def __init__(self):
        self.scheduled, self.sent, self.first, self.end, self.tokens = (array("d") for _ in range(5))
        self.expected_tokens = 0  # sum of the workload's output lengths (the offered output tokens)
        self.expected_n = 0

    def add(self, r: RequestRecord, now_s: float | None = None) -> None:
        """Add one record; now_s: as it stood then (sent later: left out; a token or end later: not yet)."""
        if r.warmup or r.sent_at is None or (now_s is not None and r.sent_at > now_s):
            return
        nan = math.nan
        by = lambda t: t if t is not None and (now_s is None or t <= now_s) else None
        self.sent.append(r.sent_at)
        self.scheduled.append(r.scheduled_at if r.scheduled_at is not None else r.sent_at)
        first = by(r.first_token_at) if r.first_token_at is not None else by(r.end_at)
        self.first.append(first if first is not None else nan)
        end = by(r.end_at)
        self.end.append(end if r.ok and end is not None else nan)
        self.tokens.append(r.num_output_tokens if r.ok else 0)
        expected = (
            r.expected_output_tokens
            if r.expected_output_tokens is not None
            else (r.num_output_tokens if r.ok else None)
        )
        if expected is not None:
            self.expected_tokens += expected
            self.expected_n += 1

    def tap(self, records: Iterable[RequestRecord]) -> Iterable[RequestRecord]:
        """Pass records through (to a summarizer that streams them), adding each."""
        for r in records:
            self.add(r)
            yield r

    @classmethod
    def of(cls, records: Iterable[RequestRecord]) -> "LevelTimes":
        times = cls()
        for r in records:
            times.add(r)
        return times


def _rate(count: int, span_s: float) -> float | None:
    return count / span_s if span_s > 0 else None


def _round(x: float | None, digits: int = 4) -> float | None:
    return None if x is None or not math.isfinite(x) else round(float(x), digits)


def judge(times: LevelTimes, *, kind: str, value=None) -> dict:
    """The level's `stability` (see the module docstring). kind: "rate" (open loop) or "concurrency"
    (closed loop; value: its streams)."""
    import numpy as np

    sent = np.frombuffer(times.sent, dtype=np.float64) if len(times.sent) else np.zeros(0)
    order = np.argsort(sent, kind="stable")
    sent = sent[order]
    pick = lambda a: np.frombuffer(a, dtype=np.float64)[order] if len(a) else np.zeros(0)
    scheduled, first, end, tokens = pick(times.scheduled), pick(times.first), pick(times.end), pick(times.tokens)
    n = int(sent.size)
    closed = kind == "concurrency"
    start = 0
    if closed:  # the steady part: after the first round (its streams all started together; `max`: every request)
        streams = int(value) if isinstance(value, (int, float)) and value > 0 else n
        start = min(streams, max(n - 1, 0))
    t0, t1 = (float(sent[start]), float(sent[-1])) if n else (0.0, 0.0)
    in_window = n - start
    span = t1 - t0
    sched_span = float(scheduled[start:].max() - scheduled[start:].min()) if in_window else 0.0
    sent_rps = _rate(in_window - 1, span)
    offered_rps = sent_rps if closed else _rate(in_window - 1, sched_span)
    mean_out = times.expected_tokens / times.expected_n if times.expected_n else None

    done = ~np.isnan(end)
    e2e = (end - sent)[done]
    mean_e2e = float(e2e.mean()) if e2e.size else None
    in_flight = sent_rps * mean_e2e if sent_rps is not None and mean_e2e is not None else None
    if closed and in_flight is not None and isinstance(value, (int, float)) and value > 0:
        in_flight = min(in_flight, float(value))  # C streams hold at most C (the estimate's rate runs high)

    h0 = t0 + span / 2
    half = t1 - h0
    # served: completions over the window's second half, while the load is still offered, against the requests
    # sent over it (past the first half, a server that keeps up returns them as fast as they come)
    served_mask = done & (end >= h0) & (end <= t1) if half > 0 else np.zeros(n, dtype=bool)
    served_rps = _rate(int(served_mask.sum()), half)
    output_tok_s = _rate(float(tokens[served_mask].sum()), half)
    half_sent_rps = _rate(int(((sent >= h0) & (sent <= t1)).sum()), half)
    sent_in_half = int(((sent >= h0) & (sent <= t1)).sum())

    queue_trend, waiting_mean = None, 0.0
    if half > 0:
        grid = np.linspace(h0, t1, QUEUE_SAMPLES)
        first_sorted = np.sort(np.where(np.isnan(first), np.inf, first))
        waiting = np.searchsorted(sent, grid, side="right") - np.searchsorted(first_sorted, grid, side="right")
        queue_trend = float(np.polyfit(grid - h0, waiting.astype(np.float64), 1)[0])
        waiting_mean = float(waiting.mean())

    ttft_trend = None
    with_first = ~np.isnan(first[start:])
    ttft = (first[start:] - sent[start:])[with_first]
    if ttft.size >= 6:
        third = ttft.size // 3
        early = float(np.median(ttft[:third]))
        ttft_trend = float(np.median(ttft[-third:])) / early if early > 0 else None

    client_behind = None
    if not closed and sent_rps is not None and offered_rps and sent_rps < (1 - CLIENT_BEHIND) * offered_rps:
        client_behind = (
            f"the client sent {sent_rps:.3g} req/s of the {offered_rps:.3g} scheduled "
            f"({1 - sent_rps / offered_rps:.0%} behind): the server was offered less than asked; "
            f"this level is not a capacity judgement (more client workers, or a lower rate)"
        )

    rise = queue_trend * half if queue_trend is not None else 0.0
    # growth past the queue's own noise: a count that size moves by about its square root (bursty arrivals more)
    rise_needed = max(QUEUE_MIN_RISE, QUEUE_RISE_FRACTION * sent_in_half, QUEUE_NOISE * math.sqrt(1 + waiting_mean))
    grows = rise > rise_needed
    short = served_rps is None or half_sent_rps is None or served_rps < (1 - SERVED_SHORTFALL) * half_sent_rps
    served = (
        f"served {served_rps:.3g} req/s of {half_sent_rps:.3g} sent over the second half"
        if served_rps is not None and half_sent_rps is not None
        else "served: not measurable"
    )
    queue = f"waiting queue {rise:+.0f} requests over it ({half:.3g} s; growth past {rise_needed:.0f})"
    if not closed and short and grows:
        verdict, rule = OVER_CAPACITY, f"{RULE_OVER}: {served}, {queue}"
    elif in_flight is None or span <= 0 or in_window < TRANSIENT_FACTOR * in_flight:
        what = f"{in_flight:.1f}" if in_flight is not None else "unknown"
        verdict, rule = TRANSIENT, f"{RULE_TRANSIENT}: {in_window} requests, {what} in flight"
    elif grows:
        verdict, rule = TRANSIENT, f"{RULE_UNSETTLED}: {served}, {queue}"
    else:
        verdict, rule = STABLE, f"{RULE_STABLE}: {in_window} requests, {in_flight:.1f} in flight; {queue}"
    return {
        "verdict": verdict,
        "offered_rps": _round(offered_rps),
        "sent_rps": _round(sent_rps),
        "served_rps": _round(served_rps),
        "offered_output_tok_s": _round(offered_rps * mean_out if offered_rps is not None and mean_out else None, 1),
        "output_tok_s": _round(output_tok_s, 1),
        "queue_trend": _round(queue_trend),
        "ttft_trend": _round(ttft_trend),
        "in_flight_mean": _round(in_flight, 2),
        "window_requests": in_window,
        "client_behind": client_behind,
        "rule": rule,
    }


def level_stability(records: Iterable[RequestRecord], *, kind: str, value=None, now_s: float | None = None) -> dict:
    """judge() of a list of records (now_s: as they stood at that time, for --until-stable)."""
    times = LevelTimes()
    for r in records:
        times.add(r, now_s)
    return judge(times, kind=kind, value=value)


def is_steady(level: dict) -> bool:
    """A level whose load can be judged: stable, and its client kept to the schedule (levels without a
    stability entry, from older summaries, count as steady)."""
    st = level.get("stability")
    return st is None or (st.get("verdict") == STABLE and not st.get("client_behind"))


Level = Union["LevelSummary", dict]  # a typed level (kneecap.metrics.summary_model) or a summary.json level dict


def _judged(level: Level) -> tuple[str | None, object]:
    """(verdict, client_behind) of a level, typed or a dict; (None, None) where it was not judged."""
    if isinstance(level, dict):  # the sweep's own table, printed from the summary it is writing
        st = level.get("stability")
        return (st.get("verdict"), st.get("client_behind")) if isinstance(st, dict) else (None, None)
    st = level.stability
    return (st.verdict, st.client_behind) if st is not None else (None, None)


def verdict_text(level: Level) -> str:
    """The level's verdict for a table cell: 'stable', 'transient', 'OVER CAPACITY' (+ ', client behind'), or '—'."""
    verdict, behind = _judged(level)
    if verdict not in VERDICTS:
        return "—"
    text = "OVER CAPACITY" if verdict == OVER_CAPACITY else verdict
    return text + (", client behind" if behind else "")


def stability_caption(levels: list[Level]) -> str | None:
    """One line under a table when some level is not stable: which, and what that means for its numbers."""
    judged = [_judged(lv) for lv in levels]
    over = [v for v, _ in judged if v == OVER_CAPACITY]
    short = [v for v, _ in judged if v == TRANSIENT]
    behind = [b for _, b in judged if b]
    parts = []
    if over:
        parts.append(
            f"{len(over)} level(s) over capacity: the queue grew, so their latencies depend on how long they ran"
        )
    if short:
        parts.append(f"{len(short)} level(s) transient: too short to reach steady state (run more requests)")
    if behind:
        parts.append(f"{len(behind)} level(s) with the client behind its schedule: not a capacity judgement")
    return "; ".join(parts) or None


EXTEND_FACTOR = 3.5  # an extended level holds 3.5x the requests in flight it showed (the rule asks 3x)
MAX_EXTENDED_REQUESTS = 3200  # a simulated level is extended up to this many requests ...
MAX_EXTENSIONS = 2  # ... at most this many times


def extended_requests(requests: int | None, stability: dict, attempt: int) -> int | None:
    """A simulated level's next size when its verdict is transient (too short to tell): EXTEND_FACTOR x the requests
    in flight it showed, at least twice as many, at most MAX_EXTENDED_REQUESTS; None when it is not to be run again
    (stable or over capacity, a level of no fixed size, the cap reached, or MAX_EXTENSIONS runs done)."""
    if (
        requests is None
        or stability.get("verdict") != TRANSIENT
        or requests >= MAX_EXTENDED_REQUESTS
        or attempt >= MAX_EXTENSIONS
    ):
        return None
    more = max(2 * requests, math.ceil(EXTEND_FACTOR * (stability.get("in_flight_mean") or 0)))
    return int(min(MAX_EXTENDED_REQUESTS, more))
