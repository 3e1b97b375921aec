"""SLO parsing and verdicts, the knee rule on synthetic curves, and the stop rules."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.metrics.knee import find_knee, gain_per_doubling
from kneecap.metrics.slo import (
    format_slo,
    level_meets_slo,
    parse_slo,
    per_request_budgets_ms,
    request_is_good,
)
from kneecap.metrics.stop import StopLimits, check_stop, stop_record
from kneecap.records import RequestRecord

# --- SLO ---------------------------------------------------------------------------------------------


def test_parse_slo_valid():
    got = parse_slo(" ttft_p99_ms=500, itl_p99_ms=50 ,e2e_p95_ms=8000,error_rate=0.01 ")
    assert got == {"ttft_p99_ms": 500.0, "itl_p99_ms": 50.0, "e2e_p95_ms": 8000.0, "error_rate": 0.01}
    assert parse_slo(format_slo(got)) == got
    assert parse_slo(None) == {} and parse_slo("") == {}
    assert parse_slo({"tpot_mean_ms": 30}) == {"tpot_mean_ms": 30.0}


@pytest.mark.parametrize(
    "spec, match",
    [
        ("ttft_p99=500", "did you mean 'ttft_p99_ms'"),
        ("ttfb_p99_ms=500", "unknown SLO key 'ttfb_p99_ms'"),
        ("ttft_p42_ms=500", "stat in mean, p50, p90, p95, p99, max"),
        ("ttft_p99_ms", "has no '=value'"),
        ("ttft_p99_ms=fast", "needs a number"),
        ("ttft_p99_ms=-5", "positive number of milliseconds"),
        ("ttft_p99_ms=0", "positive"),
        ("error_rate=5", "fraction in \\[0, 1\\]"),
        ("ttft_p99_ms=1,ttft_p99_ms=2", "given twice"),
    ],
)
def test_parse_slo_errors_name_the_fix(spec, match):
    with pytest.raises(KneecapError) as info:
        parse_slo(spec)
    line = info.value.one_line()  # message and hint, as the CLI prints them
    assert re.search(match, line) and "\n" not in line


def test_unknown_key_message_lists_valid_keys():
    with pytest.raises(KneecapError) as info:
        parse_slo("latency=3")
    line = info.value.one_line()
    assert "error_rate" in line and "ttft" in line and "itl" in line and "tpot" in line and "e2e" in line


def _level(**kw):
    base = {"requests": 100, "failed": 0, "ttft_ms": {"p99": 400.0}, "itl_ms": {"p99": 40.0}}
    base.update(kw)
    return base


def test_level_meets_slo_and_breaches():
    slo = parse_slo("ttft_p99_ms=500,itl_p99_ms=50,error_rate=0.01")
    assert level_meets_slo(_level(), slo) == (True, [])
    ok, breaches = level_meets_slo(_level(failed=2, itl_ms={"p99": 60.0}), slo)
    assert not ok
    assert [(b["key"], b["value"]) for b in breaches] == [("itl_p99_ms", 60.0), ("error_rate", 0.02)]
    ok, breaches = level_meets_slo({"requests": 0, "failed": 0, "ttft_ms": {"p99": None}}, slo)
    assert not ok and all(b["value"] is None for b in breaches)  # no data never meets an SLO


def test_per_request_budgets_take_the_ceiling_and_skip_level_only_terms():
    slo = parse_slo("ttft_p50_ms=200,ttft_p99_ms=500,itl_p99_ms=50,tpot_mean_ms=40,error_rate=0.1")
    assert per_request_budgets_ms(slo) == {"ttft": 500.0, "tpot": 40.0}


@pytest.mark.parametrize(
    "kw, good",
    [
        ({}, True),  # TTFT 100 ms <= 500; TPOT (1.1 - 0.1) / 9 = 111 ms <= 120
        ({"first_token_at": 0.6}, False),  # TTFT 600 > 500
        ({"status": "error", "error_kind": "http_500"}, False),  # failed is never good
        ({"first_token_at": None}, False),  # no first token: TTFT missing
        ({"output_tokens": 1}, True),  # TPOT undefined for 1 token: no breach
        ({"end_at": 3.0}, False),  # TPOT (3.0 - 0.1) / 9 = 322 ms > 120
    ],
)
def test_request_is_good(kw, good):
    fields = dict(request_id="r", level=0, sent_at=0.0, first_token_at=0.1, end_at=1.1, output_tokens=10)
    fields.update(kw)
    budgets = {"ttft": 500.0, "tpot": 120.0}
    assert request_is_good(RequestRecord(**fields), budgets) is good
    slo = {"ttft_p99_ms": 500.0, "tpot_p50_ms": 120.0}
    assert request_is_good(RequestRecord(**fields), per_request_budgets_ms(slo)) is good


# --- knee --------------------------------------------------------------------------------------------


def curve(xs, ys, tpot=None, key="concurrency"):
    tpot = tpot or [10.0 * (1 + i) for i in range(len(xs))]
    return [
        {key: x, "output_tok_s": y, "tpot_ms": {"p50": t}, "ttft_ms": {"p50": 100.0}} for x, y, t in zip(xs, ys, tpot)
    ]


def test_gain_per_doubling_scales_steps():
    assert gain_per_doubling(1, 100, 2, 150) == pytest.approx(0.5)
    assert gain_per_doubling(1, 100, 4, 225) == pytest.approx(0.5)  # 2.25 over two doublings
    assert gain_per_doubling(10, 100, 20, 100) == pytest.approx(0.0)


def test_knee_on_saturating_curve():
    # 8 -> 16 adds 6.7%, 8 -> 32 adds 4.1% per doubling: both < 10%, latency rises
    levels = curve([1, 2, 4, 8, 16, 32], [100, 195, 370, 600, 640, 650])
    knee = find_knee(levels)
    assert knee["concurrency"] == 8 and knee["output_tok_s"] == 600 and knee["kind"] == "saturation"
    assert "10%" in knee["rule"]


def test_knee_on_collapsing_curve():
    levels = curve([1, 2, 4, 8, 16], [100, 190, 350, 200, 100])
    knee = find_knee(levels)
    assert knee["concurrency"] == 4 and knee["kind"] == "collapse" and "fell 42.9%" in knee["rule"]


def test_still_rising_curve_has_no_knee():
    assert find_knee(curve([1, 2, 4, 8, 16], [100, 195, 380, 740, 1400])) is None


def test_one_noisy_dip_is_not_a_knee():
    # 2 -> 4 dips, but 8 and 16 are far above 2 per doubling: keep climbing
    assert find_knee(curve([1, 2, 4, 8, 16], [100, 190, 185, 360, 700])) is None


def test_flat_throughput_without_latency_cost_is_not_a_knee():
    levels = curve([1, 2, 4], [100, 104, 106], tpot=[10.0, 10.0, 10.0])
    assert find_knee(levels) is None


def test_knee_with_uneven_steps_and_rates_and_unsorted_input():
    # rates 10, 30 (log2 3 = 1.585 doublings), 40; 10 -> 30 gains 5% total -> 3.1% per doubling
    levels = curve([40, 10, 30], [104, 100, 105], tpot=[30.0, 10.0, 20.0], key="rate")
    knee = find_knee(levels, key="rate")
    assert knee["rate"] == 10


def test_knee_ignores_unusable_levels_and_validates_key():
    levels = curve([1, 2, 4], [100, 200, 205]) + [{"concurrency": "max", "output_tok_s": 999.0}]
    levels.append({"concurrency": 8, "output_tok_s": 5000.0, "partial": True, "tpot_ms": {"p50": 1e3}})
    assert find_knee(levels)["concurrency"] == 2
    assert find_knee([]) is None
    with pytest.raises(KneecapError, match="knee key"):
        find_knee(levels, key="qps")


@given(
    st.lists(st.floats(min_value=1.0, max_value=1e5), min_size=2, max_size=8),
    st.floats(min_value=0.01, max_value=100.0),
    st.randoms(use_true_random=False),
)
def test_knee_is_invariant_to_order_and_throughput_units(ys, scale, rnd):
    levels = curve([2**i for i in range(len(ys))], ys)
    knee = find_knee(levels)
    shuffled = list(levels)
    rnd.shuffle(shuffled)
    assert find_knee(shuffled) == knee
    scaled = [dict(level, output_tok_s=level["output_tok_s"] * scale) for level in levels]
    got = find_knee(scaled)
    assert (got is None) == (knee is None)
    if knee is not None:
        assert got["concurrency"] == knee["concurrency"] and got["kind"] == knee["kind"]


@given(st.lists(st.floats(min_value=0.10, max_value=3.0), min_size=1, max_size=7))
def test_curve_gaining_at_least_10_percent_per_doubling_has_no_knee(gains):
    ys = [100.0]
    for g in gains:
        ys.append(ys[-1] * (1 + g) * 1.0000001)
    assert find_knee(curve([2**i for i in range(len(ys))], ys)) is None


# --- stop --------------------------------------------------------------------------------------------


def lvl(c, failed=0, p99=100.0, y=100.0, requests=100):
    return {
        "concurrency": c,
        "requests": requests,
        "failed": failed,
        "output_tok_s": y,
        "ttft_ms": {"p50": p99 / 2, "p99": p99},
        "tpot_ms": {"p50": 10.0 * c},
    }


def test_stop_on_error_rate():
    limits = StopLimits(max_error_rate=0.2)
    assert check_stop([lvl(1, failed=20)], limits) is None  # 0.2 is not above 0.2
    got = check_stop([lvl(1), lvl(2, failed=21)], limits)
    assert got["at"] == 2 and got["reason"] == "error_rate" and "0.210" in got["detail"]


def test_stop_on_two_consecutive_slo_breaches():
    limits = StopLimits(slo="ttft_p99_ms=500")
    assert check_stop([lvl(1), lvl(2, p99=900)], limits) is None  # one breach: keep going
    assert check_stop([lvl(1), lvl(2, p99=900), lvl(4, p99=400), lvl(8, p99=900)], limits) is None
    got = check_stop([lvl(1), lvl(2, p99=900), lvl(4, p99=950)], limits)
    assert got["at"] == 4 and got["reason"] == "slo_breach" and "ttft_p99_ms 950" in got["detail"]
    assert check_stop([lvl(1, p99=900)], StopLimits(slo={"ttft_p99_ms": 500}, consecutive_breaches=1))["at"] == 1


def test_stop_after_levels_past_knee():
    levels = [lvl(1, y=100), lvl(2, y=190), lvl(4, y=200), lvl(8, y=201)]
    assert check_stop(levels, StopLimits()) is None  # default: never stop at the knee
    assert check_stop(levels[:3], StopLimits(levels_past_knee=2)) is None  # knee 2, one level past it
    got = check_stop(levels, StopLimits(levels_past_knee=2))
    assert got["reason"] == "knee" and got["at"] == 8


def test_stop_limits_validation_and_caller_records():
    with pytest.raises(KneecapError, match="error rate"):
        StopLimits(max_error_rate=2)
    with pytest.raises(KneecapError, match="consecutive"):
        StopLimits(consecutive_breaches=0)
    with pytest.raises(KneecapError, match="unknown SLO key"):
        StopLimits(slo="ttft=3")
    assert stop_record(512, "preflight_exceeds", "needs 2.1M tokens, pool holds 1.57M") == {
        "at": 512,
        "reason": "preflight_exceeds",
        "detail": "needs 2.1M tokens, pool holds 1.57M",
    }
    with pytest.raises(KneecapError, match="stop reason"):
        stop_record(1, "bored", "")
    assert check_stop([], StopLimits()) is None
