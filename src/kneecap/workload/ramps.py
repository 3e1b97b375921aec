"""Load ramps (--ramp KIND:START:END:SECONDS): a rate or concurrency that moves from START to END.

Owns the ramp's shape (linear or exponential in time), the arrival times it implies on the rate
dimension (a non-homogeneous Poisson process, or evenly spaced), and the target concurrency over
time on the concurrency dimension. Pure: numbers in, numbers out; the level runner sends.
Unlike `vllm bench serve --ramp-up-strategy`, which moves the rate per request index, the ramp
here moves with time, so a slice of the run has one known load.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kneecap.errors import KneecapError

RAMP_KINDS = ("linear", "exp")
_HINT = "write KIND:START:END:SECONDS, e.g. linear:1:64:120 or exp:0.5:32:300"


@dataclass(frozen=True)
class Ramp:
    """value(t) from `start` at t=0 to `end` at t=duration_s: linear, or exponential (start * (end/start)^(t/D))."""

    kind: str
    start: float
    end: float
    duration_s: float

    def __post_init__(self) -> None:
        if self.kind not in RAMP_KINDS:
            raise KneecapError(f"ramp kind must be linear or exp, got {self.kind!r}", _HINT)
        if not (math.isfinite(self.start) and math.isfinite(self.end)) or self.start < 0 or self.end < 0:
            raise KneecapError(f"ramp START and END must be finite and >= 0, got {self.start} and {self.end}", _HINT)
        if self.kind == "exp" and (self.start <= 0 or self.end <= 0):
            raise KneecapError(f"an exponential ramp needs START and END > 0, got {self.start} and {self.end}", _HINT)
        if self.start == 0 and self.end == 0:
            raise KneecapError("a ramp from 0 to 0 sends nothing", _HINT)
        if not (math.isfinite(self.duration_s) and self.duration_s > 0):
            raise KneecapError(f"ramp SECONDS must be positive, got {self.duration_s}", _HINT)

    def value_at(self, t_s: float) -> float:
        """The load at t_s seconds (clamped to [0, duration_s])."""
        x = min(max(t_s / self.duration_s, 0.0), 1.0)
        if self.kind == "linear" or self.start == self.end:
            return self.start + (self.end - self.start) * x
        return self.start * (self.end / self.start) ** x

    def expected_arrivals(self, t_s: float) -> float:
        """Integral of value over [0, t_s]: the expected number of arrivals by t_s on the rate dimension."""
        t = min(max(t_s, 0.0), self.duration_s)
        a, b, d = self.start, self.end, self.duration_s
        if self.kind == "linear" or a == b:
            return a * t + (b - a) * t * t / (2 * d)
        k = math.log(b / a) / d
        return a * math.expm1(k * t) / k

    def time_of_arrivals(self, n: float) -> float:
        """Inverse of expected_arrivals: the time by which n arrivals are expected (n <= the ramp's total)."""
        a, b, d = self.start, self.end, self.duration_s
        if self.kind == "linear" or a == b:
            disc = a * a + 2 * (b - a) * n / d
            return 2 * n / (a + math.sqrt(max(disc, 0.0))) if n > 0 else 0.0
        k = math.log(b / a) / d
        return math.log1p(k * n / a) / k

    def time_of_value(self, v: float) -> float:
        """When value(t) equals v (v between start and end)."""
        a, b, d = self.start, self.end, self.duration_s
        if a == b:
            return 0.0
        if self.kind == "linear":
            return (v - a) / (b - a) * d
        return d * math.log(v / a) / math.log(b / a)


def parse_ramp(spec: str) -> Ramp:
    """'linear:1:64:120' -> Ramp('linear', 1, 64, 120); errors are one line naming the spec."""
    parts = [p.strip() for p in str(spec).split(":")]
    if len(parts) != 4:
        raise KneecapError(f"--ramp {spec!r} has {len(parts)} fields, needs 4", _HINT)
    kind = parts[0].lower()
    try:
        start, end, seconds = (float(p) for p in parts[1:])
    except ValueError:
        raise KneecapError(f"--ramp {spec!r}: START, END and SECONDS must be numbers", _HINT) from None
    try:
        return Ramp(kind=kind, start=start, end=end, duration_s=seconds)
    except KneecapError as exc:
        raise KneecapError(f"--ramp {spec!r}: {exc.message}", exc.hint) from None


def ramp_arrival_times(ramp: Ramp, seed: int = 0) -> list[float]:
    """Send times (s from the ramp's start) of requests whose rate follows the ramp: a non-homogeneous Poisson
    process by time rescaling (unit-rate exponential gaps in expected-arrival space, mapped back through the
    inverse); the first request goes at t = 0, as kneecap.workload.arrival_offsets does."""
    import numpy as np

    total = ramp.expected_arrivals(ramp.duration_s)
    out = [0.0]
    rng = np.random.default_rng([seed, 7907])
    s = 0.0
    while True:
        gaps = rng.exponential(1.0, size=256)
        for g in gaps:
            s += float(g)
            if s > total:
                return out
            out.append(ramp.time_of_arrivals(s))


def concurrency_schedule(ramp: Ramp) -> list[tuple[float, int]]:
    """Target concurrency over time as change points [(t_s, users)], starting at t = 0.

    Rising ramps step up when value(t) reaches the next whole number (floor); falling ramps step
    down when it reaches the next lower one (ceil); never below 1. Linear 1 -> 4 over 30 s gives
    [(0, 1), (10, 2), (20, 3), (30, 4)]; linear 4 -> 1 gives [(0, 4), (10, 3), (20, 2), (30, 1)].
    """
    a, b = ramp.start, ramp.end
    eps = 1e-9
    if b >= a:
        first = max(1, math.floor(a + eps))
        steps = range(first + 1, math.floor(b + eps) + 1)
    else:
        first = max(1, math.ceil(a - eps))
        steps = range(first - 1, max(1, math.ceil(b - eps)) - 1, -1)
    return [(0.0, first)] + [(ramp.time_of_value(c), c) for c in steps]


def user_windows(users: list[tuple[float, int]]) -> list[tuple[float, float | None]]:
    """[(start_s, end_s or None)] of each stream u = 1, 2, ... under a [(t_s, streams)] schedule (as
    concurrency_schedule gives): stream u sends while the target is at least u (monotone ramps: one window each);
    a closed loop's slots (kneecap.workload.load_shape.LoadSchedule windows)."""
    top = max(c for _, c in users)
    out = []
    for u in range(1, top + 1):
        start = next(t for t, c in users if c >= u)
        end = next((t for t, c in users if t > start and c < u), None)
        out.append((start, end))
    return out
