"""Capacity: the region of cells that meet every applicable constraint in every repetition; and
Little's law, checked only where the interval is stable. Pure.

Seed 004: "Capacity is the region that repeatedly satisfies all applicable constraints, not the
single highest completed sample." A load point belongs to the region of (candidate, class, state)
when every repetition of it passed. The capacity *figure* is the highest load such that it and
every lower step are in the region (a pass above a failure is reported, not counted).
"""

from __future__ import annotations

from collections import defaultdict

from kneecap.records import RequestRecord
from kneecap.report.numbers import limit_and_breaches

STABLE_RATE_TOLERANCE = 0.15  # completion rate of the two halves of the interval may differ by this fraction
STABLE_TREND_TOLERANCE = 0.15  # in-flight count may drift by this fraction of its mean over the interval
LITTLE_TOLERANCE = 0.10  # |L - lambda W| / L above this is flagged
# A rate cell sends its requests at random (Poisson or gamma) times, so its realized rate strays from its step:
# by a standard deviation of 1/sqrt(burstiness x (n - 1)) of it, 12% for 300 requests of burstiness 0.25 (one
# such cell at a nominal 8 req/s went out at 6.9), 55% for 12 of burstiness 0.3 (a nominal 16 went out at 4.6).
# A capacity step is credited as such only when every repetition offered at least this share of it (within
# two such deviations of a 300-request bursty cell); else the capacity is what was offered.
OFFERED_RATE_SHARE = 0.8


def capacity_region(cells: list[dict]) -> dict:
    """cells: [{candidate, class, state, load: {dimension: x}, repetition, verdict, metrics}] ->
    {candidate: {class: {state: {region: [loads], capacity: load|None, dimension, failed: {load: [reasons]},
    at_capacity: {ttft_ms, itl_ms, tpot_ms, e2e_ms percentiles, output_tok_s}}}}}"""
    grouped: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(lambda: defaultdict(list))))
    dims: dict = {}
    for c in cells:
        ((dim, load),) = c["load"].items()
        dims[(c["candidate"], c["class"], c["state"])] = dim
        grouped[c["candidate"]][c["class"]][c["state"]][load].append(c)
    out: dict = {}
    for cand, by_class in grouped.items():
        out[cand] = {}
        for cls, by_state in by_class.items():
            out[cand][cls] = {}
            for state, by_load in by_state.items():
                loads = sorted(by_load)
                region = [x for x in loads if all(c["verdict"] == "pass" for c in by_load[x])]
                failed = {
                    str(x): sorted({r for c in by_load[x] if c["verdict"] != "pass" for r in _reasons(c)})
                    for x in loads
                    if x not in region
                }
                failures = {
                    str(x): [
                        {"repetition": c.get("repetition"), "verdict": c["verdict"], "reasons": _reasons(c)}
                        for c in sorted(by_load[x], key=lambda c: c.get("repetition") or 0)
                        if c["verdict"] != "pass"
                    ]
                    for x in loads
                    if x not in region
                }
                capacity = None
                for x in loads:
                    if x in region:
                        capacity = x
                    else:
                        break
                at_cap = None
                if capacity is not None:
                    at_cap = _worst_of(by_load[capacity])
                offered, shown = _offered_at(dims[(cand, cls, state)], capacity, by_load.get(capacity, []))
                out[cand][cls][state] = {
                    "dimension": dims[(cand, cls, state)],
                    "region": region,
                    "capacity": capacity,
                    "failed": failed,
                    "failures": failures,  # per failing load: which repetition failed, and why
                    "repetitions": max(len(v) for v in by_load.values()),
                    "highest_load": loads[-1] if loads else None,
                    "at_capacity": at_cap,
                    "offered_at_capacity": offered,  # rate: the lowest rate a repetition of the capacity step sent at
                    "capacity_shown": shown,  # the load the capacity claim rests on (the verdict compares this)
                }
    return out


def _offered_at(dimension: str, capacity, cells: list[dict]) -> tuple[float | None, float | None]:
    """(lowest offered rate among the capacity step's repetitions, the load shown): on the rate dimension the
    step itself when every repetition offered OFFERED_RATE_SHARE of it, else that lowest offered rate. A closed
    loop holds its C requests in flight by construction, so there the step is what was shown."""
    if capacity is None or dimension != "rate":
        return None, capacity
    rates = [(c.get("offered") or {}).get("offered_request_s") for c in cells]
    rates = [r for r in rates if r is not None]
    if not rates:  # every request at once (rate inf), or too few requests to time
        return None, capacity
    low = min(rates)
    return low, (capacity if low >= OFFERED_RATE_SHARE * capacity else low)


