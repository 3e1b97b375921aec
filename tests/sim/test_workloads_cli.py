"""`kneecap simulate --dataset` (lengths from the data) and `--ramp` (a rate rising over a level, metrics per
slice), through the one level runner on the simulated engine."""

from __future__ import annotations

import json

from clitools import run_cli

BASE = ["simulate", "--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--no-report", "--json"]


def test_dataset_lengths_come_from_the_data(tmp_path):
    data = tmp_path / "prompts.jsonl"
    lines = [{"prompt": "word " * (40 * (i + 1)), "output_len": 10 + 7 * i} for i in range(6)]  # 200 x (i+1) chars
    data.write_text("".join(json.dumps(line) + "\n" for line in lines))
    out = tmp_path / "run"
    r = run_cli(*BASE, "--dataset", str(data), "--concurrency", "2", "--requests", "12", "--out", str(out))
    assert r.code == 0, r.stderr
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    assert len(recs) == 12 and all(rec["status"] == "ok" for rec in recs)
    wanted_out = {line["output_len"] for line in lines}
    assert {rec["output_tokens"] for rec in recs} <= wanted_out and len({rec["output_tokens"] for rec in recs}) > 1
    # prompt tokens estimated at 4 characters a token: 200 x (i + 1) characters -> 50 x (i + 1) tokens
    assert {rec["prompt_tokens"] for rec in recs} <= {50 * (i + 1) for i in range(6)}


def test_a_ramp_raises_the_rate_over_the_level_and_reports_slices(tmp_path):
    out = tmp_path / "ramp"
    r = run_cli(*BASE, "--isl", "500", "--osl", "100", "--ramp", "linear:1:20:30", "--seed", "3", "--out", str(out))
    assert r.code == 0, r.stderr
    level = json.loads(r.stdout)["levels"][0]
    expected = 1 * 30 + (20 - 1) * 30 / 2  # the integral of the rate over the ramp: 315 requests
    assert abs(level["requests"] - expected) < 4 * expected**0.5  # Poisson: within 4 standard deviations
    assert level["rate"] == expected / 30
    slices = level["slices"]
    assert len(slices) == 10
    targets = [s["target_rate"] for s in slices]
    assert targets == sorted(targets) and targets[0] < 3 and targets[-1] > 18
    assert sum(s["requests"] for s in slices) == level["requests"]
    assert sum(s["requests"] for s in slices[:3]) < sum(s["requests"] for s in slices[-3:])
    sent = [json.loads(line)["scheduled_at"] for line in (out / "requests.jsonl").read_text().splitlines()]
    assert min(sent) == 0 and max(sent) <= 30


def test_a_concurrency_ramp_is_refused_in_one_line(tmp_path):
    r = run_cli(*BASE, "--concurrency", "4", "--ramp", "linear:1:8:10", "--out", str(tmp_path / "x"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and "--ramp" in lines[0], r.stderr


def test_multi_turn_conversations_grow_and_hit_the_prefix_cache(tmp_path):
    out = tmp_path / "turns"
    r = run_cli(
        *BASE,
        "--isl",
        "300",
        "--osl",
        "100",
        "--turns",
        "3",
        "--concurrency",
        "4",
        "--requests",
        "24",
        "--think-time-s",
        "1",
        "--out",
        str(out),
    )
    assert r.code == 0, r.stderr
    level = json.loads(r.stdout)["levels"][0]
    assert level["completed"] == 24 and level["server_metrics"]["prefix_cache_hit_rate"] > 0.3
    recs = [json.loads(line) for line in (out / "requests.jsonl").read_text().splitlines()]
    by_conv: dict = {}
    for rec in recs:
        by_conv.setdefault(rec["conversation_id"], {})[rec["turn"]] = rec
    assert len(by_conv) == 8 and all(sorted(turns) == [1, 2, 3] for turns in by_conv.values())
    block = 16  # vLLM's default block size: the prefix cache shares whole blocks
    for turns in by_conv.values():
        for k in (2, 3):
            prev, cur = turns[k - 1], turns[k]
            # turn k's prompt = turn k-1's prompt + its answer + the new input
            assert cur["prompt_tokens"] == prev["prompt_tokens"] + prev["output_tokens"] + 300
            # ... whose whole blocks are already cached (the previous prompt's full blocks)
            assert cur["extra"]["cached_tokens"] == (prev["prompt_tokens"] - 1) // block * block
            # ... and it is sent after the answer and the user's think time
            assert cur["scheduled_at"] >= prev["end_at"] + 1.0
        assert turns[1]["extra"]["cached_tokens"] == 0


def test_turns_must_divide_the_requests(tmp_path):
    r = run_cli(*BASE, "--turns", "3", "--concurrency", "4", "--requests", "20", "--out", str(tmp_path / "x"))
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.code == 2 and len(lines) == 1 and ("--turns" in lines[0] or "3-turn" in lines[0]), r.stderr


def test_summary_says_which_workload_ran(tmp_path):
    """Two runs of different workloads must be told apart from their summaries (and a report must not run a
    fixed-length preflight on lengths that were never fixed)."""
    turns = json.loads(
        run_cli(
            *BASE,
            "--isl",
            "300",
            "--osl",
            "100",
            "--turns",
            "3",
            "--concurrency",
            "2",
            "--requests",
            "6",
            "--think-time-s",
            "0.5",
            "--out",
            str(tmp_path / "t"),
        ).stdout
    )
    assert turns["workload"]["turns"] == 3 and turns["workload"]["think_time_s"] == 0.5
    assert turns["workload"]["isl"] is None and turns["workload"]["ramp"] is None
    ramp = json.loads(
        run_cli(*BASE, "--isl", "200", "--osl", "20", "--ramp", "exp:1:8:10", "--out", str(tmp_path / "r")).stdout
    )
    assert ramp["workload"]["ramp"] == {"kind": "exp", "start": 1.0, "end": 8.0, "duration_s": 10.0}
    assert (ramp["workload"]["isl"], ramp["workload"]["turns"]) == (200, None)
