"""Judging one cell: SLO budgets (per class) and declared stop limits. Pure.

verdict "pass"        every budget met, no limit crossed
        "slo_breach"  a budget missed, or the cell not at steady state (the ramp goes on unless stop_on_slo_breach)
        "limit"       a declared limit crossed (error/timeout/invalid-output rate, unstable tail,
                      suspect measurement, behaviour drift): the ramp stops here
        "not_run"     a higher step of a ramp that had already stopped
"""

from __future__ import annotations

from kneecap.loadplan.schema import Budget, StopSpec
from kneecap.metrics.stop import LIMIT, SLO_BREACH  # a verdict that stops its ramp is the ramp's stop reason
from kneecap.units import fmt_over


def _pct(level: dict, metric: str, pct: str) -> float | None:
    dist = level.get(f"{metric}_ms") or {}
    return dist.get(pct)


def budget_breaches(level: dict, budget: Budget | None) -> list[str]:
    """Budgets this level misses, as readable strings ('ttft_p99_ms 812.4 > 500')."""
    if budget is None:
        return []
    out = []
    for key, limit in budget.limits().items():
        metric, pct, _ = key.split("_")
        value = _pct(level, metric, pct)
        if value is None:
            out.append(f"{key}: no samples")
        elif value > limit:
            out.append(f"{key} {fmt_over(value, limit)}")
    requests = level.get("requests") or 0
    if requests:
        rate = (level.get("failed") or 0) / requests
        if rate > budget.error_rate:
            out.append(f"error_rate {fmt_over(rate, budget.error_rate, decimals=3)}")
    return out


def limit_crossed(
    level: dict, stop: StopSpec, *, invalid_outputs: int = 0, behaviour_drift: list[str] | None = None
) -> str | None:
    """The first declared limit this level crosses, or None."""
    requests = level.get("requests") or 0
    if requests:
        errors = level.get("errors") or {}
        failed = level.get("failed") or 0
        timeouts = sum(v for k, v in errors.items() if "timeout" in k or k == "stall")
        if failed / requests > stop.max_error_rate:
            kinds = ", ".join(f"{k}={v}" for k, v in sorted(errors.items()))
            return f"error rate {fmt_over(failed / requests, stop.max_error_rate, decimals=3)} ({kinds})"
        if timeouts / requests > stop.max_timeout_rate:
            return f"timeout rate {fmt_over(timeouts / requests, stop.max_timeout_rate, decimals=3)}"
        if invalid_outputs / requests > stop.max_invalid_output_rate:
            return (
                f"invalid output rate {fmt_over(invalid_outputs / requests, stop.max_invalid_output_rate, decimals=3)}"
            )
    if behaviour_drift:
        return f"behaviour drift: {', '.join(behaviour_drift)}"
    p50, p99 = _pct(level, "ttft", "p50"), _pct(level, "ttft", "p99")
    if p50 and p99 and p99 / p50 > stop.unstable_tail_ratio:
        return f"unstable tail: ttft p99/p50 = {fmt_over(p99 / p50, stop.unstable_tail_ratio, decimals=1)}"
    if stop.stop_on_suspect and level.get("suspect"):
        return "measurement corruption: the client's own lag may have set the numbers (suspect)"
    return None


def steady_breaches(level: dict, *, simulated: bool) -> list[str]:
    """A cell that did not reach steady state cannot pass (kneecap.metrics.stability): over capacity (its queue
    grew) always; transient (too short to tell) on the simulator, whose cells decide for a real deployment."""
    st = level.get("stability") if isinstance(level.get("stability"), dict) else {}
    verdict = st.get("verdict")
    num = lambda key: f"{st[key]:.3g}" if isinstance(st.get(key), (int, float)) else "?"
    if verdict == "over_capacity":
        return [
            f"steady state: over capacity (served {num('served_rps')} of {num('sent_rps')} req/s sent, "
            f"waiting queue growing {num('queue_trend')} req/s)"
        ]
    if simulated and verdict == "transient":
        return [
            f"steady state: transient ({st.get('window_requests', '?')} requests, "
            f"{num('in_flight_mean')} in flight: too short to show it)"
        ]
    return []


def judge(level: dict, budget: Budget | None, stop: StopSpec, *, simulated: bool = False, **kw) -> dict:
    """{'verdict', 'breaches', 'limit'} for one cell's level summary."""
    breaches = budget_breaches(level, budget) + (steady_breaches(level, simulated=simulated) if budget else [])
    limit = limit_crossed(level, stop, **kw)
    verdict = LIMIT if limit else SLO_BREACH if breaches else "pass"
    return {"verdict": verdict, "breaches": breaches, "limit": limit}


def why(cell: dict) -> str:
    """What a cell's verdict rests on: the limit it crossed, else the budgets it missed."""
    return cell.get("limit") or "; ".join(cell.get("breaches") or [])


def stops_ramp(verdict: str, stop: StopSpec) -> bool:
    """Does a cell of this verdict stop its ramp? A limit always does; a missed budget with stop_on_slo_breach."""
    return verdict == LIMIT or (verdict == SLO_BREACH and stop.stop_on_slo_breach)
