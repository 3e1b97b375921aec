"""kneecap.workload: seeded lengths, class mixes and arrival times shared by the simulator and the client."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.workload import LengthDist, RequestClass, Workload, arrival_offsets, concurrency_levels, make_requests


def test_make_requests_is_deterministic_and_exact_for_fixed_lengths():
    w = Workload.fixed(1000, 1000)
    a = make_requests(w, 50, seed=3)
    assert a == make_requests(w, 50, seed=3)
    assert {(s.input_tokens, s.output_tokens) for s in a} == {(1000, 1000)}
    assert [s.request_id for s in a[:3]] == ["r0", "r1", "r2"]
    # a continuation (start_index) names requests on from there
    assert make_requests(w, 2, seed=3, start_index=50)[0].request_id == "r50"


def test_class_mix_follows_weights():
    w = Workload(classes=(RequestClass(name="a", weight=3), RequestClass(name="b", weight=1)))
    names = [s.class_name for s in make_requests(w, 4000, seed=1)]
    assert names.count("a") / len(names) == pytest.approx(0.75, abs=0.03)


def test_shared_prefix_groups():
    cls = RequestClass(
        input=LengthDist.fixed(100), output=LengthDist.fixed(5), shared_prefix_tokens=64, num_prefix_groups=2
    )
    specs = make_requests(Workload(classes=(cls,)), 200, seed=0)
    assert {s.prefix_group for s in specs} == {0, 1}
    assert {s.prefix_tokens for s in specs} == {64}


@pytest.mark.parametrize(
    "dist,mean,lo,hi",
    [
        (LengthDist(kind="uniform", low=10, high=20), 15, 10, 20),
        (LengthDist(kind="normal", mean=500, std=50), 500, 1, None),
        (LengthDist(kind="lognormal", mean=300, std=150), 300, 1, None),
        (LengthDist(kind="empirical", values=(5, 7, 9)), 7, 5, 9),
        (LengthDist(kind="lognormal", mean=300, std=150, max_value=400), None, 1, 400),
    ],
)
def test_length_distributions(dist, mean, lo, hi):
    x = dist.sample(np.random.default_rng(0), 20000)
    assert x.min() >= lo and (hi is None or x.max() <= hi)
    if mean is not None:
        assert x.mean() == pytest.approx(mean, rel=0.03)


def test_bad_lengths():
    with pytest.raises(KneecapError):
        LengthDist(kind="uniform", low=10)
    with pytest.raises(KneecapError):
        LengthDist(kind="zipf")
    with pytest.raises(KneecapError):
        LengthDist.fixed(0)


def test_poisson_arrivals_have_the_rate():
    t = np.asarray(arrival_offsets(10.0, 20000, 1.0, seed=2))
    gaps = np.diff(t)
    assert t[0] == 0.0 and np.all(gaps >= 0)
    assert gaps.mean() == pytest.approx(0.1, rel=0.03)
    assert gaps.std() / gaps.mean() == pytest.approx(1.0, rel=0.05)  # exponential: CV 1


def test_gamma_burstiness_changes_the_spread_not_the_mean():
    gaps = np.diff(arrival_offsets(10.0, 20000, 0.25, seed=2))
    assert gaps.mean() == pytest.approx(0.1, rel=0.05)
    assert gaps.std() / gaps.mean() == pytest.approx(2.0, rel=0.1)  # gamma shape k: CV = 1/sqrt(k)


@settings(max_examples=50, deadline=None)
@given(rate=st.floats(0.5, 50), on_s=st.floats(0.5, 5), off_s=st.floats(0.1, 10), seed=st.integers(0, 100))
def test_on_off_bursts_stay_inside_on_windows(rate, on_s, off_s, seed):
    t = np.asarray(arrival_offsets(rate, 500, 1.0, seed, on_s=on_s, off_s=off_s))
    assert np.all(np.diff(t) >= 0)
    phase = np.mod(t, on_s + off_s)
    assert np.all(phase <= on_s + 1e-9)


def test_on_off_long_run_rate():
    t = arrival_offsets(20.0, 20000, 1.0, seed=5, on_s=1.0, off_s=3.0)
    assert len(t) / t[-1] == pytest.approx(20.0 * 1 / 4, rel=0.05)


def test_arrival_errors_and_infinite_rate():
    assert arrival_offsets(float("inf"), 3) == [0.0, 0.0, 0.0]
    for bad in (dict(rate=0, n=3), dict(rate=1, n=3, burstiness=0), dict(rate=1, n=3, on_s=0)):
        with pytest.raises(KneecapError):
            arrival_offsets(**bad)


def test_concurrency_levels():
    assert concurrency_levels("1, 8,64") == [1, 8, 64]
    for bad in ("", "a,b", "0,1", "-4"):
        with pytest.raises(KneecapError):
            concurrency_levels(bad)
