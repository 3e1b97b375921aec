"""`kneecap simulate --replay`: a Mooncake trace (lines copied from the published FAST'25 conversation trace,
tests/workload/data) replayed on the simulated engine — every row sent at its own time (scaled by
--replay-speed), equal hash ids sharing prefix-cache blocks, rows past the context refused or skipped."""

from __future__ import annotations

import json
from pathlib import Path

from clitools import run_cli

TRACE = Path(__file__).resolve().parents[1] / "workload" / "data" / "mooncake_conversation_head.jsonl"
BASE = ["simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-report", "--json"]
ROWS = [json.loads(line) for line in TRACE.read_text().splitlines() if line.strip()]


def records(folder: Path) -> list[dict]:
    return [json.loads(line) for line in (folder / "requests.jsonl").read_text().splitlines()]


def test_rows_are_sent_at_the_traces_times_scaled_by_the_speed(tmp_path):
    r = run_cli(*BASE, "--replay", str(TRACE), "--replay-speed", "1,4", "--out", str(tmp_path / "run"))
    assert r.code == 0, r.stderr
    doc = json.loads(r.stdout)
    assert [lv["completed"] for lv in doc["levels"]] == [len(ROWS)] * 2
    t0 = min(row["timestamp"] for row in ROWS) / 1000
    for level, speed in ((0, 1), (1, 4)):
        sent = sorted(rec["scheduled_at"] for rec in records(tmp_path / "run") if rec["level"] == level)
        assert sent == sorted((row["timestamp"] / 1000 - t0) / speed for row in ROWS)
    got = sorted((rec["prompt_tokens"], rec["output_tokens"]) for rec in records(tmp_path / "run") if rec["level"] == 0)
    assert got == sorted((row["input_length"], row["output_length"]) for row in ROWS)
    rate = doc["levels"][0]["rate"]
    assert doc["levels"][1]["rate"] == rate * 4


def test_equal_hash_ids_are_prefix_cache_hits(tmp_path):
    shared = run_cli(*BASE, "--replay", str(TRACE), "--out", str(tmp_path / "shared"))
    unique_trace = tmp_path / "unique.jsonl"
    unique_trace.write_text(
        "".join(
            json.dumps(dict(row, hash_ids=[1000 * (i + 1) + k for k in range(len(row["hash_ids"]))])) + "\n"
            for i, row in enumerate(ROWS)
        )
    )
    unique = run_cli(*BASE, "--replay", str(unique_trace), "--out", str(tmp_path / "unique"))
    assert shared.code == 0 and unique.code == 0, shared.stderr + unique.stderr
    hit = json.loads(shared.stdout)["levels"][0]["server_metrics"]
    miss = json.loads(unique.stdout)["levels"][0]["server_metrics"]
    assert miss["prefix_cache_hit_rate"] == 0
    # every row of the trace's head starts with hash id 0: at most 512 tokens of each of the 5 later rows can hit
    queried = sum(row["input_length"] for row in ROWS)
    assert 0 < hit["prefix_cache_hit_rate"] <= 5 * 512 / queried + 1e-9


def test_rows_past_the_context_stop_the_replay_unless_skipped(tmp_path):
    too_long = run_cli(*BASE, "--context", "4096", "--replay", str(TRACE), "--out", str(tmp_path / "a"))
    lines = [ln for ln in too_long.stderr.splitlines() if ln.strip()]
    assert too_long.code == 2 and len(lines) == 1 and "exceed the 4096-token context" in lines[0], too_long.stderr
    skipped = run_cli(
        *BASE, "--context", "4096", "--replay", str(TRACE), "--skip-too-long", "--out", str(tmp_path / "b")
    )
    assert skipped.code == 0, skipped.stderr
    fits = [row for row in ROWS if row["input_length"] + row["output_length"] <= 4096]
    assert json.loads(skipped.stdout)["levels"][0]["completed"] == len(fits)
    assert f"skipped {len(ROWS) - len(fits)} trace rows" in skipped.stderr


def test_a_broken_trace_line_names_the_file_and_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(TRACE.read_text().splitlines()[0] + '\n{"timestamp": 5, "input_length": \n')
    r = run_cli(*BASE, "--replay", str(bad), "--out", str(tmp_path / "c"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and "bad.jsonl" in lines[0] and "line 2" in lines[0], r.stderr
