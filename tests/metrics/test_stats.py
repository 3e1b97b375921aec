"""Statistics against numpy: exact distribution, weighted (per-token) distribution, streaming summary."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.metrics.stats import (
    PERCENTILES,
    STAT_KEYS,
    StreamingDistribution,
    distribution,
    empty_distribution,
    weighted_distribution,
)

finite = st.floats(min_value=-1e6, max_value=1e6, allow_nan=False, allow_infinity=False)
positive = st.floats(min_value=1e-6, max_value=1e7, allow_nan=False, allow_infinity=False)


def numpy_reference(arr) -> dict:
    arr = np.asarray(arr, dtype=float)
    out = {"mean": float(np.mean(arr)), "max": float(np.max(arr)), "n": arr.size}
    for p in PERCENTILES:
        out[f"p{p}"] = float(np.percentile(arr, p))  # numpy's default method ('linear')
    return out


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
@pytest.mark.parametrize("size", [1, 2, 7, 100, 10_001])
def test_distribution_matches_numpy_on_seeded_samples(seed, size):
    rng = np.random.default_rng(seed)
    sample = rng.lognormal(mean=3.0, sigma=1.0, size=size)
    got = distribution(sample.tolist())
    assert set(got) == set(STAT_KEYS)
    assert got == numpy_reference(sample)


@given(st.lists(finite, min_size=1, max_size=200))
def test_distribution_matches_numpy_hypothesis(values):
    got = distribution(values)
    ref = numpy_reference(values)
    for key in STAT_KEYS:
        assert got[key] == pytest.approx(ref[key], rel=1e-12, abs=1e-9)


def test_distribution_known_values():
    # 1..10: linear percentile p90 = x[8.1] = 9 + 0.1 * (10 - 9) = 9.1
    got = distribution(range(1, 11))
    assert got == pytest.approx(
        {"mean": 5.5, "p50": 5.5, "p90": 9.1, "p95": 9.55, "p99": 9.91, "max": 10.0, "n": 10}, rel=1e-12
    )


def test_empty_distribution_is_none_not_zero():
    got = distribution([])
    assert got == {"mean": None, "p50": None, "p90": None, "p95": None, "p99": None, "max": None, "n": 0}
    assert empty_distribution() == got
    assert distribution(iter([])) == got  # a generator works too


def test_distribution_accepts_generators_and_returns_python_floats():
    got = distribution(x * 2.0 for x in (1, 2, 3))
    assert got["p50"] == 4.0 and type(got["p50"]) is float and type(got["n"]) is int


def test_distribution_rejects_nan():
    with pytest.raises(KneecapError, match="non-finite"):
        distribution([1.0, float("nan")])


@given(st.lists(st.tuples(finite, st.integers(min_value=0, max_value=6)), min_size=0, max_size=60))
def test_weighted_equals_repeated_samples(pairs):
    values = [v for v, _ in pairs]
    weights = [w for _, w in pairs]
    got = weighted_distribution(values, weights)
    repeated = np.repeat(np.asarray(values, dtype=float), np.asarray(weights, dtype=int))
    if repeated.size == 0:
        assert got == empty_distribution()
        return
    ref = numpy_reference(repeated)
    for key in STAT_KEYS:
        assert got[key] == pytest.approx(ref[key], rel=1e-12, abs=1e-9)


def test_weighted_rejects_bad_weights():
    with pytest.raises(KneecapError, match="weights"):
        weighted_distribution([1.0, 2.0], [1])
    with pytest.raises(KneecapError, match="negative"):
        weighted_distribution([1.0], [-1])


# --- streaming --------------------------------------------------------------------------------------


def assert_within_bound(sketch: StreamingDistribution, sample) -> None:
    ref = numpy_reference(sample)
    got = sketch.to_distribution()
    a = sketch.relative_accuracy
    assert got["n"] == ref["n"]
    assert got["max"] == ref["max"]
    assert got["mean"] == pytest.approx(ref["mean"], rel=1e-9, abs=1e-12)
    arr = np.sort(np.asarray(sample, dtype=float))
    for p in PERCENTILES:
        h = (arr.size - 1) * p / 100
        scale = max(abs(arr[math.floor(h)]), abs(arr[min(math.floor(h) + 1, arr.size - 1)]))
        bound = a * scale * (1 + 1e-9) + sketch.zero_threshold
        assert abs(got[f"p{p}"] - ref[f"p{p}"]) <= bound, (p, got[f"p{p}"], ref[f"p{p}"], bound)


@pytest.mark.parametrize("accuracy", [0.01, 0.001])
@pytest.mark.parametrize("seed", [0, 1])
def test_streaming_within_relative_error_of_exact(accuracy, seed):
    rng = np.random.default_rng(seed)
    sample = rng.lognormal(mean=2.0, sigma=1.5, size=50_000)
    sketch = StreamingDistribution(relative_accuracy=accuracy)
    sketch.add_many(sample)
    assert_within_bound(sketch, sample)


@given(st.lists(finite, min_size=1, max_size=300))
@settings(max_examples=200)
def test_streaming_bound_hypothesis_mixed_signs(values):
    sketch = StreamingDistribution(0.02)
    for v in values:
        sketch.add(v)
    assert_within_bound(sketch, values)


@given(st.lists(positive, min_size=1, max_size=200), st.lists(positive, min_size=0, max_size=200))
def test_streaming_merge_equals_one_stream(left, right):
    a, b, whole = StreamingDistribution(), StreamingDistribution(), StreamingDistribution()
    a.add_many(left)
    b.add_many(right)
    whole.add_many(left + right)
    a.merge(b)
    assert a.positive == whole.positive and a.count == whole.count
    assert a.to_distribution()["p99"] == whole.to_distribution()["p99"]
    assert_within_bound(a, left + right)


def test_streaming_add_and_add_many_agree():
    rng = np.random.default_rng(5)
    sample = np.concatenate([rng.normal(0, 50, 2000), [0.0, 0.0]])
    one, many = StreamingDistribution(), StreamingDistribution()
    for v in sample:
        one.add(float(v))
    many.add_many(sample)
    assert one.positive == many.positive and one.negative == many.negative and one.zero_count == many.zero_count


def test_streaming_memory_is_bounded_by_range_not_count():
    rng = np.random.default_rng(1)
    sketch = StreamingDistribution(0.01)
    for _ in range(20):
        sketch.add_many(rng.uniform(1.0, 1000.0, 10_000))
    # ln(1000) / ln(1.01/0.99) = 345.4 -> at most 347 buckets for 200,000 values
    assert sketch.count == 200_000
    assert len(sketch.positive) + len(sketch.negative) + (1 if sketch.zero_count else 0) <= 347


def test_streaming_roundtrip_through_dict_and_merge_across_processes():
    import json

    sketch = StreamingDistribution()
    sketch.add_many([1.0, 2.0, 3.0, -4.0, 0.0])
    copy = StreamingDistribution.from_dict(json.loads(json.dumps(sketch.to_dict())))
    assert copy.to_distribution() == sketch.to_distribution()


def test_streaming_empty_and_errors():
    sketch = StreamingDistribution()
    assert sketch.to_distribution() == empty_distribution()
    assert sketch.quantile(0.5) is None
    with pytest.raises(KneecapError, match="relative_accuracy"):
        StreamingDistribution(0.0)
    with pytest.raises(KneecapError, match="merge"):
        StreamingDistribution(0.01).merge(StreamingDistribution(0.02))
    with pytest.raises(KneecapError, match="non-finite"):
        sketch.add(float("inf"))
    with pytest.raises(KneecapError, match="malformed"):
        StreamingDistribution.from_dict({"relative_accuracy": 0.01})
    with pytest.raises(KneecapError, match="quantile"):
        sketch.quantile(1.5)
