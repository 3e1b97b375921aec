"""Reading results folders: strict about the kind, tolerant about optional files and keys."""

from __future__ import annotations

import json

import pytest

from kneecap.errors import KneecapError
from kneecap.report.levels import level_panels, parse_slo, preflight_limit, slo_spec, time_series
from kneecap.report.load import load_results


def test_kinds_are_detected(bench_dir, sim_dir, plan_file, run_dir):
    assert load_results(bench_dir).kind == "bench"
    assert load_results(sim_dir).kind == "simulate"
    assert load_results(plan_file).kind == "plan"
    assert load_results(run_dir).kind == "run"
    assert load_results(bench_dir / "summary.json").kind == "bench"


def test_records_are_digested_and_trace_is_read(bench_dir, sim_dir, run_dir, hostile):
    digest = load_results(bench_dir).records
    assert digest.num_records == 8 * 5 + 1
    # 8 levels x 5 ok requests x 20 chunks: chunks k % 3 == 0 (7 of 20) carry 2 tokens, the others 1
    assert digest.chunk_token_counts == {1: 8 * 5 * 13, 2: 8 * 5 * 7}
    assert digest.error_samples == {(7, "http_500"): (f"upstream said {hostile} & died",)}
    assert len(load_results(sim_dir).trace) == 400
    assert load_results(run_dir).records.num_records == 2 * 5 + 1  # records/*.jsonl


def test_error_samples_are_distinct_and_bounded():
    from kneecap.records import RequestRecord
    from kneecap.report.load import MAX_ERROR_SAMPLES, digest_records

    recs = [RequestRecord(request_id=str(i), level=0, status="error", error_kind="http_429",
                          error_message=f"slow down {i % 5}") for i in range(50)]
    recs.append(RequestRecord(request_id="w", level=0, warmup=True, chunk_tokens=[4, 4]))  # warmup: not counted
    digest = digest_records(recs)
    assert digest.error_samples[(0, "http_429")] == tuple(f"slow down {i}" for i in range(MAX_ERROR_SAMPLES))
    assert digest.chunk_token_counts == {} and digest.num_records == 51


def test_torn_last_record_line_is_skipped(bench_dir):
    with open(bench_dir / "requests.jsonl", "ab") as fh:
        fh.write(b'{"request_id": "torn", "lev')
    assert load_results(bench_dir).records.num_records == 41


@pytest.mark.parametrize("content,match", [
    ('{"kind": "banana", "levels": []}', "kind 'banana'"),
    ('{"levels": []}', "no 'kind' key"),
    ("[1, 2]", "JSON list"),
    ('{"kind": "bench", ', "not valid JSON"),
])
def test_bad_summaries_are_one_clear_error(tmp_path, content, match):
    (tmp_path / "summary.json").write_text(content)
    with pytest.raises(KneecapError, match=match) as info:
        load_results(tmp_path)
    assert info.value.hint


def test_missing_folder_and_empty_folder(tmp_path):
    with pytest.raises(KneecapError, match="does not exist"):
        load_results(tmp_path / "nope")
    with pytest.raises(KneecapError, match="neither summary.json nor plan.json"):
        load_results(tmp_path)


def test_manifest_named_by_the_summary_is_read_from_the_folder(bench_dir):
    summary = json.loads((bench_dir / "summary.json").read_text())
    manifest = summary.pop("manifest")
    summary["manifest"] = "manifest.json"
    (bench_dir / "summary.json").write_text(json.dumps(summary))
    (bench_dir / "manifest.json").write_text(json.dumps(manifest))
    assert load_results(bench_dir).summary["manifest"]["command"][1] == "bench"
    # a manifest path pointing outside the folder is ignored, not followed
    summary["manifest"] = "../elsewhere.json"
    (bench_dir / "summary.json").write_text(json.dumps(summary))
    results = load_results(bench_dir)
    assert results.summary["manifest"] is None and any("manifest" in m for m in results.missing)