def _load(x) -> str:
    return f"{x:g}" if isinstance(x, (int, float)) else str(x)


def failure_text(load: str, failures: list[dict]) -> str:
    """'256 failed in rep0 (itl_p99_ms 149.3 > 60) and rep1 (itl_p99_ms 82.5 > 60)' — repetitions as the
    cell names count them (rep0 is the first)."""
    try:
        load = _load(float(load))
    except ValueError:
        pass
    parts = [f"rep{f.get('repetition')} ({'; '.join(f.get('reasons') or []) or f.get('verdict')})" for f in failures]
    return f"{load} failed in " + " and ".join(parts)


def region_end_text(info: dict) -> str:
    """Where one (class, state) region ends: its capacity, the first failing load and the repetition of each
    failure there; or that every load step passed (the region ends at the highest step run, not at a failure)."""
    dim, cap = info.get("dimension", "load"), info.get("capacity")
    failures = info.get("failures") or {}
    if not failures and not info.get("failed"):
        top = info.get("highest_load")
        text = f"every step passed up to {dim} {_load(top if top is not None else cap)} (the highest step run)"
        if info.get("offered_at_capacity") is not None and top == cap:
            text += "; " + capacity_text(info)
        return text
    first_load, first = next(iter(failures.items()), (None, None))
    if first_load is None:  # a summary from before `failures` was recorded
        first_load, reasons = next(iter(info["failed"].items()))
        first = [{"repetition": "?", "reasons": reasons}]
    have = capacity_text(info) if cap is not None else "no load step passed"
    return f"{have}; {dim} {failure_text(first_load, first)}"


def capacity_figure(info: dict) -> str | None:
    """The capacity step, with the rate it was offered at beside it on the rate dimension: '16 (offered 4.56)'."""
    cap, offered = info.get("capacity"), info.get("offered_at_capacity")
    if cap is None:
        return None
    return _load(cap) + (f" (offered {offered:.3g})" if isinstance(offered, (int, float)) else "")


def capacity_text(info: dict) -> str:
    """'capacity rate 16 (offered 15.2 req/s)', or, where a repetition of the step sent its requests below
    it, the rate it was shown at: 'capacity rate 4.56 as offered (the step 16 went out at 4.56 req/s)'."""
    dim, cap = info.get("dimension", "load"), info.get("capacity")
    offered, shown = info.get("offered_at_capacity"), info.get("capacity_shown", cap)
    if offered is None:
        return f"capacity {dim} {_load(cap)}"
    if shown == cap:
        return f"capacity {dim} {_load(cap)} (offered {offered:.3g} req/s)"
    return f"capacity {dim} {offered:.3g} as offered (the step {_load(cap)} went out at {offered:.3g} req/s)"


def accepted_reason(region: dict, classes, states) -> str:
    """The verdict line of an accepted candidate: what it met, and where each class's region ends."""
    ends = [
        f"{cls}/{state}: {region_end_text(region[cls][state])}"
        for cls in classes
        for state in states
        if state in region.get(cls, {})
    ]
    return "meets behaviour and every SLO budget in every repetition up to its capacity — " + "; ".join(ends)


def _reasons(cell: dict) -> list[str]:
    if cell["verdict"] == "not_run":
        return ["not run (ramp stopped below)"]
    return limit_and_breaches(cell)


def _worst_of(cells: list[dict]) -> dict:
    """Across repetitions of one load point: the worst percentile of each latency, the lowest throughput."""
    keys = ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms")
    out: dict = {}
    for k in keys:
        out[k] = {}
        for p in ("p50", "p95", "p99"):
            vals = [c["metrics"].get(k, {}).get(p) for c in cells if c.get("metrics")]
            vals = [v for v in vals if v is not None]
            out[k][p] = max(vals) if vals else None
        out[k]["n"] = sum((c["metrics"].get(k, {}).get("n") or 0) for c in cells if c.get("metrics"))
    tps = [c["metrics"].get("output_tok_s") for c in cells if c.get("metrics")]
    tps = [t for t in tps if t is not None]
    out["output_tok_s"] = min(tps) if tps else None
    return out


