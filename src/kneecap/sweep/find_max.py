"""--find-max: the highest load meeting every SLO, searched level by level through the one level runner.

The search itself (bracketing, then bisection) is kneecap.metrics.search.find_max; this module turns
each of its probes into one level run by the sweep's driver (simulated or live), judges the level
against the SLO (kneecap.metrics.slo.level_meets_slo) and writes the answer into summary.json as
`max_load`. Every probed level is kept in `levels`, with the probe's load and repetition.
"""

from __future__ import annotations

from kneecap.sweep.runner import STATUS_COMPLETE, STATUS_INTERRUPTED, Sweep
from kneecap.errors import KneecapError
from kneecap.levels import LEVEL_INDEX_STRIDE, SweepLevel
from kneecap.metrics.search import MaxLoad, Verdict, find_max
from kneecap.metrics.slo import level_meets_slo
from kneecap.metrics.stop import INTERRUPTED, stop_record

DIMENSIONS = ("concurrency", "rate")


def search_bounds(kind: str, values) -> tuple[float, float]:
    """The search's lowest and highest load: the levels given (one value: from 1, or rate/64, up to it)."""
    if len(values) > 1:
        return min(values), max(values)
    return (1 if kind == "concurrency" else values[0] / 64), values[0]


def search_max_load(sweep: Sweep, opts, *, slo: dict, repeats: int = 1) -> dict:
    """Run the search between the levels given (search_bounds); returns the final summary (also written), whose
    max_load is the answer."""
    low, high = search_bounds(opts.kind, opts.levels)
    if not slo:
        raise KneecapError("--find-max needs the SLO to search against", "pass e.g. --slo ttft_p99_ms=500,itl_p99_ms=50")
    dimension = opts.kind
    if dimension not in DIMENSIONS:
        raise KneecapError(f"--find-max searches concurrency or rate, not {dimension!r}", "pass --find-max concurrency")
    if not (0 < low <= high):
        raise KneecapError(f"--find-max needs 0 < lowest <= highest load, got {low:g} and {high:g}",
                           "give --concurrency LOW,HIGH (or --rate LOW,HIGH) as the search's bounds")
    count = 0

    def evaluate(load: float, repetition: int) -> Verdict:
        nonlocal count
        level = SweepLevel(index=count, value=load, num_requests=opts.requests_for(load), num_warmup=opts.warmup,
                          first_index=count * LEVEL_INDEX_STRIDE)
        count += 1
        summary = sweep.run_one(level)
        met, breaches = level_meets_slo(summary, slo)
        why = "; ".join(b["message"] for b in breaches)
        summary["find_max"] = {"load": load, "repetition": repetition, "met": met, "why": why or None}
        return Verdict(met=met, why=why)

    try:
        result: MaxLoad = find_max(evaluate, dimension, low, high, repeats=repeats)
    except KeyboardInterrupt:
        sweep.state.stopped = stop_record(None, INTERRUPTED, "stopped by the user (Ctrl-C / SIGTERM) during --find-max; "
                                                             "finished levels are kept")
        return sweep.finish(STATUS_INTERRUPTED)
    sweep.extra["max_load"] = result.to_json()
    return sweep.finish(STATUS_COMPLETE)
