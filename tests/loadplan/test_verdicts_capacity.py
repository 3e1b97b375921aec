"""Cell verdicts, the capacity region, Little's law on stable intervals, behaviour checks."""

from __future__ import annotations

import pytest

from kneecap.loadplan.behaviour import check, drift
from kneecap.loadplan.capacity import capacity_region, littles_law, offered_rate, offered_vs_completed, region_end_text
from kneecap.loadplan.cells import auto_steps, build_ramps
from kneecap.loadplan.schema import Budget, Expectation, StopSpec
from kneecap.loadplan.verdicts import judge, stops_ramp
from kneecap.records import RequestRecord


def level(ttft_p50=100.0, ttft_p99=200.0, itl_p99=20.0, requests=100, failed=0, errors=None, suspect=False):
    return {
        "requests": requests,
        "completed": requests - failed,
        "failed": failed,
        "errors": errors or {},
        "ttft_ms": {"p50": ttft_p50, "p95": ttft_p99, "p99": ttft_p99, "n": requests - failed},
        "itl_ms": {"p50": 10.0, "p95": itl_p99, "p99": itl_p99, "n": 1000},
        "output_tok_s": 1000.0,
        "suspect": suspect,
    }


BUDGET = Budget(ttft_p99_ms=500, itl_p99_ms=50, error_rate=0.01)


@pytest.mark.parametrize(
    "lvl,verdict,stops",
    [
        (level(), "pass", False),
        (level(ttft_p99=600), "slo_breach", True),
        (level(failed=2, errors={"http_500": 2}), "slo_breach", True),  # 2% > 1% budget, < 5% limit
        (level(failed=10, errors={"http_500": 10}), "limit", True),  # 10% > 5% stop limit
        (level(failed=3, errors={"timeout": 3}), "limit", True),  # 3% timeouts > 2%
        (level(ttft_p50=10, ttft_p99=400), "limit", True),  # p99/p50 = 40 > 20: unstable tail
        (level(suspect=True), "limit", True),
    ],
)
def test_judge(lvl, verdict, stops):
    j = judge(lvl, BUDGET, StopSpec())
    assert j["verdict"] == verdict
    assert stops_ramp(j["verdict"], StopSpec()) is stops


@pytest.mark.parametrize("verdict,stops", [("pass", False), ("slo_breach", False), ("limit", True), ("not_run", False)])
def test_slo_breach_does_not_stop_when_told(verdict, stops):
    assert stops_ramp(verdict, StopSpec(stop_on_slo_breach=False)) is stops


def cell(load, rep, verdict, cand="a", cls="short"):
    return {
        "candidate": cand,
        "class": cls,
        "state": "warm",
        "load": {"concurrency": load},
        "repetition": rep,
        "verdict": verdict,
        "breaches": [] if verdict == "pass" else ["ttft_p99_ms 600 > 500"],
        "limit": None,
        "metrics": level(ttft_p99=100 + load),
    }


def test_capacity_requires_every_repetition():
    cells = [
        cell(1, 0, "pass"),
        cell(2, 0, "pass"),
        cell(4, 0, "pass"),
        cell(8, 0, "slo_breach"),
        cell(1, 1, "pass"),
        cell(2, 1, "pass"),
        cell(4, 1, "slo_breach"),
        cell(8, 1, "not_run"),
    ]
    reg = capacity_region(cells)["a"]["short"]["warm"]
    assert reg["region"] == [1, 2]
    assert reg["capacity"] == 2
    assert reg["repetitions"] == 2
    assert "4" in reg["failed"] and "8" in reg["failed"]
    assert reg["at_capacity"]["ttft_ms"]["p99"] == 102  # worst over repetitions at load 2


def test_pass_above_a_failure_is_in_region_but_not_capacity():
    cells = [cell(1, 0, "pass"), cell(2, 0, "slo_breach"), cell(4, 0, "pass")]
    reg = capacity_region(cells)["a"]["short"]["warm"]
    assert reg["region"] == [1, 4]
    assert reg["capacity"] == 1


def test_empty_region():
    reg = capacity_region([cell(1, 0, "slo_breach")])["a"]["short"]["warm"]
    assert reg["region"] == [] and reg["capacity"] is None and reg["at_capacity"] is None


def closed_loop_records(c=4, n=200, service=1.0):
    """C workers each sending back-to-back requests of `service` seconds: L = C exactly."""
    recs = []
    for i in range(n):
        k = i // c  # worker i % c, its k-th request
        recs.append(
            RequestRecord(
                request_id=str(i),
                level=0,
                concurrency=c,
                sent_at=k * service,
                first_token_at=k * service + 0.1,
                end_at=(k + 1) * service,
            )
        )
    return recs


def test_littles_law_holds_on_stable_closed_loop():
    res = littles_law(closed_loop_records())
    assert res["stable"] and res["applied"]
    assert res["L_observed"] == pytest.approx(4.0)
    assert res["L_predicted"] == pytest.approx(4.0, rel=0.01)
    assert res["consistent"]


def test_littles_law_not_applied_to_growing_queue():
    # an overloaded open loop: arrivals at 2/s, service grows linearly -> in-flight count grows
    recs = [
        RequestRecord(request_id=str(i), level=0, sent_at=i * 0.5, end_at=i * 0.5 + 0.5 + i * 0.2) for i in range(100)
    ]
    res = littles_law(recs)
    assert not res["stable"] and not res["applied"]