def _in_flight_average(records: list[RequestRecord], t0: float, t1: float) -> float:
    """Time-average number of requests in flight over [t0, t1] (from sent_at/end_at)."""
    span = t1 - t0
    if span <= 0:
        return 0.0
    busy = 0.0
    for r in records:
        if r.sent_at is None or r.end_at is None:
            continue
        busy += max(0.0, min(r.end_at, t1) - max(r.sent_at, t0))
    return busy / span


def littles_law(records: list[RequestRecord]) -> dict:
    """Check L = lambda x W on the level's interval, only if the interval is stable.

    Stability test (documented in docs/metrics.md): split [first send, last completion] in two halves;
    the completion rates of the halves must agree within STABLE_RATE_TOLERANCE, and the time-average
    in-flight count of the halves within STABLE_TREND_TOLERANCE. Unstable intervals (ramping queues,
    bursts, overload) are flagged and Little's law is not applied to them.
    """
    done = [r for r in records if not r.warmup and r.ok and r.sent_at is not None and r.end_at is not None]
    if len(done) < 20:
        return {
            "stable": False,
            "reason": f"too few completed requests ({len(done)}) to test stability",
            "applied": False,
        }
    t0 = min(r.sent_at for r in done)
    t1 = max(r.end_at for r in done)
    mid = (t0 + t1) / 2
    rate1 = sum(1 for r in done if r.end_at <= mid) / (mid - t0)
    rate2 = sum(1 for r in done if r.end_at > mid) / (t1 - mid)
    l1, l2 = _in_flight_average(records, t0, mid), _in_flight_average(records, mid, t1)
    rate_diff = abs(rate1 - rate2) / max(rate1, rate2, 1e-12)
    trend = abs(l1 - l2) / max((l1 + l2) / 2, 1e-12)
    stable = rate_diff <= STABLE_RATE_TOLERANCE and trend <= STABLE_TREND_TOLERANCE
    result = {"stable": stable, "rate_halves_diff": round(rate_diff, 4), "in_flight_halves_diff": round(trend, 4)}
    if not stable:
        result.update(applied=False, reason="interval not stable: Little's law not applied")
        return result
    lam = len(done) / (t1 - t0)
    w = sum(r.end_at - r.sent_at for r in done) / len(done)
    l_obs = _in_flight_average(records, t0, t1)
    rel = abs(l_obs - lam * w) / max(l_obs, 1e-12)
    result.update(
        applied=True,
        arrival_rate_s=lam,
        mean_time_in_system_s=w,
        L_observed=l_obs,
        L_predicted=lam * w,
        relative_error=rel,
        consistent=rel <= LITTLE_TOLERANCE,
    )
    return result


def offered_rate(records: list[RequestRecord]) -> float | None:
    """The rate requests were offered at: (n - 1) / (last send - first send), by their scheduled send times
    (the send times where none were scheduled); None for fewer than two, or all sent at one instant."""
    sends = sorted(
        t for t in ((r.scheduled_at if r.scheduled_at is not None else r.sent_at) for r in records) if t is not None
    )
    if len(sends) < 2 or sends[-1] <= sends[0]:
        return None
    return (len(sends) - 1) / (sends[-1] - sends[0])


def offered_vs_completed(
    records: list[RequestRecord], duration_s: float | None, nominal_rate: float | None = None
) -> dict:
    """Offered load beside completed throughput: the rate the requests were sent at (offered_rate) beside
    the cell's nominal step (nominal_request_s, rate cells), successful requests per s of the level, drops."""
    recs = [r for r in records if not r.warmup]
    ok = sum(1 for r in recs if r.ok)
    if recs and not duration_s:
        starts = [
            t for t in (r.scheduled_at if r.scheduled_at is not None else r.sent_at for r in recs) if t is not None
        ]
        ends = [r.end_at for r in recs if r.end_at is not None]
        duration_s = (max(ends) - min(starts)) if ends and starts else None
    return {
        "offered_request_s": offered_rate(recs),
        "nominal_request_s": nominal_rate,
        "completed_request_s": ok / duration_s if recs and duration_s else None,
        "dropped": len(recs) - ok,
    }
