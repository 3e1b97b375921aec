"""When a sweep stops climbing: declared limits checked after every level.

Pure: the level summaries so far (in the order they ran) and the limits in, a `stopped`
record {at, reason, detail} or None out. Limits that need the outside world (the preflight
verdict for the next level, a server that stopped answering) are flags the caller reads; it
builds the same record with stop_record().
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping, Sequence

from kneecap.errors import KneecapError
from kneecap.metrics.knee import find_knee
from kneecap.metrics.slo import level_meets_slo, parse_slo
from kneecap.units import fmt_over

# reason codes (the JSON value of stopped.reason)
ERROR_RATE = "error_rate"
SLO_BREACH = "slo_breach"
KNEE = "knee"
PREFLIGHT_EXCEEDS = "preflight_exceeds"  # decided by the caller (the next level does not fit the KV pool)
SERVER_DEAD = "server_dead"  # decided by the caller (health check / every request refused)
INTERRUPTED = "interrupted"  # decided by the caller (Ctrl-C, time budget)
AUTH_REFUSED = "auth_refused"  # decided by the caller (the server answered HTTP 401/403 to a level's requests)
LIMIT = "limit"  # decided by the caller (a load plan's cell crossed a declared limit: error/timeout rate, drift, ...)
# the error kinds of a refused API key: the first of these in a level cuts it (reason AUTH_REFUSED)
AUTH_REFUSED_KINDS = ("http_401", "http_403")
REASONS = (ERROR_RATE, SLO_BREACH, KNEE, PREFLIGHT_EXCEEDS, SERVER_DEAD, INTERRUPTED, AUTH_REFUSED, LIMIT)


@dataclass(frozen=True)
class StopLimits:
    """Declared limits of a sweep.

    max_error_rate: stop after a level whose failed/requests exceeds this (default 0.5: past
      half the requests failing, higher levels measure the failure path, not the server;
      put a strict limit in the SLO instead, e.g. error_rate=0.01, which stops on breach).
    slo: parsed SLO dict (metrics.slo.parse_slo); stop when `consecutive_breaches` levels in
      a row breach it (default 2: one noisy level does not end a sweep).
    levels_past_knee: stop once a knee is found and this many levels past it have run
      (None, the default: run every level asked for; the knee is still reported).
    """

    max_error_rate: float = 0.5
    slo: Mapping = field(default_factory=dict)
    consecutive_breaches: int = 2
    levels_past_knee: int | None = None

    def __post_init__(self) -> None:
        if not 0.0 <= self.max_error_rate <= 1.0:
            raise KneecapError(
                f"max error rate must be a fraction in [0, 1], got {self.max_error_rate!r}",
                "use e.g. 0.5 to stop once half the requests fail",
            )
        if self.consecutive_breaches < 1:
            raise KneecapError(
                f"consecutive SLO breaches must be >= 1, got {self.consecutive_breaches!r}",
                "use 1 to stop at the first breaching level, 2 to confirm it once",
            )
        if self.levels_past_knee is not None and self.levels_past_knee < 1:
            raise KneecapError(
                f"levels past the knee must be >= 1, got {self.levels_past_knee!r}",
                "use None to never stop at the knee",
            )
        object.__setattr__(self, "slo", parse_slo(self.slo) if self.slo else {})


def level_value(level: Mapping):
    """The load value of a level summary: its concurrency, else its rate."""
    return level["concurrency"] if level.get("concurrency") is not None else level.get("rate")


def stop_record(at, reason: str, detail: str) -> dict:
    """The `stopped` entry of summary.json: {at: level value, reason: code, detail: sentence}."""
    if reason not in REASONS:
        raise KneecapError(f"unknown stop reason {reason!r}", f"use one of {', '.join(REASONS)}")
    return {"at": at, "reason": reason, "detail": detail}


def check_stop(levels: Sequence[Mapping], limits: StopLimits) -> dict | None:
    """Should the sweep stop after the last level in `levels`? Returns a stop record or None."""
    if not levels:
        return None
    last = levels[-1]
    at = level_value(last)
    key = "concurrency" if last.get("concurrency") is not None else "rate"
    requests = last.get("requests") or 0
    if requests:
        error_rate = (last.get("failed") or 0) / requests
        if error_rate > limits.max_error_rate:
            return stop_record(
                at,
                ERROR_RATE,
                f"error rate {fmt_over(error_rate, limits.max_error_rate, decimals=3)} "
                f"at {key} {at} ({last.get('failed')} of {requests} failed)",
            )
    if limits.slo and len(levels) >= limits.consecutive_breaches:
        recent = levels[-limits.consecutive_breaches :]
        verdicts = [level_meets_slo(level, limits.slo) for level in recent]
        if not any(ok for ok, _ in verdicts):
            what = "; ".join(b["message"] for b in verdicts[-1][1])
            return stop_record(
                at, SLO_BREACH, f"SLO breached at {len(recent)} consecutive level(s) ending at {key} {at}: {what}"
            )
    if limits.levels_past_knee is not None:
        knee = find_knee(levels, key=key)
        if knee is not None:
            past = sum(1 for level in levels if _after(level_value(level), knee[key]))
            if past >= limits.levels_past_knee:
                return stop_record(at, KNEE, f"knee at {key} {knee[key]} ({knee['rule']}); {past} level(s) past it ran")
    return None


def _after(x, knee_x) -> bool:
    try:
        return x > knee_x
    except TypeError:
        return False