def test_parse_slo_forms():
    assert parse_slo("ttft_p99_ms=500,itl_p99_ms=50,error_rate=0.01") == {"ttft_ms": {"p99": 500.0},
                                                                         "itl_ms": {"p99": 50.0}}
    assert parse_slo({"ttft_p50_ms": 100, "ttft_p99_ms": 400, "ttft_from_scheduled_p99_ms": 900}) == {
        "ttft_ms": {"p50": 100.0, "p99": 400.0}, "ttft_from_scheduled_ms": {"p99": 900.0}}
    assert parse_slo(None) == {} and parse_slo({"ttft_p99_ms": "x"}) == {}


def test_preflight_limit_from_summary_or_verdicts():
    assert preflight_limit({"preflight": {"max_safe_concurrency": 96}}, []) == 96
    levels = [{"concurrency": c, "preflight": v} for c, v in ((32, "fits"), (64, "fits"), (128, "exceeds"))]
    assert preflight_limit({}, levels) == 64
    assert preflight_limit({}, levels[:2]) is None  # every level fits: no limit reached, none drawn


def test_time_series_aliases():
    rows = [{"t": 0.0, "kv_blocks_used": 10, "kv_blocks_total": 100, "waiting": 3, "batch": {"prefill": 1, "decode": 4}},
            {"time_s": 1.0, "kv_usage": 55, "queue_depth": 0, "running": 7},
            {"no_time": 1}]
    series = time_series(rows)
    assert series["t"] == [0.0, 1.0]
    assert series["kv_usage"] == [pytest.approx(0.10), pytest.approx(0.55)]
    assert series["queue"] == [3.0, 0.0] and series["running"] == [5.0, 7.0]
    assert time_series([{"t": 1.0}]) is None


def test_level_panels_split_a_trace_whose_clock_restarts_per_level():
    levels = [{"concurrency": 1, "server_metrics": {"num_kv_blocks": 100}}, {"concurrency": 8}]
    rows = [{"level": 0, "t": 0.0, "kv_blocks_used": 10, "num_waiting": 0, "num_running": 1},
            {"level": 0, "t": 5.0, "kv_blocks_used": 20, "num_waiting": 0, "num_running": 1},
            {"level": 1, "t": 0.0, "kv_blocks_used": 50, "num_waiting": 4, "num_running": 8}]
    summary = {"plan": {"num_kv_blocks": 200}}
    panels = level_panels(rows, summary, levels)
    assert [p["label"] for p in panels] == ["C=1", "C=8"]
    assert panels[0]["kv_usage"] == [pytest.approx(0.10), pytest.approx(0.20)]  # the level's own pool
    assert panels[1]["kv_usage"] == [pytest.approx(0.25)]  # falls back to the plan's pool
    assert panels[1]["queue"] == [4.0]
    many = level_panels([{"level": i, "t": 0.0, "num_waiting": i} for i in range(20)], {}, [], max_panels=5)
    assert [p["label"] for p in many] == ["level 0", "level 5", "level 10", "level 14", "level 19"]


def test_preflight_limit_derived_from_a_simulate_summary():
    # 138,304 tokens of KV; 1000 + 200 tokens per request = 75 blocks of 16 = 1,200 tokens -> 115 requests
    summary = {"load": "concurrency", "plan": {"kv_capacity_tokens": 138304}, "workload": {"isl": 1000, "osl": 200},
               "deployment": {"block_size": 16}}
    assert preflight_limit(summary, []) == 115
    summary["workload"]["isl"] = None  # a length distribution, not a fixed length: no limit claimed
    assert preflight_limit(summary, []) is None


def test_slo_from_the_recorded_command_line():
    assert slo_spec({"manifest": {"command": ["kneecap", "simulate", "--slo", "ttft_p99_ms=2000"]}}) == "ttft_p99_ms=2000"
    assert slo_spec({"manifest": {"command": ["kneecap", "bench", "--slo=itl_p99_ms=50"]}}) == "itl_p99_ms=50"
    assert slo_spec({"slo": {"ttft_p99_ms": 1}, "manifest": {"command": ["--slo", "x"]}}) == {"ttft_p99_ms": 1}
    assert slo_spec({}) is None


def test_concurrency_max_is_plotted_at_its_request_count():
    from kneecap.report.levels import load_value

    assert load_value({"concurrency": "max", "requests": 512}, 3) == 512
    assert load_value({"concurrency": 8}, 0) == 8 and load_value({"rate": 2.5}, 0) == 2.5
    assert load_value({}, 4) == 5