def test_offered_vs_completed_counts_drops():
    recs = closed_loop_records(n=10)
    recs[3].status = "error"
    out = offered_vs_completed(recs, duration_s=10.0)
    # 10 requests sent over 2 s (four workers: sends at 0, 0, 0, 0, 1, 1, 1, 1, 2, 2): 9 gaps in 2 s
    assert out["offered_request_s"] == 4.5 and out["completed_request_s"] == 0.9 and out["dropped"] == 1
    assert out["nominal_request_s"] is None


def test_offered_rate_is_the_send_rate_not_the_level_duration():
    """Nine gaps of 0.25 s between scheduled sends: 4 req/s offered, however long the last answer took."""
    recs = [
        RequestRecord(
            request_id=str(i),
            level=0,
            rate=16.0,
            scheduled_at=i * 0.25,
            sent_at=i * 0.25 + 0.001,
            end_at=i * 0.25 + 5.0,
        )
        for i in range(10)
    ]
    out = offered_vs_completed(recs, duration_s=None, nominal_rate=16.0)
    assert out["offered_request_s"] == pytest.approx(4.0) and out["nominal_request_s"] == 16.0
    assert out["completed_request_s"] == pytest.approx(10 / (9 * 0.25 + 5.0))
    assert offered_rate(recs[:1]) is None  # one request: no rate
    assert offered_rate([RequestRecord(request_id=str(i), level=0, scheduled_at=0.0) for i in range(4)]) is None


def rate_cell(load, rep, offered, verdict="pass"):
    c = cell(load, rep, verdict)
    c["load"] = {"rate": float(load)}
    c["offered"] = {"offered_request_s": offered, "nominal_request_s": float(load)}
    return c


def test_rate_capacity_rests_on_what_was_offered():
    # step 16 passed in both repetitions, but one of them sent its requests at 4.6 req/s
    short = capacity_region([rate_cell(8, 0, 8.3), rate_cell(16, 0, 15.1), rate_cell(8, 1, 7.8), rate_cell(16, 1, 4.6)])
    reg = short["a"]["short"]["warm"]
    assert reg["capacity"] == 16.0 and reg["offered_at_capacity"] == 4.6 and reg["capacity_shown"] == 4.6
    assert "capacity rate 4.6 as offered (the step 16 went out at 4.6 req/s)" in region_end_text(reg)
    # within OFFERED_RATE_SHARE (80%) of the step in every repetition: the step is what was shown
    close = capacity_region([rate_cell(8, 0, 8.3), rate_cell(16, 0, 15.1), rate_cell(16, 1, 13.0)])["a"]["short"][
        "warm"
    ]
    assert close["capacity_shown"] == 16.0 and close["offered_at_capacity"] == 13.0
    assert "(offered 13 req/s)" in region_end_text(close)
    below = capacity_region([rate_cell(16, 0, 15.1), rate_cell(16, 1, 12.7)])["a"]["short"]["warm"]
    assert below["capacity_shown"] == 12.7
    # a closed loop keeps its C requests in flight: the step is the capacity, no offered rate
    closed = capacity_region([cell(1, 0, "pass"), cell(2, 0, "pass")])["a"]["short"]["warm"]
    assert closed["capacity_shown"] == 2 and closed["offered_at_capacity"] is None


def test_ramps_order_and_auto_steps():
    ramps = build_ramps("a", ["x", "y"], ["warm", "cold"], "concurrency", [4, 1, 2], repetitions=2)
    assert len(ramps) == 2 * 2 * 2
    assert [c.load for c in ramps[0]] == [1, 2, 4]  # lowest first, one dimension at a time
    assert [c.index for r in ramps for c in r] == list(range(24))
    assert [(r[0].repetition, r[0].class_name, r[0].state) for r in ramps[:5]] == [
        (0, "x", "warm"),
        (0, "x", "cold"),
        (0, "y", "warm"),
        (0, "y", "cold"),
        (1, "x", "warm"),
    ]
    assert ramps[-1][0].repetition == 1 and {c.candidate for r in ramps for c in r} == {"a"}
    assert auto_steps(100) == [1, 2, 4, 8, 16, 32, 64, 128]
    assert auto_steps(5000, ceiling=1024)[-1] == 1024


@pytest.mark.parametrize(
    "expect,answer,ok",
    [
        (Expectation(exact="Paris"), "  Paris\n", True),
        (Expectation(exact="Paris"), "Paris.", False),
        (Expectation(regex=r"\bParis\b"), "It is Paris.", True),
        (Expectation(json_schema={"type": "object", "required": ["city"]}), '{"city": "Paris"}', True),
        (Expectation(json_schema={"type": "object", "required": ["city"]}), '{"town": "Paris"}', False),
        (Expectation(json_schema={"type": "object"}), "not json", False),
        (Expectation(must_abstain=True), "I cannot help with that request.", True),
        (Expectation(must_abstain=True), "Sure, here is how to do it.", False),
        (Expectation(language="fr"), "La capitale de la France est Paris, une ville magnifique.", True),
        (Expectation(language="en"), "La capitale de la France est Paris, une ville magnifique.", False),
    ],
)
def test_behaviour_checks(expect, answer, ok):
    assert check(expect, answer)[0] is ok


def test_drift_lists_cases_that_stopped_passing():
    assert drift({"a": True, "b": True, "c": False}, {"a": True, "b": False, "c": False}) == ["b"]
