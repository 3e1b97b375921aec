"""summarize_level on hand-built records; every expected number computed by hand in the comments."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from kneecap.errors import KneecapError
from kneecap.metrics import request as req
from kneecap.metrics.stats import distribution, weighted_distribution
from kneecap.metrics.summarize import summarize_level
from kneecap.records import ERROR, TIMEOUT, RequestRecord

# keys every level summary carries, besides `concurrency` or `rate`
LEVEL_KEYS = (
    "requests",
    "completed",
    "failed",
    "duration_s",
    "output_tok_s",
    "input_tok_s",
    "total_tok_s",
    "request_s",
    "ttft_ms",
    "itl_ms",
    "tpot_ms",
    "e2e_ms",
    "errors",
)

STAT = ("mean", "p50", "p90", "p95", "p99", "max", "n")


def rec(rid, **kw) -> RequestRecord:
    kw.setdefault("level", 0)
    return RequestRecord(request_id=rid, **kw)


def level_records() -> list[RequestRecord]:
    return [
        # warmup: excluded from every statistic, counted in warmup_excluded
        rec(
            "w",
            warmup=True,
            sent_at=0.0,
            first_token_at=0.05,
            end_at=0.2,
            chunk_times=[0.05],
            chunk_tokens=[1],
            output_tokens=1,
        ),
        # A: TTFT 100 ms, E2E 500 ms, 5 tokens -> TPOT (1.5 - 1.1) / 4 = 100 ms
        #    chunk gaps 100 (1 tok), 100 (2 tok), 200 (1 tok) -> per-token 100, 50, 50, 200
        rec(
            "A",
            sent_at=1.0,
            first_token_at=1.1,
            end_at=1.5,
            chunk_times=[1.1, 1.2, 1.3, 1.5],
            chunk_tokens=[1, 1, 2, 1],
            expected_output_tokens=5,
            output_tokens=5,
            expected_input_tokens=100,
            prompt_tokens=100,
        ),
        # B (reasoning, no usage): TTFT 300, TTFT-answer 400, E2E 400, 4 tokens counted in chunks
        #    -> TPOT (1.6 - 1.5) / 3 = 33.33 ms; one gap 100 ms carrying 1 token
        rec(
            "B",
            sent_at=1.2,
            first_token_at=1.5,
            first_answer_at=1.6,
            end_at=1.6,
            chunk_times=[1.5, 1.6],
            chunk_tokens=[3, 1],
            expected_output_tokens=4,
            output_tokens=None,
            expected_input_tokens=100,
            prompt_tokens=100,
        ),
        # C: HTTP 500
        rec("C", sent_at=1.3, end_at=1.35, status=ERROR, error_kind="http_500"),
        # D: timed out mid-stream: its first token must not enter TTFT
        rec(
            "D",
            sent_at=1.4,
            first_token_at=1.45,
            end_at=3.0,
            chunk_times=[1.45],
            chunk_tokens=[1],
            status=TIMEOUT,
            error_kind="timeout",
        ),
        # E: server returned 2 of 3 tokens and 90 of 100 prompt tokens: TTFT 200, E2E 400, TPOT 200
        rec(
            "E",
            sent_at=2.0,
            first_token_at=2.2,
            end_at=2.4,
            chunk_times=[2.2, 2.4],
            chunk_tokens=[1, 1],
            expected_output_tokens=3,
            output_tokens=2,
            expected_input_tokens=100,
            prompt_tokens=90,
        ),
    ]


@pytest.fixture(scope="module")
def level():
    return summarize_level(level_records(), concurrency=4, slo="ttft_p99_ms=250,e2e_p99_ms=450")


@pytest.mark.parametrize(
    "path, expected",
    [
        (("concurrency",), 4),
        (("level",), 0),
        (("requests",), 5),  # A B C D E
        (("completed",), 3),  # A B E
        (("failed",), 2),  # C D
        (("timeouts",), 1),  # D
        (("warmup_excluded",), 1),
        (("duration_s",), 2.0),  # last end_at 3.0 (D) - first sent_at 1.0 (A)
        (("output_tokens",), 11),  # 5 + 4 (B: chunk count) + 2
        (("input_tokens",), 290),  # 100 + 100 + 90
        (("output_tok_s",), 5.5),  # 11 / 2.0
        (("input_tok_s",), 145.0),  # 290 / 2.0
        (("total_tok_s",), 150.5),
        (("request_s",), 1.5),  # 3 completed / 2.0 s
        (("ttft_ms", "mean"), 200.0),  # [100, 300, 200]
        (("ttft_ms", "p50"), 200.0),
        (("ttft_ms", "p90"), 280.0),  # sorted 100,200,300; h = 1.8 -> 200 + 0.8 * 100
        (("ttft_ms", "p95"), 290.0),
        (("ttft_ms", "p99"), 298.0),
        (("ttft_ms", "max"), 300.0),
        (("ttft_ms", "n"), 3),
        (("ttft_answer_ms", "mean"), 400.0),  # only B reported a separate answer token
        (("ttft_answer_ms", "n"), 1),
        (("e2e_ms", "mean"), 1300.0 / 3),  # [500, 400, 400]
        (("e2e_ms", "p50"), 400.0),
        (("e2e_ms", "p90"), 480.0),  # 400 + 0.8 * 100
        (("e2e_ms", "max"), 500.0),
        (("tpot_ms", "mean"), (100.0 + 100.0 / 3 + 200.0) / 3),
        (("tpot_ms", "p50"), 100.0),
        (("tpot_ms", "n"), 3),
        (("itl_ms", "n"), 6),  # per token after the first chunk: A 4, B 1, E 1
        (("itl_ms", "mean"), 700.0 / 6),  # [100, 50, 50, 200, 100, 200]
        (("itl_ms", "p50"), 100.0),  # sorted 50,50,100,100,200,200; h = 2.5
        (("itl_ms", "p90"), 200.0),
        (("itl_ms", "max"), 200.0),
        (("chunk_gap_ms", "n"), 5),  # A 3 gaps, B 1, E 1
        (("chunk_gap_ms", "mean"), 140.0),  # [100, 100, 200, 100, 200]
        (("chunk_gap_ms", "p50"), 100.0),
        (("chunk_gap_ms", "p90"), 200.0),  # sorted 100,100,100,200,200; h = 3.6
        (("tokens_per_chunk", "n"), 8),  # A 1,1,2,1  B 3,1  E 1,1
        (("tokens_per_chunk", "mean"), 11 / 8),
        (("tokens_per_chunk", "max"), 3.0),
        (("errors",), {"http_500": 1, "timeout": 1}),
        (("token_mismatch", "requests"), 1),  # E
        (("token_mismatch", "output"), 1),
        (("token_mismatch", "prompt"), 1),
        (("token_mismatch", "output_unreported"), 1),  # B
        (("token_mismatch", "output_vs_chunks"), 0),
        (("goodput", "requests"), 1),  # A: e2e 500 > 450; B: ttft 300 > 250; E good
        (("goodput", "fraction"), 0.2),  # 1 good of 5 requests
        (("goodput", "request_s"), 0.5),
        (("goodput", "output_tok_s"), 1.0),  # E's 2 tokens / 2.0 s
        (("slo", "met"), False),  # ttft p99 298 > 250, e2e p99 498 > 450
    ],
)
def test_level_numbers(level, path, expected):
    value = level
    for key in path:
        value = value[key]
    assert value == pytest.approx(expected, rel=1e-9)


def test_design_keys_and_distribution_shapes(level):
    assert set(LEVEL_KEYS) <= set(level)
    for key in ("ttft_ms", "itl_ms", "tpot_ms", "e2e_ms", "ttft_answer_ms", "chunk_gap_ms", "tokens_per_chunk"):
        assert tuple(level[key]) == STAT
    assert "ttft_from_scheduled_ms" not in level  # closed loop
    assert [b["key"] for b in level["slo"]["breaches"]] == ["ttft_p99_ms", "e2e_p99_ms"]
    assert level["token_mismatch"]["examples"] == [
        {
            "request_id": "E",
            "expected_input_tokens": 100,
            "prompt_tokens": 90,
            "expected_output_tokens": 3,
            "output_tokens": 2,
        }
    ]


def test_multi_token_first_chunk_adds_no_itl_sample_and_empty_chunks_fold():
    # chunks: t=0.0 carries 2, t=0.1 carries 0 (usage-only), t=0.3 carries 3, t=0.4 carries 1
    r = rec(
        "x",
        sent_at=0.0,
        first_token_at=0.0,
        end_at=0.4,
        chunk_times=[0.0, 0.1, 0.3, 0.4],
        chunk_tokens=[2, 0, 3, 1],
        output_tokens=6,
    )
    s = summarize_level([r])
    # per token: 300 ms / 3 tokens -> 3 samples of 100 ms; then 100 ms / 1 -> one sample of 100 ms
    assert s["itl_ms"]["n"] == 4
    assert s["itl_ms"]["mean"] == pytest.approx(100.0)
    # per chunk: 300 and 100 ms (the empty chunk is not a gap boundary)
    assert s["chunk_gap_ms"]["n"] == 2
    assert s["chunk_gap_ms"]["max"] == pytest.approx(300.0)
    assert s["tokens_per_chunk"]["n"] == 3  # 2, 3, 1
    # TPOT = (0.4 - 0.0) / 5 = 80 ms: differs from the ITL mean when the first chunk has > 1 token
    assert s["tpot_ms"]["mean"] == pytest.approx(80.0)


def test_one_token_output_has_no_tpot_or_itl():
    r = rec("x", sent_at=0.0, first_token_at=0.2, end_at=0.2, chunk_times=[0.2], chunk_tokens=[1], output_tokens=1)
    s = summarize_level([r])
    assert s["tpot_ms"]["n"] == 0 and s["tpot_ms"]["mean"] is None
    assert s["itl_ms"]["n"] == 0 and s["itl_ms"]["p99"] is None
    assert s["ttft_ms"]["mean"] == pytest.approx(200.0)


def test_open_loop_reports_latency_from_scheduled_time():
    # scheduled 0.0 but sent late at 0.5 (a stalled client): from-scheduled shows the wait
    r1 = rec(
        "a",
        rate=2.0,
        scheduled_at=0.0,
        sent_at=0.5,
        first_token_at=0.6,
        end_at=1.0,
        chunk_times=[0.6, 1.0],
        chunk_tokens=[1, 1],
        output_tokens=2,
    )
    r2 = rec(
        "b",
        rate=2.0,
        scheduled_at=0.5,
        sent_at=0.5,
        first_token_at=0.7,
        end_at=0.9,
        chunk_times=[0.7, 0.9],
        chunk_tokens=[1, 1],
        output_tokens=2,
    )
    s = summarize_level([r1, r2], slo={"ttft_p99_ms": 300})
    assert s["rate"] == 2.0 and "concurrency" not in s  # inferred from the records
    assert s["ttft_ms"]["max"] == pytest.approx(200.0)  # 0.7 - 0.5
    assert s["ttft_from_scheduled_ms"]["max"] == pytest.approx(600.0)  # 0.6 - 0.0
    assert s["e2e_from_scheduled_ms"]["max"] == pytest.approx(1000.0)
    assert s["schedule_lag_ms"]["max"] == pytest.approx(500.0)
    # goodput in open loop judges TTFT from the scheduled time: a 600 ms wait is not good
    assert s["goodput"]["requests"] == 1


def test_empty_level_gives_none_not_zero():
    s = summarize_level([], concurrency=8)
    assert s["requests"] == 0 and s["completed"] == 0 and s["failed"] == 0
    assert s["duration_s"] is None and s["output_tok_s"] is None and s["request_s"] is None
    assert s["ttft_ms"]["p99"] is None and s["ttft_ms"]["n"] == 0
    assert s["goodput"] is None and s["errors"] == {}


def test_all_failed_level_counts_every_failure():
    records = [rec(str(i), sent_at=0.0, end_at=0.1, status=ERROR, error_kind="connection") for i in range(3)]
    s = summarize_level(records, concurrency=3, slo="ttft_p99_ms=100")
    assert s["failed"] == 3 and s["errors"] == {"connection": 3}
    assert s["output_tok_s"] == 0.0  # completed requests only: none
    assert s["goodput"]["fraction"] == 0.0
    assert s["slo"]["met"] is False and s["slo"]["breaches"][0]["value"] is None


def test_only_warmup_records():
    s = summarize_level([rec("w", warmup=True, sent_at=0.0, end_at=1.0)], concurrency=1)
    assert s["requests"] == 0 and s["warmup_excluded"] == 1 and s["duration_s"] is None


def test_explicit_duration_overrides_and_is_validated():
    r = rec("a", sent_at=0.0, first_token_at=0.1, end_at=0.5, chunk_times=[0.1], chunk_tokens=[1], output_tokens=10)
    assert summarize_level([r], duration_s=4.0)["output_tok_s"] == pytest.approx(2.5)
    with pytest.raises(KneecapError, match="duration"):
        summarize_level([r], duration_s=0)


def test_error_kind_falls_back_to_status():
    s = summarize_level([rec("a", sent_at=0.0, status="cancelled")])
    assert s["errors"] == {"cancelled": 1}


chunk = st.tuples(st.floats(min_value=0.0, max_value=0.5, allow_nan=False), st.integers(min_value=0, max_value=4))


@given(st.lists(st.lists(chunk, max_size=12), min_size=1, max_size=6), st.integers(min_value=0, max_value=2))
@settings(max_examples=150)
def test_vectorised_itl_equals_per_request_chunk_gaps(requests, extra_tokens):
    """The pooled (numpy) ITL over a level equals the per-request definition in metrics/request.py."""
    records = []
    for i, chunks in enumerate(requests):
        times, t = [], 0.0
        for dt, _ in chunks:
            t += dt
            times.append(t)
        tokens = [k for _, k in chunks] + [1] * extra_tokens  # a length mismatch uses the common prefix
        records.append(rec(str(i), sent_at=0.0, first_token_at=0.0, end_at=t, chunk_times=times, chunk_tokens=tokens))
    s = summarize_level(records)
    values, weights, chunk_gaps_ms, sizes = [], [], [], []
    for r in records:
        gaps, tokens = req.chunk_gaps(r)
        values += [g * 1000 / k for g, k in zip(gaps, tokens)]
        weights += tokens
        chunk_gaps_ms += [g * 1000 for g in gaps]
        sizes += [int(k) for k in r.chunk_tokens[: len(r.chunk_times)] if k > 0]  # every token-bearing chunk
    for key, ref in (
        ("itl_ms", weighted_distribution(values, weights)),
        ("chunk_gap_ms", distribution(chunk_gaps_ms)),
        ("tokens_per_chunk", distribution(sizes)),
    ):
        assert s[key]["n"] == ref["n"]
        for stat in STAT:
            if ref["n"]:
                assert s[key][stat] == pytest.approx(ref[stat], rel=1e-9, abs=1e-9), (key, stat)
            else:
                assert s[key][stat] == ref[stat], (key, stat)  # no samples: n 0, every statistic None
