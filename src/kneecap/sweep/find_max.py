"""--find-max: the highest load meeting every SLO, searched level by level through the one level runner.

The search itself (bracketing, then bisection) is kneecap.metrics.search.find_max; this module turns
each of its probes into one level run by the sweep's driver (simulated or live), judges the level
against the SLO (kneecap.metrics.slo.level_meets_slo) and writes the answer into summary.json as
`max_load`. Every probed level is kept in `levels`, with the probe's load and repetition.
"""

from __future__ import annotations

import math

from kneecap.sweep.runner import STATUS_COMPLETE, STATUS_INTERRUPTED, Sweep
from kneecap.errors import KneecapError
from kneecap.levels import LEVEL_INDEX_STRIDE, SweepLevel
from kneecap.metrics.search import MaxLoad, Verdict, find_max
from kneecap.metrics.slo import STEADY_STATE, level_meets_slo
from kneecap.metrics.stability import EXTEND_FACTOR, MAX_EXTENDED_REQUESTS, STABLE, extended_requests, is_steady
from kneecap.metrics.stop import INTERRUPTED, stop_record

DIMENSIONS = ("concurrency", "rate")


def search_bounds(kind: str, values) -> tuple[float, float]:
    """The search's lowest and highest load: the levels given (one value: from 1, or rate/64, up to it)."""
    if len(values) > 1:
        return min(values), max(values)
    return (1 if kind == "concurrency" else values[0] / 64), values[0]


def search_max_load(sweep: Sweep, opts, *, slo: dict, repeats: int = 1, extend: bool = False) -> dict:
    """Run the search between the levels given (search_bounds); returns the final summary (also written), whose
    max_load is the answer. A load is met only when its level met every SLO term at steady state (its stability
    verdict `stable`, its client on schedule). extend (the simulator, whose levels cost no wall time): a
    transient level is run again, longer (kneecap.metrics.stability.extended_requests), until it is stable or
    over capacity."""
    low, high = search_bounds(opts.kind, opts.levels)
    if not slo:
        raise KneecapError(
            "--find-max needs the SLO to search against", "pass e.g. --slo ttft_p99_ms=500,itl_p99_ms=50"
        )
    dimension = opts.kind
    if dimension not in DIMENSIONS:
        raise KneecapError(f"--find-max searches concurrency or rate, not {dimension!r}", "pass --find-max concurrency")
    if not (0 < low <= high):
        raise KneecapError(
            f"--find-max needs 0 < lowest <= highest load, got {low:g} and {high:g}",
            "give --concurrency LOW,HIGH (or --rate LOW,HIGH) as the search's bounds",
        )
    count = 0
    stable_in_flight: dict[float, float] = {}  # load -> requests in flight at its stable level (extend only)

    def run(load: float, requests: int | None) -> dict:
        nonlocal count
        level = SweepLevel(
            index=count,
            value=load,
            num_requests=requests,
            num_warmup=opts.warmup,
            first_index=count * LEVEL_INDEX_STRIDE,
        )
        count += 1
        return sweep.run_one(level)

    def evaluate(load: float, repetition: int) -> Verdict:
        requests = opts.requests_for(load)
        if extend:
            requests = first_size(requests, load, stable_in_flight)
        summary = run(load, requests)
        attempt = 0
        while extend and (more := extended_requests(requests, summary.get("stability") or {}, attempt)) is not None:
            summary["find_max"] = {
                "load": load,
                "repetition": repetition,
                "met": False,
                "why": "transient: extended",
                "extended": True,
            }
            requests, attempt = more, attempt + 1
            summary = run(load, requests)
        st = summary.get("stability") or {}
        if extend and st.get("verdict") == STABLE and st.get("in_flight_mean"):
            stable_in_flight[load] = float(st["in_flight_mean"])
        met, breaches = level_meets_slo(summary, slo)
        why = [b["message"] for b in breaches]
        if not is_steady(summary) and not any(b["key"] == STEADY_STATE for b in breaches):
            st = summary.get("stability") or {}
            why.insert(0, "client behind" if st.get("client_behind") else str(st.get("verdict")))
        summary["find_max"] = {
            "load": load,
            "repetition": repetition,
            "met": met and is_steady(summary),
            "why": "; ".join(why) or None,
        }
        return Verdict(met=met and is_steady(summary), why="; ".join(why))

    try:
        result: MaxLoad = find_max(evaluate, dimension, low, high, repeats=repeats)
    except KeyboardInterrupt:
        sweep.state.stopped = stop_record(
            None, INTERRUPTED, "stopped by the user (Ctrl-C / SIGTERM) during --find-max; finished levels are kept"
        )
        return sweep.finish(STATUS_INTERRUPTED)
    sweep.extra["max_load"] = {**result.to_json(), **answer(result, high)}
    return sweep.finish(STATUS_COMPLETE)


def first_size(requests: int | None, load: float, stable_in_flight: dict[float, float]) -> int | None:
    """A simulated probe's first size, from the search's own measurements: EXTEND_FACTOR x the requests in flight at
    the nearest lower load whose level was stable, scaled by the square of the load ratio (Little's law: in flight =
    rate x latency, and a higher load also waits longer), at least `requests`, at most MAX_EXTENDED_REQUESTS. Only a
    first guess: the level is still judged, and extended while transient. It spares the short runs that the
    extension rule would discard."""
    lower = [x for x in stable_in_flight if x < load]
    if requests is None or not lower:
        return requests
    near = max(lower)
    guess = math.ceil(EXTEND_FACTOR * stable_in_flight[near] * (load / near) ** 2)
    return int(max(requests, min(MAX_EXTENDED_REQUESTS, guess)))


def answer(m: MaxLoad, high: float) -> dict:
    """The answer in words and its bracket: {answer, last_met, first_failed, binding}, the loads rounded to the
    digits the bracket supports (the decimal place of first_failed - last_met)."""
    unit = " req/s" if m.dimension == "rate" else " streams"
    binding = (m.failed_because or "").split(";")[0].strip() or None
    if m.value is None:
        text = f"no load met every SLO at steady state: the lowest searched, {_fmt(m.failed_at, None, m)}{unit}, failed"
    elif m.failed_at is None:
        text = f"at least {_fmt(m.value, None, m)}{unit}: every load searched met every SLO at steady state"
    else:
        text = (
            f"{_fmt(m.value, m.failed_at, m)}{unit}: the highest load meeting every SLO at steady state "
            f"(bracket: met at {_fmt(m.value, m.failed_at, m)}, failed at {_fmt(m.failed_at, m.value, m)}"
            f"{'; binding: ' + binding if binding else ''})"
        )
    return {
        "answer": text,
        "last_met": m.value,
        "first_failed": m.failed_at,
        "binding": binding,
        "searched_up_to": high,
    }


def _fmt(x: float | None, other: float | None, m: MaxLoad) -> str:
    """x with no more digits than the bracket [x, other] supports (whole streams; 3 significant digits alone)."""
    if x is None:
        return "—"
    if m.dimension == "concurrency":
        return f"{int(x)}"
    if other is None or other == x:
        return f"{x:.3g}"
    places = max(0, -math.floor(math.log10(abs(other - x))))
    return f"{x:.{places}f}"
