"""kneecap.workload.ramps and .slices: ramp schedules, time slices, the stable-p99 stopping rule."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.records import RequestRecord
from kneecap.workload.ramps import Ramp, concurrency_schedule, parse_ramp, ramp_arrival_times
from kneecap.workload.slices import p99_stable, slice_metrics, time_slices


def test_parse_ramp_and_errors():
    assert parse_ramp("linear:1:64:120") == Ramp("linear", 1.0, 64.0, 120.0)
    assert parse_ramp(" exp:0.5:32:300 ") == Ramp("exp", 0.5, 32.0, 300.0)
    for bad, fragment in [
        ("linear:1:64", "needs 4"),
        ("step:1:2:3", "linear or exp"),
        ("exp:0:4:10", "> 0"),
        ("linear:1:x:10", "must be numbers"),
        ("linear:1:4:0", "SECONDS"),
        ("linear:-1:4:5", ">= 0"),
    ]:
        with pytest.raises(KneecapError) as err:
            parse_ramp(bad)
        assert fragment in err.value.one_line() and bad in err.value.one_line()


def test_values_over_time():
    lin, exp = Ramp("linear", 2, 10, 40), Ramp("exp", 1, 16, 40)
    assert [lin.value_at(t) for t in (0, 20, 40, 99)] == [2, 6, 10, 10]
    assert [exp.value_at(t) for t in (0, 10, 20, 40)] == pytest.approx([1, 2, 4, 16])
    assert lin.expected_arrivals(40) == pytest.approx(240)  # mean rate 6 over 40 s
    assert exp.expected_arrivals(40) == pytest.approx(15 * 40 / math.log(16))


def test_poisson_ramp_arrivals_follow_the_rate():
    ramp = Ramp("linear", 5, 50, 200)
    times = np.asarray(ramp_arrival_times(ramp, seed=3))
    assert times[0] == 0 and np.all(np.diff(times) >= 0) and times[-1] <= 200
    assert len(times) == pytest.approx(ramp.expected_arrivals(200), rel=0.05)  # 5500 expected
    first, last = np.sum(times < 20), np.sum(times >= 180)  # rate ~5-9.5/s vs ~45.5-50/s
    assert first == pytest.approx(ramp.expected_arrivals(20), rel=0.15)
    assert last == pytest.approx(ramp.expected_arrivals(200) - ramp.expected_arrivals(180), rel=0.1)
    assert ramp_arrival_times(ramp, seed=3) == ramp_arrival_times(ramp, seed=3)
    assert ramp_arrival_times(ramp, seed=4) != ramp_arrival_times(ramp, seed=3)


@settings(max_examples=60, deadline=None)
@given(
    kind=st.sampled_from(["linear", "exp"]),
    a=st.floats(0.5, 50),
    b=st.floats(0.5, 50),
    d=st.floats(1, 500),
    x=st.floats(0, 1),
)
def test_property_arrival_inverse(kind, a, b, d, x):
    ramp = Ramp(kind, a, b, d)
    t = x * d
    assert ramp.time_of_arrivals(ramp.expected_arrivals(t)) == pytest.approx(t, rel=1e-6, abs=1e-6)


def test_concurrency_schedules():
    assert concurrency_schedule(Ramp("linear", 1, 4, 30)) == [(0, 1), (10, 2), (20, 3), (30, 4)]
    assert concurrency_schedule(Ramp("linear", 4, 1, 30)) == [(0, 4), (10, 3), (20, 2), (30, 1)]
    steps = concurrency_schedule(Ramp("exp", 1, 8, 30))
    assert [c for _, c in steps] == list(range(1, 9))
    assert [t for t, c in steps if c in (2, 4, 8)] == pytest.approx([10, 20, 30])  # doubling every 10 s


def rec(i, sent, ttft, itl, n=5, ok=True, warmup=False):
    chunks = [sent + ttft + k * itl for k in range(n)]
    return RequestRecord(
        request_id=f"r{i}",
        level=0,
        sent_at=sent,
        first_token_at=chunks[0],
        end_at=chunks[-1],
        chunk_times=chunks,
        chunk_tokens=[1] * n,
        output_tokens=n,
        expected_input_tokens=10,
        status="ok" if ok else "error",
        warmup=warmup,
    )


def test_time_slices_and_per_slice_metrics():
    records = [rec(i, sent=0.5 * i, ttft=0.1 + 0.01 * i, itl=0.02) for i in range(40)]  # 20 s of sends
    slices = time_slices(records, 5.0)
    assert [len(s.records) for s in slices] == [10, 10, 10, 10]
    assert slices[1].start_s == 5.0 and slices[1].end_s == 10.0
    ramp = Ramp("linear", 1, 4, 20)
    per = slice_metrics(records, 5.0, ramp=ramp)
    assert [p["load"] for p in per] == pytest.approx(
        [ramp.value_at(2.5), ramp.value_at(7.5), ramp.value_at(12.5), ramp.value_at(17.5)]
    )
    assert per[0]["summary"]["completed"] == 10 and per[0]["summary"]["request_s"] == pytest.approx(2.0)
    assert per[3]["summary"]["ttft_ms"]["mean"] > per[0]["summary"]["ttft_ms"]["mean"]  # TTFT grows in the data
    with pytest.raises(KneecapError):
        time_slices(records, 0)
    assert time_slices([], 5.0) == [] and slice_metrics([], 5.0) == []


def test_ramp_slices_has_every_slice_even_when_the_last_ones_are_empty():
    from kneecap.workload.slices import ramp_slices

    ramp = Ramp("linear", 2, 8, 10)  # ten 1 s slices; nothing is sent after 7.5 s
    records = [rec(i, sent=0.5 * i, ttft=0.1, itl=0.02) for i in range(16)]
    rows = ramp_slices(records, ramp, t0=0.0)
    assert [row["index"] for row in rows] == list(range(10))
    assert [row["requests"] for row in rows] == [2] * 8 + [0, 0]
    assert rows[-1]["target_rate"] == pytest.approx(ramp.value_at(9.5)) and rows[-1]["output_tok_s"] is None
    late = records + [rec(99, sent=10.001, ttft=0.1, itl=0.02)]  # a stamp a hair after the ramp's end
    assert len(ramp_slices(late, ramp, t0=0.0)) == 10


def test_stable_p99_on_a_steady_level_and_not_on_a_degrading_one():
    rng = np.random.default_rng(0)
    steady = [rec(i, sent=0.05 * i, ttft=float(rng.uniform(0.1, 0.2)), itl=0.02) for i in range(2000)]  # 100 s
    v = p99_stable(steady, 10.0, windows=3, rel_tol=0.05, min_samples=50)
    assert v.stable, v.why
    assert len(v.window_ends_s) == 4 and v.window_ends_s[-1] == pytest.approx(100.0)  # the last 3 + 1 windows
    assert all(x is not None for x in v.ttft_p99_ms)
    degrading = [rec(i, sent=0.05 * i, ttft=0.1 + 0.002 * i, itl=0.02 + 0.0001 * i) for i in range(2000)]
    d = p99_stable(degrading, 10.0, windows=3, rel_tol=0.05)
    assert not d.stable and "moved" in d.why


def test_stable_p99_needs_windows_and_samples():
    few = [rec(i, sent=0.5 * i, ttft=0.1, itl=0.02) for i in range(20)]
    v = p99_stable(few, 10.0, windows=3)
    assert not v.stable and "windows" in v.why
    sparse = [rec(i, sent=2.0 * i, ttft=0.1, itl=0.02) for i in range(40)]
    assert "fewer than 50" in p99_stable(sparse, 10.0, windows=3).why
    assert not p99_stable([], 10.0).stable
    warm = [rec(i, sent=0.05 * i, ttft=0.1, itl=0.02, warmup=True) for i in range(100)]
    assert p99_stable(warm, 1.0).why == "no completed request yet"
    with pytest.raises(KneecapError):
        p99_stable(few, 10.0, rel_tol=0)


def test_stable_p99_estimates_equal_the_level_summary_over_the_same_records():
    from kneecap.metrics.summarize import summarize_level

    rng = np.random.default_rng(1)
    records = []
    for i in range(600):  # multi-token chunks, and a token-less chunk, as servers stream them
        sent = 0.1 * i
        t = sent + float(rng.uniform(0.05, 0.3))
        times, toks = [t], [1]
        for _ in range(int(rng.integers(2, 12))):
            t += float(rng.uniform(0.01, 0.05))
            times.append(t)
            toks.append(int(rng.choice([0, 1, 1, 2, 3])))
        records.append(
            RequestRecord(
                request_id=f"r{i}",
                level=0,
                sent_at=sent,
                first_token_at=times[0],
                end_at=times[-1],
                chunk_times=times,
                chunk_tokens=toks,
                output_tokens=sum(toks),
            )
        )
    last_end = max(r.end_at for r in records)
    v = p99_stable(records, 5.0, windows=2, now_s=last_end, min_samples=10)
    full = [r for r in records if r.end_at <= v.window_ends_s[-1]]
    s = summarize_level(full, concurrency=1)
    assert v.ttft_p99_ms[-1] == pytest.approx(s["ttft_ms"]["p99"])
    assert v.itl_p99_ms[-1] == pytest.approx(s["itl_ms"]["p99"])
