"""Simulated records carry runs of engine steps, not one float per token, and every summary of them is the
same as the per-token one: summarize_level, the streaming LevelAccumulator, the stable-p99 rule, and
`kneecap simulate` with and without --token-times (summary.json byte for byte)."""

from __future__ import annotations

import json

import pytest
from simkit import deployment, sim_of, tiny_model

from kneecap.metrics.accumulate import LevelAccumulator
from kneecap.metrics.summarize import summarize_level
from kneecap.records import dumps_record, read_records
from kneecap.sim.config import EngineConfig
from kneecap.sim.sweep import LevelSpec, simulate_level
from kneecap.workload import LengthDist, RequestClass, Workload
from kneecap.workload.slices import p99_stable

WL = Workload(
    classes=(
        RequestClass(
            input=LengthDist(kind="uniform", low=50, high=600), output=LengthDist(kind="uniform", low=5, high=300)
        ),
    )
)


def _pair(num_blocks: int, level: LevelSpec):
    d = deployment(model=tiny_model(), block_size=16)
    cfg = EngineConfig(max_num_seqs=32, max_num_batched_tokens=1024)
    runs = simulate_level(sim_of(d, cfg, num_blocks), WL, level, seed=3)
    per_token = simulate_level(sim_of(d, cfg, num_blocks), WL, level, seed=3, token_times=True)
    return runs, per_token


@pytest.mark.parametrize("num_blocks", [20000, 500])  # plenty, and tight enough to preempt (gaps between runs)
@pytest.mark.parametrize("level", [LevelSpec(concurrency=24, num_requests=150), LevelSpec(rate=40.0, num_requests=150)])
def test_runs_path_equals_per_token_path(num_blocks, level):
    runs, per_token = _pair(num_blocks, level)
    if num_blocks == 500:
        assert runs.server_metrics["preemptions"] > 0
    for r, t in zip(runs.records, per_token.records):
        assert r.request_id == t.request_id
        assert r.chunk_times == [] and r.step_runs is not None  # no float per token
        assert r.token_times() == t.chunk_times  # the same times, exactly
        assert r.token_runs == t.token_runs
        assert sum(n for _, n, _ in r.token_runs) == r.output_tokens
    a, b = summarize_level(runs.records), summarize_level(per_token.records)
    assert a == b  # every statistic equal, the means included (not approximately)
    assert a["itl_ms"]["n"] == sum(r.output_tokens - 1 for r in runs.records if r.ok)
    acc_a, acc_b = LevelAccumulator(), LevelAccumulator()
    acc_a.add_many(runs.records)
    acc_b.add_many(per_token.records)
    sa, sb = acc_a.summary(), acc_b.summary()
    for key in ("itl_ms", "chunk_gap_ms", "tokens_per_chunk"):
        assert {k: v for k, v in sa[key].items() if k != "mean"} == {k: v for k, v in sb[key].items() if k != "mean"}
        assert sa[key]["mean"] == pytest.approx(sb[key]["mean"], rel=1e-12)
    window = runs.end_s / 8
    assert p99_stable(runs.records, window, min_samples=5) == p99_stable(per_token.records, window, min_samples=5)


def test_record_lines_are_small_and_read_back(tmp_path):
    runs, per_token = _pair(20000, LevelSpec(concurrency=8, num_requests=40))
    small = b"".join(dumps_record(r) for r in runs.records)
    large = b"".join(dumps_record(r) for r in per_token.records)
    assert len(small) * 3 < len(large)
    path = tmp_path / "requests.jsonl"
    path.write_bytes(small)
    back = read_records(path)
    assert [r.token_runs for r in back] == [r.token_runs for r in runs.records]
    # read back without per-token times: each run is its first token and one chunk of the rest (its mean gap)
    s = summarize_level(back)
    assert s["itl_ms"]["n"] == summarize_level(runs.records)["itl_ms"]["n"]
    assert s["ttft_ms"] == summarize_level(runs.records)["ttft_ms"]


def test_cli_token_times_flag(tmp_path):
    from clitools import run_cli

    base = [
        "simulate",
        "--preset",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--isl",
        "300",
        "--osl",
        "60",
        "--concurrency",
        "4,16",
        "--requests",
        "40",
        "--no-report",
        "--quiet",
    ]
    a = run_cli(*base, "--out", str(tmp_path / "a"))
    b = run_cli(*base, "--token-times", "--out", str(tmp_path / "b"))
    assert a.code == b.code == 0, a.stderr + b.stderr
    assert (tmp_path / "a" / "summary.json").read_bytes() == (tmp_path / "b" / "summary.json").read_bytes()
    rows_a = [json.loads(line) for line in (tmp_path / "a" / "requests.jsonl").read_text().splitlines()]
    rows_b = [json.loads(line) for line in (tmp_path / "b" / "requests.jsonl").read_text().splitlines()]
    assert len(rows_a) == len(rows_b) == 80
    for ra, rb in zip(rows_a, rows_b):
        assert ra["chunk_times"] == [] and ra["token_runs"] == rb["token_runs"]
        assert len(rb["chunk_times"]) == rb["output_tokens"] == 60
        assert rb["chunk_times"][0] == ra["token_runs"][0][0] and rb["chunk_times"][-1] == ra["token_runs"][-1][2]
