"""kneecap.metrics.search.find_max: bracketing then bisection, over concurrency (whole steps) and rate (relative)."""

from __future__ import annotations

import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.metrics.search import Verdict, find_max


def threshold(limit: float):
    """A monotone synthetic server: every SLO holds up to `limit`."""

    def evaluate(load, repetition):
        return Verdict(load <= limit, "" if load <= limit else f"p99 TTFT breached at {load}")

    return evaluate


def test_concurrency_search_finds_the_exact_limit_and_keeps_every_probe():
    got = find_max(threshold(37), "concurrency", low=1, high=1024)
    assert (got.value, got.failed_at) == (37, 38)
    assert got.failed_because == "p99 TTFT breached at 38"
    loads = [p.load for p in got.probes]
    assert loads[:7] == [1, 2, 4, 8, 16, 32, 64]  # doubling until the first failure
    assert len(loads) == len(set(loads))  # no load evaluated twice
    j = got.to_json()
    assert {k: j[k] for k in ("dimension", "value", "repeats", "failed_at", "failed_because")} == {
        "dimension": "concurrency",
        "value": 37,
        "repeats": 1,
        "failed_at": 38,
        "failed_because": "p99 TTFT breached at 38",
    }
    assert len(j["probes"]) == len(got.probes)


def test_rate_search_stops_at_the_relative_resolution():
    got = find_max(threshold(13.7), "rate", low=0.5, high=1000, resolution=0.02)
    assert got.value <= 13.7 < got.failed_at <= got.value * 1.02


def test_edges_low_fails_and_high_passes():
    none = find_max(threshold(0.5), "concurrency", low=1, high=64)
    assert none.value is None and none.failed_at == 1
    top = find_max(threshold(10_000), "concurrency", low=1, high=100)
    assert top.value == 100 and top.failed_at is None and top.failed_because is None
    assert [p.load for p in top.probes] == [1, 2, 4, 8, 16, 32, 64, 100]


def test_coarser_integer_resolution():
    got = find_max(threshold(37), "concurrency", low=4, high=1024, resolution=4)
    assert got.value <= 37 < got.failed_at and got.failed_at - got.value <= 4


def test_repeats_every_repetition_must_meet():
    # repetition 2 of loads above 20 fails: a load passes only when all 3 repetitions meet
    def flaky(load, rep):
        return Verdict(not (load > 20 and rep == 2) and load <= 40, f"rep {rep} failed at {load}")

    got = find_max(flaky, "concurrency", low=1, high=256, repeats=3)
    assert (got.value, got.failed_at, got.failed_because) == (20, 21, "rep 2 failed at 21")
    ok_probes = [p for p in got.probes if p.load == 20]
    assert [p.repetition for p in ok_probes] == [0, 1, 2] and all(p.met for p in ok_probes)


def test_bad_arguments_are_one_line_errors():
    for kwargs in (
        {"dimension": "qps", "low": 1, "high": 2},
        {"dimension": "concurrency", "low": 0, "high": 2},
        {"dimension": "concurrency", "low": 1.5, "high": 8},
        {"dimension": "rate", "low": 1, "high": 8, "resolution": 2},
        {"dimension": "rate", "low": 1, "high": float("inf")},
        {"dimension": "rate", "low": 1, "high": 2, "repeats": 0},
    ):
        with pytest.raises(KneecapError):
            find_max(threshold(3), **kwargs)


@settings(max_examples=200, deadline=None)
@given(limit=st.integers(1, 5000), low=st.integers(1, 64), high=st.integers(64, 8192))
def test_property_concurrency_answer_met_and_answer_plus_one_failed(limit, low, high):
    got = find_max(threshold(limit), "concurrency", low=low, high=high)
    met = {p.load: p.met for p in got.probes}
    if got.value is None:
        assert low > limit and got.failed_at == low
    elif got.failed_at is None:
        assert got.value == high <= limit
    else:
        assert met[got.value] and not met[got.failed_at] and got.failed_at == got.value + 1
        assert got.value == min(limit, high)


@settings(max_examples=200, deadline=None)
@given(limit=st.floats(0.1, 500), low=st.floats(0.05, 2), res=st.floats(0.01, 0.3))
def test_property_rate_answer_met_and_answer_times_one_plus_resolution_failed(limit, low, res):
    got = find_max(threshold(limit), "rate", low=low, high=4096, resolution=res)
    if got.value is None:
        assert low > limit
        return
    assert got.value <= limit < got.failed_at <= got.value * (1 + res) * (1 + 1e-12)


@settings(max_examples=100, deadline=None)
@given(seed=st.integers(0, 10_000), limit=st.integers(2, 300), noise=st.floats(0.0, 0.3), repeats=st.integers(1, 4))
def test_property_noisy_evaluator_answer_met_every_repetition(seed, limit, noise, repeats):
    rng = random.Random(seed)

    def noisy(load, rep):  # near the limit a level sometimes fails (a noisy p99)
        ok = load <= limit and not (load > limit * 0.8 and rng.random() < noise)
        return Verdict(ok, "noisy p99" if not ok else "")

    got = find_max(noisy, "concurrency", low=1, high=1024, repeats=repeats)
    if got.value is None:
        return
    runs = [p for p in got.probes if p.load == got.value]
    assert len(runs) == repeats and all(p.met for p in runs)  # the answer met in every repetition
    if got.failed_at is not None:
        assert got.failed_at == got.value + 1
        assert any(not p.met for p in got.probes if p.load == got.failed_at)
    assert got.value <= limit
