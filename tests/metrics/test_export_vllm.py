"""kneecap.metrics.export_vllm: a level in `vllm bench serve --save-result` shape (vLLM 0.18.0)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.metrics.export_vllm import to_vllm_result
from kneecap.metrics.summarize import summarize_level
from kneecap.records import RequestRecord

REAL = Path(__file__).parents[1] / "workload" / "data" / "vllm_0.18.0_save_result.json"


def ok(i, sent, chunks, prompt, rate=None, concurrency=None):
    return RequestRecord(
        request_id=f"r{i}",
        level=0,
        rate=rate,
        concurrency=concurrency,
        sent_at=sent,
        first_token_at=chunks[0],
        end_at=chunks[-1],
        chunk_times=list(chunks),
        chunk_tokens=[1] * len(chunks),
        prompt_tokens=prompt,
        output_tokens=len(chunks),
    )


def level(rate=None, concurrency=None):
    records = [
        ok(0, 0.0, [0.1, 0.2, 0.3], 10, rate, concurrency),
        ok(1, 0.5, [0.7, 0.9], 20, rate, concurrency),
        RequestRecord(
            request_id="r2",
            level=0,
            rate=rate,
            concurrency=concurrency,
            sent_at=1.0,
            end_at=1.2,
            expected_input_tokens=30,
            status="error",
            error_kind="http_500",
            error_message="HTTP 500",
        ),
        ok(3, -5.0, [-4.9, -4.8], 99, rate, concurrency),
    ]
    records[3].warmup = True
    summary = summarize_level(records, rate=rate, concurrency=concurrency, duration_s=2.0)
    return summary, records


def test_keys_order_and_types_match_a_real_vllm_0_18_result_file():
    real = json.loads(REAL.read_text())
    summary, records = level(rate=1.0)
    got = to_vllm_result(summary, records, model_id="./Qwen2.5-VL-3B-Instruct", date="20260722-060114")
    assert list(got) == list(real)
    for key, value in real.items():
        assert type(got[key]) is type(value) or (value is None and got[key] is None), key
    json.dumps(got)  # serialisable as is


def test_numbers_by_hand():
    summary, records = level(rate=1.0)
    got = to_vllm_result(summary, records, model_id="m", date="20261201-090000")
    assert (got["completed"], got["failed"], got["num_prompts"]) == (2, 1, 3)  # the warmup request is left out
    assert (got["total_input_tokens"], got["total_output_tokens"]) == (30, 5)
    assert got["duration"] == 2.0 and got["request_throughput"] == 1.0
    assert got["output_throughput"] == 2.5 and got["total_token_throughput"] == 17.5
    assert got["request_rate"] == 1.0 and got["max_concurrency"] is None
    # TTFT 100 and 200 ms; np.std is the population std; p99 by linear interpolation
    assert (got["mean_ttft_ms"], got["median_ttft_ms"], got["std_ttft_ms"]) == pytest.approx((150, 150, 50))
    assert got["p99_ttft_ms"] == pytest.approx(199)
    # TPOT: (300 - 100) / 2 = 100 ms and (400 - 200) / 1 = 200 ms
    assert got["mean_tpot_ms"] == pytest.approx(150)
    # ITL: chunk gaps 100, 100 (r0) and 200 (r1) ms, pooled
    assert got["mean_itl_ms"] == pytest.approx(400 / 3) and got["median_itl_ms"] == pytest.approx(100)
    assert got["std_itl_ms"] == pytest.approx(math.sqrt(((100 - 400 / 3) ** 2 * 2 + (200 - 400 / 3) ** 2) / 3))
    assert got["max_concurrent_requests"] == 1  # [0, 0.3) and [0.5, 0.9) never overlap
    assert got["max_output_tokens_per_s"] == 5.0  # all five tokens in the first second
    assert got["request_goodput"] is None and got["rtfx"] == 0.0


def test_closed_loop_and_goodput():
    summary, records = level(concurrency=4)
    summary = dict(summary, goodput={"requests": 1, "request_s": 0.5})
    got = to_vllm_result(summary, records, model_id="org/model", date="d")
    assert got["request_rate"] == "inf" and got["max_concurrency"] == 4 and got["request_goodput"] == 0.5
    assert got["label"] is None and got["tokenizer_id"] == "org/model"


def test_bad_export_arguments():
    summary, records = level(rate=1.0)
    with pytest.raises(KneecapError):
        to_vllm_result(dict(summary, duration_s=None), records, model_id="m", date="d")
