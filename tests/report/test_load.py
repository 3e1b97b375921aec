"""Reading results folders: strict about the kind, tolerant about optional files and keys."""

from __future__ import annotations

import json

import pytest

from kneecap.errors import KneecapError
from kneecap.metrics.summary_model import LevelSummary, SweepSummary
from kneecap.report.levels import level_panels, parse_slo, preflight_limit, slo_spec, time_series
from kneecap.report.load import load_results


def test_kinds_are_detected(bench_dir, sim_dir, plan_file, run_dir):
    assert load_results(bench_dir).kind == "bench"
    assert load_results(sim_dir).kind == "simulate"
    assert load_results(plan_file).kind == "plan"
    assert load_results(run_dir).kind == "run"
    assert load_results(bench_dir / "summary.json").kind == "bench"


def test_records_are_digested_and_trace_is_read(bench_dir, refused_bench, sim_dir, run_dir):
    summary = json.loads((bench_dir / "summary.json").read_text())
    digest = load_results(bench_dir).records
    assert digest.num_records == 3 * 16  # three levels of --requests 16, no warmup
    completed = sum(lv["completed"] for lv in summary["levels"])
    assert completed == 3 * 16 and digest.error_samples == {}
    # every answered request streamed its 32 output tokens (--osl 32 with --ignore-eos), however they were chunked
    assert sum(k * n for k, n in digest.chunk_token_counts.items()) == completed * 32
    # 600-token prompts against a 512-token context: every request refused, the server's one message kept
    refused = load_results(refused_bench).records
    assert refused.num_records == 4 and refused.chunk_token_counts == {}
    ((key, messages),) = refused.error_samples.items()
    assert key == (0, "http_400")
    (message,) = messages
    assert message.startswith("HTTP 400: ") and "maximum context length is 512 tokens" in message
    assert "you requested 632 tokens (600 in the messages, 32 in the completion)" in message
    sim = load_results(sim_dir)
    steps = sum(lv["server_metrics"]["num_steps"] for lv in sim.summary["levels"])
    assert len(sim.trace) == steps  # one trace line per engine step
    assert sim.records.chunk_token_counts == {1: 2 * 16 * 32}  # the simulated engine streams a token per chunk
    run = load_results(run_dir)
    cell_files = [p for p in (run_dir / "records").glob("cell-*.jsonl") if p.name.count(".") == 1]
    assert cell_files and run.records.num_records == sum(sum(1 for _ in open(p)) for p in cell_files)
    measured = sum(c["metrics"]["completed"] for c in run.summary["cells"])
    assert run.records.chunk_token_counts == {1: measured * 64}  # fixed 64-token outputs, one token per chunk


def test_run_report_reads_only_the_cells_records(run_dir):
    """A run folder's records/ also holds each simulated cell's engine trace and any attempt set aside on
    resume: the report digests the cells' records files, and nothing else there, even a record-shaped line."""
    from kneecap.results import cell_records_files

    before = load_results(run_dir).records.num_records
    traces = sorted((run_dir / "records").glob("cell-*.trace.jsonl"))
    assert traces, "the run's simulated cells wrote no engine trace"
    record = (run_dir / "records" / "cell-0000.jsonl").read_text().splitlines()[0] + "\n"
    with open(traces[0], "a") as fh:
        fh.write(record)
    (run_dir / "records" / "cell-0000.discarded.jsonl").write_text(record * 3)
    assert [p.name for p in cell_records_files(run_dir)] == sorted(
        p.name for p in (run_dir / "records").iterdir() if p.name.count(".") == 1
    )
    assert load_results(run_dir).records.num_records == before


def test_error_samples_are_distinct_and_bounded():
    from kneecap.records import RequestRecord
    from kneecap.report.load import MAX_ERROR_SAMPLES, digest_records

    recs = [
        RequestRecord(
            request_id=str(i), level=0, status="error", error_kind="http_429", error_message=f"slow down {i % 5}"
        )
        for i in range(50)
    ]
    recs.append(RequestRecord(request_id="w", level=0, warmup=True, chunk_tokens=[4, 4]))  # warmup: not counted
    digest = digest_records(recs)
    assert digest.error_samples[(0, "http_429")] == tuple(f"slow down {i}" for i in range(MAX_ERROR_SAMPLES))
    assert digest.chunk_token_counts == {} and digest.num_records == 51


def test_torn_last_record_line_is_skipped(bench_dir):
    """A run killed mid-write leaves a torn last line (bench appends to requests.jsonl as requests end)."""
    before = load_results(bench_dir).records.num_records
    with open(bench_dir / "requests.jsonl", "ab") as fh:
        fh.write(b'{"request_id": "torn", "lev')
    assert load_results(bench_dir).records.num_records == before == 48


