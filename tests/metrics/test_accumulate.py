"""LevelAccumulator (bounded, mergeable) agrees with summarize_level (exact) and merges exactly."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.metrics.accumulate import LevelAccumulator
from kneecap.metrics.summarize import summarize_level
from kneecap.records import RequestRecord

DISTS = (
    "ttft_ms",
    "ttft_answer_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
    "chunk_gap_ms",
    "tokens_per_chunk",
    "schedule_lag_ms",
    "ttft_from_scheduled_ms",
    "e2e_from_scheduled_ms",
)
EXACT = (
    "requests",
    "completed",
    "failed",
    "timeouts",
    "warmup_excluded",
    "duration_s",
    "output_tokens",
    "input_tokens",
    "output_tok_s",
    "input_tok_s",
    "total_tok_s",
    "request_s",
    "errors",
    "token_mismatch",
    "goodput",
    "concurrency",
    "rate",
    "level",
)


def make_records(seed: int, n: int, rate: float | None = None) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    out = []
    for i in range(n):
        sched = float(i) * 0.05
        sent = sched + float(rng.uniform(0, 0.01))
        ttft = float(rng.lognormal(-2, 0.5))
        k = rng.integers(1, 4, size=int(rng.integers(1, 40))).tolist()
        times = (sent + ttft + np.cumsum(np.r_[0.0, rng.exponential(0.02, len(k) - 1)])).tolist()
        status = "ok" if rng.random() > 0.1 else "error"
        out.append(
            RequestRecord(
                request_id=str(i),
                level=3,
                concurrency=None if rate else 16,
                rate=rate,
                warmup=i < 3,
                scheduled_at=sched,
                sent_at=sent,
                first_token_at=times[0],
                first_answer_at=times[0] + 0.001,
                end_at=times[-1] + 0.001,
                chunk_times=times,
                chunk_tokens=k,
                expected_output_tokens=sum(k),
                output_tokens=sum(k) if i % 7 else sum(k) - 1,
                prompt_tokens=100,
                expected_input_tokens=100,
                status=status,
                error_kind=None if status == "ok" else "http_500",
            )
        )
    return out


def assert_agree(streamed: dict, exact: dict, bound: float) -> None:
    assert set(streamed) == set(exact)
    for key in EXACT:
        if key in exact:
            if isinstance(exact[key], float):
                assert streamed[key] == pytest.approx(exact[key], rel=1e-9), key
            else:
                assert streamed[key] == exact[key], key
    for key in DISTS:
        if key not in exact:
            continue
        s, e = streamed[key], exact[key]
        assert s["n"] == e["n"] and s["max"] == e["max"], key
        if e["n"]:
            assert s["mean"] == pytest.approx(e["mean"], rel=1e-9), key
            for p in ("p50", "p90", "p95", "p99"):
                assert abs(s[p] - e[p]) <= bound * abs(e[p]) * (1 + 1e-9) + 1e-9, (key, p, s[p], e[p])


@pytest.mark.parametrize("rate", [None, 20.0])
def test_accumulator_matches_exact_summary_within_bound(rate):
    records = make_records(0, 400, rate)
    slo = "ttft_p99_ms=200,tpot_p99_ms=30"
    acc = LevelAccumulator(slo=slo)
    acc.add_many(records)
    exact = summarize_level(records, slo=slo)
    streamed = acc.summary()
    assert streamed["percentile_relative_error"] == 0.01 and exact["percentile_relative_error"] == 0.0
    streamed.pop("percentile_relative_error"), exact.pop("percentile_relative_error")
    assert_agree(streamed, exact, 0.01)
    assert streamed["slo"]["met"] == exact["slo"]["met"]


def test_accumulator_over_several_batches_matches_exact_summary():
    """Records go into the distributions a batch at a time (one vectorised pass per batch): a level of
    several batches, summarised midway and again at its end, agrees with the exact summary each time."""
    from kneecap.metrics.accumulate import _BATCH_RECORDS

    records = make_records(1, 2 * _BATCH_RECORDS + 300)
    slo = "ttft_p99_ms=200,tpot_p99_ms=30"
    acc = LevelAccumulator(slo=slo)
    half = len(records) // 2
    acc.add_many(records[:half])
    midway = acc.summary()
    assert midway["requests"] == half - 3 and midway["itl_ms"]["n"] == summarize_level(records[:half])["itl_ms"]["n"]
    acc.add_many(records[half:])
    streamed, again, exact = acc.summary(), acc.summary(), summarize_level(records, slo=slo)
    assert streamed == again
    streamed.pop("percentile_relative_error"), exact.pop("percentile_relative_error")
    assert_agree(streamed, exact, 0.01)


@given(
    st.integers(min_value=0, max_value=10_000),
    st.integers(min_value=1, max_value=60),
    st.integers(min_value=0, max_value=60),
)
@settings(max_examples=30, deadline=None)
def test_merging_workers_equals_one_accumulator(seed, n, cut):
    records = make_records(seed, n)
    cut = min(cut, n)
    whole, left, right = (
        LevelAccumulator(slo="e2e_p99_ms=300"),
        LevelAccumulator(slo="e2e_p99_ms=300"),
        LevelAccumulator(slo="e2e_p99_ms=300"),
    )
    whole.add_many(records)
    left.add_many(records[:cut])
    right.add_many(records[cut:])
    # ship one worker's state through JSON, as a worker process would
    merged = LevelAccumulator.from_dict(json.loads(json.dumps(left.to_dict()))).merge(right)
    a, b = merged.summary(), whole.summary()
    for key in DISTS:
        if key in b:
            for stat in ("p50", "p99", "max", "n"):
                assert a[key][stat] == b[key][stat], (key, stat)
            if b[key]["n"]:
                assert a[key]["mean"] == pytest.approx(b[key]["mean"], rel=1e-9)
    for key in ("requests", "completed", "failed", "errors", "goodput", "duration_s", "output_tok_s"):
        assert a[key] == b[key], key


def test_accumulator_empty_and_explicit_duration():
    acc = LevelAccumulator(concurrency=4)
    s = acc.summary()
    assert s["requests"] == 0 and s["ttft_ms"]["p99"] is None and s["output_tok_s"] is None
    assert s["concurrency"] == 4 and s["goodput"] is None
    with pytest.raises(KneecapError, match="duration"):
        acc.summary(duration_s=-1)


def test_accumulator_merge_rejects_different_slo_and_bad_state():
    with pytest.raises(KneecapError, match="different SLOs"):
        LevelAccumulator(slo="ttft_p99_ms=1").merge(LevelAccumulator())
    with pytest.raises(KneecapError, match="malformed"):
        LevelAccumulator.from_dict({"concurrency": 1})


def test_summarize_stream_is_exact_below_the_limit_and_bounded_above(tmp_path):
    """Bench summarises a level from its records read back one at a time: exactly up to the limit,
    through the bounded accumulator beyond it (percentiles within the accumulator's stated error)."""
    from kneecap.metrics.accumulate import summarize_stream
    from kneecap.metrics.summarize import summarize_level
    from kneecap.records import RequestRecord

    recs = [
        RequestRecord(
            request_id=str(i),
            level=0,
            concurrency=8,
            sent_at=i * 0.01,
            first_token_at=i * 0.01 + 0.05 + (i % 7) * 0.01,
            end_at=i * 0.01 + 0.5,
            chunk_times=[i * 0.01 + 0.05 + k * 0.02 for k in range(10)],
            chunk_tokens=[1] * 10,
            output_tokens=10,
            prompt_tokens=20,
        )
        for i in range(300)
    ]
    exact = summarize_level(recs, concurrency=8)
    assert summarize_stream(iter(recs), concurrency=8, exact_limit=1000) == exact
    streamed = summarize_stream(iter(recs), concurrency=8, exact_limit=50)
    assert streamed["completed"] == exact["completed"] and streamed["output_tok_s"] == pytest.approx(
        exact["output_tok_s"]
    )
    for key in ("ttft_ms", "e2e_ms", "itl_ms"):
        for q in ("p50", "p99"):
            assert streamed[key][q] == pytest.approx(exact[key][q], rel=0.02), (key, q)
    assert streamed["percentile_relative_error"] > 0
