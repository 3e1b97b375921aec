"""Qwen-Bailian traces (sessions: a child is its session's next request, several children of one parent a
fan-out) replayed on the simulator and over HTTP against `kneecap serve`: every request sent, each child after its
parent's answer and no earlier than its own time, the replay's lag (scheduled vs sent) in summary.json."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kneecap.errors import KneecapError
from kneecap.workload.traces import parse_trace, plan_replay, read_trace
from tests.clitools import run_cli

SAMPLE = Path(__file__).parent / "data" / "bailian_sessions.jsonl"


def _parents() -> dict[int, int]:
    """{row index in send order: its parent's}, from the file itself."""
    rows = [json.loads(line) for line in SAMPLE.read_text().splitlines()]
    order = {r["chat_id"]: i for i, r in enumerate(sorted(rows, key=lambda r: r["timestamp"]))}
    return {order[r["chat_id"]]: order[r["parent_chat_id"]] for r in rows if r["parent_chat_id"] != -1}


def test_sessions_parse_with_their_parents_and_16_token_blocks():
    trace = read_trace(SAMPLE)
    assert trace.format == "bailian" and trace.block_tokens == 16 and len(trace.rows) == 10
    replay = plan_replay(trace)
    by_id = {r.spec.request_id: r for r in replay.requests}
    for child, parent in _parents().items():
        spec = replay.requests[child].spec
        assert spec.after_ids == (replay.requests[parent].spec.request_id,)
        assert by_id[spec.after_ids[0]].send_at_s <= replay.requests[child].send_at_s
    fan_out = [c for c, p in _parents().items() if list(_parents().values()).count(p) == 3]
    assert len(fan_out) == 3  # the agent's three sub-agent calls


@pytest.mark.parametrize(
    "line,needle",
    [
        ('{"chat_id": 1, "timestamp": 0, "input_length": 5, "output_length": 5}', "lacks parent_chat_id"),
        ('{"chat_id": 1, "parent_chat_id": -1, "timestamp": -1, "input_length": 5, "output_length": 5}', "timestamp"),
    ],
)
def test_broken_lines_are_one_line_errors(line, needle):
    with pytest.raises(KneecapError, match=needle):
        parse_trace(line, "t.jsonl")


def _check_sessions(folder: Path, levels: int) -> dict:
    recs = [json.loads(x) for x in (folder / "requests.jsonl").read_text().splitlines()]
    for lv in range(levels):
        mine = sorted((r for r in recs if r["level"] == lv), key=lambda r: r["scheduled_at"] or 0)
        by_row = {int(r["request_id"].rsplit("r", 1)[1]) % 1_000_000: r for r in mine}
        assert len(by_row) == 10 and all(r["status"] == "ok" for r in mine)
        for child, parent in _parents().items():
            assert by_row[child]["sent_at"] >= by_row[parent]["end_at"], (lv, child, parent)
    summary = json.loads((folder / "summary.json").read_text())
    for lv in summary["levels"]:
        assert lv["completed"] == 10 and lv["schedule_lag_ms"]["n"] == 10
    return summary


def test_simulated_replay_keeps_each_child_after_its_parent(tmp_path):
    r = run_cli(
        "simulate",
        "--model",
        "llama-3.1-8b",
        "--gpu",
        "h100-sxm",
        "--replay",
        str(SAMPLE),
        "--replay-speed",
        "1,20",
        "--out",
        str(tmp_path / "sim"),
        "--no-report",
        "--quiet",
    )
    assert r.code == 0, r.stderr
    _check_sessions(tmp_path / "sim", 2)


def test_bench_replay_on_kneecap_serve_keeps_each_child_after_its_parent(tmp_path):
    from kneecap.cli.serve_process import start_server, stop_server

    proc, url = start_server(["--preset", "llama-3.1-8b", "--gpu", "h100-sxm", "--time-scale", "0.5"])
    try:
        r = run_cli(
            "bench",
            "--base-url",
            url,
            "--replay",
            str(SAMPLE),
            "--replay-speed",
            "1,20",
            "--out",
            str(tmp_path / "bench"),
            "--no-report",
            "--quiet",
        )
    finally:
        stop_server(proc)
    assert r.code == 0, r.stderr
    summary = _check_sessions(tmp_path / "bench", 2)
    assert all(lv["schedule_lag_ms"]["p99"] >= 0 for lv in summary["levels"])


def test_the_docs_worked_example_runs(tmp_path):
    import re
    import shlex

    root = Path(__file__).resolve().parents[2]
    text = (root / "docs" / "traces.md").read_text()
    command = re.search(r"```bash\n(kneecap simulate .*?)\n```", text, re.S).group(1).replace("\\\n", " ")
    args = shlex.split(command)[1:]
    args[args.index("--out") + 1] = str(tmp_path / "bailian")
    args[args.index("--replay") + 1] = str(root / args[args.index("--replay") + 1])
    r = run_cli(*args, "--no-report", "--quiet")
    assert r.code == 0, r.stderr
    _check_sessions(tmp_path / "bailian", 2)