@pytest.mark.parametrize(
    "content,match",
    [
        ('{"kind": "banana", "levels": []}', "kind 'banana'"),
        ('{"levels": []}', "no 'kind' key"),
        ("[1, 2]", "JSON list"),
        ('{"kind": "bench", ', "not valid JSON"),
    ],
)
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
    assert summary["manifest"] == "manifest.json"  # bench writes the manifest beside the summary and names it
    assert load_results(bench_dir).summary["manifest"]["command"][1] == "bench"
    # a hand-edited summary whose manifest path points outside the folder: ignored, not followed
    summary["manifest"] = "../elsewhere.json"
    (bench_dir / "summary.json").write_text(json.dumps(summary))
    results = load_results(bench_dir)
    assert results.summary["manifest"] is None and any("manifest" in m for m in results.missing)


def test_parse_slo_forms():
    assert parse_slo("ttft_p99_ms=500,itl_p99_ms=50,error_rate=0.01") == {
        "ttft_ms": {"p99": 500.0},
        "itl_ms": {"p99": 50.0},
    }
    assert parse_slo({"ttft_p50_ms": 100, "ttft_p99_ms": 400, "ttft_from_scheduled_p99_ms": 900}) == {
        "ttft_ms": {"p50": 100.0, "p99": 400.0},
        "ttft_from_scheduled_ms": {"p99": 900.0},
    }
    assert parse_slo(None) == {} and parse_slo({"ttft_p99_ms": "x"}) == {}


def test_preflight_limit_from_summary_or_verdicts():
    assert preflight_limit(SweepSummary.read({"preflight": {"max_safe_concurrency": 96}})) == 96
    assert preflight_limit(SweepSummary.read({"max_safe_concurrency": 80})) == 80  # where older bench runs wrote it
    levels = [  # bench writes each level's verdict as {verdict, ...}; older summaries wrote the word alone
        {"concurrency": c, "preflight": v}
        for c, v in ((32, "fits"), (64, {"verdict": "fits", "fix": None}), (128, {"verdict": "exceeds", "fix": {}}))
    ]
    assert preflight_limit(SweepSummary.read({"levels": levels})) == 64
    assert preflight_limit(SweepSummary.read({"levels": levels[:2]})) is None  # all fit: no limit reached, none drawn


def test_time_series_of_the_shapes_the_commands_write():
    # simulate's trace.jsonl: blocks used of the level's pool; bench's server_metrics.jsonl: the server's gauges
    trace = [
        {"level": 0, "step": 0, "t": 0.0, "kv_blocks_used": 10, "num_running": 5, "num_waiting": 3},
        {"level": 0, "step": 1, "t": 0.5, "kv_blocks_used": 20, "num_running": 6, "num_waiting": 0},
    ]
    series = time_series(trace, kv_blocks_total=100)
    assert series == {"t": [0.0, 0.5], "kv_usage": [0.1, 0.2], "queue": [3.0, 0.0], "running": [5.0, 6.0]}
    timeline = [
        {"level": 0, "t": 1.0, "kv_usage": 0.55, "running": 7, "waiting": 2, "preemptions_total": 0},
        {"t": None},
    ]
    assert time_series(timeline) == {"t": [1.0], "kv_usage": [0.55], "queue": [2.0], "running": [7.0]}
    assert time_series([{"t": 1.0}]) is None


def test_level_panels_split_a_trace_whose_clock_restarts_per_level():
    levels = [
        LevelSummary.model_validate(lv)
        for lv in ({"concurrency": 1, "server_metrics": {"num_kv_blocks": 100}}, {"concurrency": 8})
    ]
    rows = [
        {"level": 0, "t": 0.0, "kv_blocks_used": 10, "num_waiting": 0, "num_running": 1},
        {"level": 0, "t": 5.0, "kv_blocks_used": 20, "num_waiting": 0, "num_running": 1},
        {"level": 1, "t": 0.0, "kv_blocks_used": 50, "num_waiting": 4, "num_running": 8},
    ]
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
    summary = {
        "load": "concurrency",
        "plan": {"kv_capacity_tokens": 138304},
        "workload": {"isl": 1000, "osl": 200},
        "deployment": {"block_size": 16},
    }
    assert preflight_limit(SweepSummary.read(summary)) == 115
    summary["workload"]["isl"] = None  # a length distribution, not a fixed length: no limit claimed
    assert preflight_limit(SweepSummary.read(summary)) is None


def test_slo_from_the_recorded_command_line():
    assert (
        slo_spec({"manifest": {"command": ["kneecap", "simulate", "--slo", "ttft_p99_ms=2000"]}}) == "ttft_p99_ms=2000"
    )
    assert slo_spec({"manifest": {"command": ["kneecap", "bench", "--slo=itl_p99_ms=50"]}}) == "itl_p99_ms=50"
    assert slo_spec({"slo": {"ttft_p99_ms": 1}, "manifest": {"command": ["--slo", "x"]}}) == {"ttft_p99_ms": 1}
    assert slo_spec({}) is None


def test_concurrency_max_is_plotted_at_its_request_count():
    from kneecap.metrics.summary_model import LevelSummary
    from kneecap.report.levels import load_value

    def level(**keys):
        return LevelSummary.model_validate(keys)

    assert load_value(level(concurrency="max", requests=512), 3) == 512
    assert load_value(level(concurrency=8), 0) == 8 and load_value(level(rate=2.5), 0) == 2.5
    assert load_value(level(), 4) == 5
