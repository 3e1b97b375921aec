"""Find-max: the highest load (concurrency or request rate) at which every SLO holds.

Pure: a caller-supplied evaluate(load, repetition) -> Verdict runs one level (simulated or
measured) and says whether it met every SLO and why not; this module only chooses which loads to
try — doubling from `low` until a failure (bracketing), then bisection to the stated resolution —
and keeps every evaluated point for the report's plot. It runs nothing itself.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import Callable

from kneecap.errors import KneecapError

DIMENSIONS = ("concurrency", "rate")


@dataclass(frozen=True)
class Verdict:
    """One evaluation of one load: did it meet every SLO, and if not, why (e.g. "p99 TTFT 812 ms > 500 ms")."""

    met: bool
    why: str = ""


@dataclass(frozen=True)
class Probe:
    """One evaluated (load, repetition) and its verdict, in the order they ran."""

    load: float
    repetition: int
    met: bool
    why: str


@dataclass(frozen=True)
class MaxLoad:
    """The answer: the highest load that met every SLO in every repetition, and the next step up that failed.

    value None: even `low` failed. failed_at None: `high` itself met every SLO (the true maximum
    may be higher). probes: every evaluation, for the report.
    """

    dimension: str
    value: float | None
    repeats: int
    failed_at: float | None
    failed_because: str | None
    probes: tuple[Probe, ...] = field(default=())

    def to_json(self) -> dict:
        """summary.json's max_load: {dimension, value, repeats, failed_at, failed_because} (+ the probes)."""
        return {**asdict(self), "probes": [asdict(p) for p in self.probes]}


Evaluate = Callable[[float, int], Verdict]


def _validate(dimension: str, low: float, high: float, resolution: float, repeats: int) -> None:
    if dimension not in DIMENSIONS:
        raise KneecapError(
            f"--find-max takes rate or concurrency, got {dimension!r}", "pass --find-max concurrency or --find-max rate"
        )
    if repeats < 1:
        raise KneecapError(f"--repeats must be >= 1, got {repeats}", "pass e.g. --repeats 3")
    if not (0 < low <= high) or not math.isfinite(high):
        raise KneecapError(f"find-max needs 0 < low <= high, got low={low}, high={high}", "give a finite search range")
    if dimension == "concurrency":
        if low != int(low) or high != int(high) or resolution != int(resolution) or resolution < 1:
            raise KneecapError(
                "find-max over concurrency needs whole-number low, high and resolution >= 1",
                "e.g. low=1, high=1024, resolution=1",
            )
    elif not (0 < resolution < 1):
        raise KneecapError(
            f"find-max over rate needs a relative resolution in (0, 1), got {resolution}",
            "e.g. 0.05 stops when the bracket is within 5%",
        )


def find_max(
    evaluate: Evaluate, dimension: str, low: float, high: float, resolution: float | None = None, repeats: int = 1
) -> MaxLoad:
    """Search [low, high] for the highest load meeting every SLO.

    A load passes only if all `repeats` evaluations meet (the first failing repetition ends that
    load). Bracketing: low, 2*low, 4*low, ... (capped at high) until one fails. Bisection between
    the highest passing and lowest failing load until they are one resolution apart: whole steps
    of `resolution` for concurrency (default 1), relative for rate (default 0.05: failed_at <=
    value * 1.05; midpoints are geometric). The answer `value` met in every repetition and
    `failed_at` (one resolution above, or less) failed, with `failed_because` its reason.
    """
    if resolution is None:
        resolution = 1 if dimension == "concurrency" else 0.05
    _validate(dimension, low, high, resolution, repeats)
    integer = dimension == "concurrency"
    probes: list[Probe] = []
    cache: dict[float, tuple[bool, str]] = {}

    def norm(x: float) -> float:
        return int(x) if integer else float(x)

    def run(load: float) -> tuple[bool, str]:
        load = norm(load)
        if load in cache:
            return cache[load]
        outcome = (True, "")
        for rep in range(repeats):
            v = evaluate(load, rep)
            probes.append(Probe(load=load, repetition=rep, met=bool(v.met), why=v.why))
            if not v.met:
                outcome = (False, v.why or "an SLO was not met")
                break
        cache[load] = outcome
        return outcome

    def result(ok: float | None, bad: float | None) -> MaxLoad:
        return MaxLoad(
            dimension=dimension,
            value=ok,
            repeats=repeats,
            failed_at=bad,
            failed_because=cache[bad][1] if bad is not None else None,
            probes=tuple(probes),
        )

    lo = norm(low)
    if not run(lo)[0]:
        return result(None, lo)
    ok, bad = lo, None
    while bad is None:
        if ok >= high:
            return result(ok, None)
        nxt = norm(min(ok * 2, high))
        if run(nxt)[0]:
            ok = nxt
        else:
            bad = nxt

    def close_enough(a: float, b: float) -> bool:
        return (b - a) <= resolution if integer else b <= a * (1 + resolution)

    while not close_enough(ok, bad):
        mid = (ok + bad) // 2 if integer else math.sqrt(ok * bad)
        if integer and resolution > 1:  # keep the steps on multiples of the resolution above ok
            mid = ok + max(resolution, ((mid - ok) // resolution) * resolution)
            if mid >= bad:
                break
        if run(mid)[0]:
            ok = norm(mid)
        else:
            bad = norm(mid)
    return result(ok, bad)
